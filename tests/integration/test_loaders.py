"""The children's jsonb loader (supervisor/queue/loaders.py) reads every job's args exactly as
psycopg's own loader does."""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor import enqueue
from supervisor.queue.loaders import use_fast_json

ARGS: list[dict[str, Any]] = [
    {},
    {"n": 1, "big": 2**70, "f": 1.5, "neg": -0.0, "t": True, "none": None},
    {"s": 'é 漢字 🎉 \\ " \n', "nested": {"l": [1, [2, {"x": []}]]}},
    {"long": "x" * 100_000},
]


def test_the_fast_loader_reads_what_psycopgs_reads(dsn: str) -> None:
    with (
        psycopg.connect(dsn, autocommit=True) as plain,
        psycopg.connect(dsn, autocommit=True) as fast,
    ):
        use_fast_json(fast)
        ids = [enqueue(plain, "k", args) for args in ARGS]
        for job_id, args in zip(ids, ARGS, strict=True):
            statement = "SELECT args, args::json FROM pgq.jobs WHERE id = %s"
            expected = plain.execute(statement, (job_id,)).fetchone()
            got = fast.execute(statement, (job_id,)).fetchone()
            assert got == expected == (args, args)
            got_binary = fast.execute(statement, (job_id,), binary=True).fetchone()
            assert got_binary == plain.execute(statement, (job_id,), binary=True).fetchone()
            assert got_binary == (args, args)
        # Only the connection it was registered on: another keeps psycopg's loader.
        jsonb = psycopg.adapters.types["jsonb"].oid
        text = psycopg.pq.Format.TEXT
        assert fast.adapters.get_loader(jsonb, text).__name__ == "_JsonbTextLoader"
        assert plain.adapters.get_loader(jsonb, text).__name__ != "_JsonbTextLoader"
