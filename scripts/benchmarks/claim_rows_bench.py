"""What reading a claimed row costs the child, column by column: psycopg's text and binary
results, and the children's jsonb loader (supervisor/queue/loaders.py). Figures as text, then
one JSON line.

    python scripts/benchmarks/claim_rows_bench.py [--dsn DSN] [--rounds 5] [--fetches 200]

A fresh database holds 100 jobs with small args; each variant reads them (100 rows a fetch, the
claim's batch of 100) ``fetches`` times in a round, rounds alternating between variants; the
figure is the median over rounds of this process's CPU time per row inside fetchall(), minus the
same for a one-column row (the fixed cost of a row). The whole claim row is the claim
statement's final SELECT list, read from the table; the last line is the wall time of one execute
and fetch of those 100 whole rows (the server's formatting and the round trip included).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg
from benchlib.common import fresh_database, median

from supervisor import NewJob, enqueue_many, migrate
from supervisor.queue.loaders import use_fast_json

COLUMNS = ["args", "run_at", "created_at", "id", "queue", "kind", "priority", "attempts"]
ROW = (
    "id, queue, kind, args, priority, run_at, attempts, max_attempts, lease_id, "
    "run_at AS lease_until, created_at, batch, traceparent, tenant, NULL::bigint[] AS completed, "
    "NULL::float8 AS limit_wait"
)


def per_row_us(conn: psycopg.Connection[Any], select: str, binary: bool, fetches: int) -> float:
    cur = conn.cursor(binary=binary)
    spent = 0.0
    statement = f"SELECT 1, {select} FROM pgq.jobs LIMIT 100"
    for _ in range(fetches):
        cur.execute(statement)
        started = time.process_time()
        cur.fetchall()
        spent += time.process_time() - started
    return spent / (fetches * 100) * 1e6


def fetch_wall_us(conn: psycopg.Connection[Any], binary: bool, fetches: int) -> float:
    """Wall time of one execute and fetchall of the 100 whole claim rows: with the server's
    side (formatting each value as text, or not) and the round trip, which CPU time misses."""
    cur = conn.cursor(binary=binary)
    statement = f"SELECT 1, {ROW} FROM pgq.jobs LIMIT 100"
    cur.execute(statement, prepare=True)
    cur.fetchall()
    started = time.perf_counter()
    for _ in range(fetches):
        cur.execute(statement, prepare=True)
        cur.fetchall()
    return (time.perf_counter() - started) / fetches * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fetches", type=int, default=200)
    args = parser.parse_args()
    variants = {
        "text": (False, False),
        "binary": (True, False),
        "text, fast json": (False, True),
        "binary, fast json": (True, True),
    }
    selects = {"(row)": "1", **{c: c for c in COLUMNS}, "whole claim row": ROW}
    samples: dict[str, dict[str, list[float]]] = {}
    walls: dict[str, list[float]] = {}
    with fresh_database(args.dsn, "claim_rows") as db:
        migrate(db)
        with psycopg.connect(db, autocommit=True) as conn:
            enqueue_many(conn, [NewJob("noop", {"i": i, "s": "x" * 20}) for i in range(100)])
        with (
            psycopg.connect(db, autocommit=True) as plain,
            psycopg.connect(db, autocommit=True) as fast,
        ):
            use_fast_json(fast)
            for _ in range(args.rounds):
                for variant, (binary, fast_json) in variants.items():
                    conn = fast if fast_json else plain
                    for name, select in selects.items():
                        samples.setdefault(variant, {}).setdefault(name, []).append(
                            per_row_us(conn, select, binary, args.fetches)
                        )
                    walls.setdefault(variant, []).append(fetch_wall_us(conn, binary, args.fetches))
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for variant, by in samples.items():
        fixed = median(by["(row)"])
        report[variant] = {
            name: round(median(v) - (0 if name == "(row)" else fixed), 2) for name, v in by.items()
        }
    print(f"CPU per row read (us), 100 rows a fetch, median of {args.rounds} rounds:")
    print(f"  {'column':18s}" + "".join(f"{v:>18s}" for v in variants))
    for name in selects:
        print(f"  {name:18s}" + "".join(f"{report[v][name]:>18.2f}" for v in variants))
    for variant in variants:
        report[variant]["fetch_wall_us"] = round(median(walls[variant]), 1)
    print(f"  {'100 rows, wall us':18s}" + "".join(f"{median(walls[v]):>18.1f}" for v in variants))
    print(json.dumps(report, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
