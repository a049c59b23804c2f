"""What an unknown job holding its unique key costs (issue 30): keyed jobs are now in two unique
indexes (jobs_unique_key, for the previous release's producers, and jobs_unique_key_held, which
covers unknown jobs too). Side by side in one run, taking turns round by round on two databases
of the same schema, one with jobs_unique_key_held dropped (as before migration 0041):

1. enqueue with a new key each time (an insert into both indexes),
2. enqueue of a key already held (the arbiter finds the holder, the look-up returns it),
3. claim and complete 10 keyed jobs (each state change writes index entries).

Figures: the median seconds per call of each, and the ratio after/before. Prints a table, then
one JSON line.

    .venv/bin/python scripts/benchmarks/unique_key_bench.py [--dsn DSN] [--rounds 20] [--per 100]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchlib.common import fresh_database

from supervisor import claim, complete, enqueue, migrate

SHAPES = ("new key", "held key", "claim+complete 10")


def _timed(fn: Callable[[], Any], times: int) -> float:
    start = time.perf_counter()
    for _ in range(times):
        fn()
    return (time.perf_counter() - start) / times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQ_DSN", "postgresql://127.0.0.1/"))
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--per", type=int, default=100, help="calls per shape and round")
    a = parser.parse_args()
    results: dict[str, dict[str, list[float]]] = {
        v: {s: [] for s in SHAPES} for v in ("before", "after")
    }
    with (
        fresh_database(a.dsn, "ukey_before") as before_dsn,
        fresh_database(a.dsn, "ukey_after") as after_dsn,
    ):
        migrate(before_dsn)
        migrate(after_dsn)
        with (
            psycopg.connect(before_dsn, autocommit=True) as before,
            psycopg.connect(after_dsn, autocommit=True) as after,
        ):
            before.execute("DROP INDEX pgq.jobs_unique_key_held")
            counter = itertools.count()
            for conn in (before, after):
                enqueue(conn, "k", unique_key="held", notify=False)
            for _ in range(a.rounds):
                for name, conn in (("before", before), ("after", after)):
                    figures = results[name]
                    figures["new key"].append(
                        _timed(
                            lambda c=conn: enqueue(
                                c, "k", unique_key=f"k{next(counter)}", notify=False
                            ),
                            a.per,
                        )
                    )
                    figures["held key"].append(
                        _timed(
                            lambda c=conn: enqueue(c, "k", unique_key="held", notify=False), a.per
                        )
                    )

                    def cycle(c: psycopg.Connection[Any] = conn) -> None:
                        complete(c, claim(c, "default", worker="bench", limit=10))

                    figures["claim+complete 10"].append(_timed(cycle, max(1, a.per // 10)))
    table = {
        shape: {
            "before_s": statistics.median(results["before"][shape]),
            "after_s": statistics.median(results["after"][shape]),
        }
        for shape in SHAPES
    }
    for figures in table.values():
        figures["ratio"] = figures["after_s"] / figures["before_s"]
    print(f"{'shape':<20} {'before':>12} {'after':>12} {'after/before':>13}")
    for shape, f in table.items():
        print(
            f"{shape:<20} {f['before_s'] * 1e6:>10.0f}us {f['after_s'] * 1e6:>10.0f}us "
            f"{f['ratio']:>13.3f}"
        )
    print(json.dumps({"rounds": a.rounds, "per": a.per, "shapes": table}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
