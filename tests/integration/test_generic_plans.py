"""The child's statements under generic plans made while pgq.jobs was (nearly) empty.

A child plans the statements it repeats once (supervisor.queue.jobs.use_generic_plans): the
claim's planning was most of its cost. A generic plan is kept for the session, and the first
one may be made on a fresh database, while the table is empty: it must still read the table by
its indexes once the table holds a backlog, or every claim would read the whole queue until
the session ends or the table's statistics change."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.queue.claim_builder import VARIANTS
from supervisor.queue.jobs import claim, claim_params, use_generic_plans
from supervisor.queue.queries import native

BACKLOG = 20_000


def _values(conn: psycopg.Connection[Any]) -> dict[str, dict[str, Any]]:
    enqueue_many(conn, [NewJob("k", tenant=f"t{n % 3}") for n in range(40)])
    jobs = claim(conn, "default", worker="w", limit=20)
    fence = {"ids": [j.id for j in jobs], "lease_ids": [j.lease_id for j in jobs]}
    return {
        # Every variant of the claim (claim_builder), at the batch it is sent for.
        **{
            name: claim_params(
                "default", worker="w", limit=1 if "_one" in name else 10, done=jobs[:10]
            )
            for name in VARIANTS
        },
        "settle": {
            **fence,
            "history": False,
            "states": ["available"] * len(jobs),
            "delays": [1.0] * len(jobs),
            "refunds": [0] * len(jobs),
            "errors": ["e"] * len(jobs),
        },
        "lease_held": {"id": jobs[0].id, "lease_id": jobs[0].lease_id},
        "cancel_requested": {"id": jobs[0].id, "lease_id": jobs[0].lease_id},
    }


@pytest.mark.parametrize("name", [*VARIANTS, "settle", "lease_held", "cancel_requested"])
def test_a_generic_plan_made_on_an_empty_table_reads_a_backlog_by_index(
    conn: psycopg.Connection[Any], name: str
) -> None:
    values = _values(conn)[name]
    conn.execute("ANALYZE pgq.jobs")  # the statistics of a table of one page
    with conn.transaction(force_rollback=True):
        statement, names = native(name)
        use_generic_plans(conn)
        conn.execute(f"PREPARE generic AS {statement}")
        cursor = psycopg.ClientCursor(conn)
        placeholders = ", ".join(["%s"] * len(names))
        run = f"EXECUTE generic({placeholders})"
        cursor.execute(run, [values[n] for n in names])  # the generic plan is made here
        conn.execute(
            "INSERT INTO pgq.jobs (kind, tenant) SELECT 'k', 't' || (g %% 3) "
            "FROM generate_series(1, %s) AS g",
            (BACKLOG,),
        )
        plan = "\n".join(
            r[0] for r in cursor.execute(f"EXPLAIN (ANALYZE) {run}", [values[n] for n in names])
        )
    conn.execute("DEALLOCATE generic")
    conn.execute("RESET plan_cache_mode; RESET enable_seqscan")
    assert "Seq Scan on jobs" not in plan, plan
    # No node reads more of the table than a claim's worth of rows (the backlog is 20,000).
    for line in plan.splitlines():
        read = re.search(r" on jobs .*actual time=\S+ rows=([\d.]+) loops=(\d+)", line)
        if read:
            assert float(read[1]) * int(read[2]) < 500, plan
