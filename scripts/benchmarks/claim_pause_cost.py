"""What the pause check costs a claim: the claim statement with and without its probe of
pgq.queue_pauses, on the same table (20,000 waiting jobs, a few paused queues), interleaved so
both see the same cache and vacuum state. Prints a table and one JSON line.

    .venv/bin/python scripts/benchmarks/claim_pause_cost.py [--dsn DSN] [--rounds 3] [--claims 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.common import fresh_database

from supervisor import NewJob, enqueue_many, migrate, pause_queue
from supervisor.queue.jobs import claim_params, claimed_jobs
from supervisor.queue.queries import query

PAUSE_CHECK = "WHERE NOT EXISTS (SELECT 1 FROM pgq.queue_pauses AS qp WHERE qp.queue = pool.queue)"


def claim_latencies(conn: psycopg.Connection[Any], sql: str, claims: int) -> list[float]:
    """Latency in ms of each claim (batch 10); the claimed jobs go back to available so every
    claim sees the same backlog."""
    params = claim_params("default", worker="bench", limit=10, lease_seconds=60)
    latencies = []
    for _ in range(claims):
        started = time.perf_counter()
        jobs = claimed_jobs(conn.execute(sql, params))
        latencies.append((time.perf_counter() - started) * 1000)
        conn.execute(
            "UPDATE pgq.jobs SET state = 'available', lease_id = NULL, locked_by = NULL,"
            " lease_until = NULL, attempts = 0 WHERE id = ANY(%s)",
            ([j.id for j in jobs],),
        )
    return latencies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claims", type=int, default=2000)
    args = parser.parse_args()
    with_check = query("claim")
    assert PAUSE_CHECK in with_check, "the claim no longer has the pause check this measures"
    without = with_check.replace(PAUSE_CHECK, "")
    figures: dict[str, list[float]] = {"without": [], "with": []}
    with fresh_database(args.dsn, "claim_pause") as db:
        migrate(db)
        with psycopg.connect(db, autocommit=True) as conn:
            enqueue_many(conn, [NewJob("noop", {"i": i}) for i in range(20_000)], notify=False)
            for queue in ("reports", "exports", "imports"):
                pause_queue(conn, queue)
            conn.execute("VACUUM ANALYZE pgq.jobs")
            plan = conn.execute(
                "EXPLAIN " + with_check,
                claim_params("default", worker="x", limit=10, lease_seconds=60),
            ).fetchall()
            for _ in range(args.rounds):
                for name, sql in (("without", without), ("with", with_check)):
                    figures[name].extend(claim_latencies(conn, sql, args.claims))
    summary = {
        name: {
            "p50_ms": round(statistics.median(values), 4),
            "mean_ms": round(statistics.fmean(values), 4),
            "p99_ms": round(statistics.quantiles(values, n=100)[98], 4),
            "claims": len(values),
        }
        for name, values in figures.items()
    }
    ratio = summary["with"]["p50_ms"] / summary["without"]["p50_ms"]
    print("claim of 10 from 20,000 waiting jobs, one connection, autocommit")
    for name, s in summary.items():
        print(
            f"  {name:>7} pause check: p50 {s['p50_ms']:.3f} ms  mean {s['mean_ms']:.3f} ms"
            f"  p99 {s['p99_ms']:.3f} ms  ({s['claims']} claims)"
        )
    print(f"  ratio of p50s: {ratio:.3f}")
    print("plan:")
    for (line,) in plan:
        print(f"  {line}")
    print(json.dumps({"claim_pause_cost": summary, "p50_ratio": round(ratio, 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
