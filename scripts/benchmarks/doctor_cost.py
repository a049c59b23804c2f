"""What the doctor's readings cost, on a database with a backlog.

    python scripts/benchmarks/doctor_cost.py [--rows 200000] [--reads 200] [--dsn DSN]

Loads a fresh database with ROWS available jobs (and as many consumed, so pgq.jobs holds dead
rows), then times, READS times each, the readings the other parts reuse (the horizon document
the master sends every 10 s and `status` and the dashboard read; the pressure and vacuum
documents of the dashboard's page) beside the claim's EXPLAIN ANALYZE that only the command
runs, and one whole `doctor` (its headroom sample included). Prints the figures, then one line
of JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from benchlib.common import connect, fresh_database, latency_summary_ms

from supervisor.config import parse_config
from supervisor.doctor import claim
from supervisor.doctor.checks import diagnose
from supervisor.doctor.runner import Probe, bound
from supervisor.doctor.sql import doctor_query
from supervisor.queue.migrations import migrate

CONFIG = """
handlers: {render_pdf: tests.handlers:noop}
pools: {pdf: {processes: 2, batch: 10, queues: {pdf: 1}}}
"""


def timed(reads: int, fn: Any) -> dict[str, float | int]:
    fn()  # warm: the plan cached, the pages in memory
    spent = []
    for _ in range(reads):
        start = time.perf_counter()
        fn()
        spent.append(time.perf_counter() - start)
    return latency_summary_ms(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--reads", type=int, default=200)
    parser.add_argument(
        "--dsn", default=os.environ.get("PGQ_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    )
    args = parser.parse_args()
    config = parse_config(CONFIG, source="doctor_cost.yaml")
    with fresh_database(args.dsn, "doctor_cost") as dsn:
        migrate(dsn)
        with connect(dsn) as conn:
            conn.execute(
                "INSERT INTO pgq.jobs (queue, kind, args) "
                "SELECT 'pdf', 'render_pdf', '{}' FROM generate_series(1, %s * 2)",
                (args.rows,),
            )
            conn.execute("DELETE FROM pgq.jobs WHERE id % 2 = 0")
            conn.execute("ANALYZE pgq.jobs")
            bound(conn, 30)
            probe = Probe(conn, config)
            results: dict[str, Any] = {"rows": args.rows, "reads": args.reads}
            for name, params in (
                ("horizon", None),
                ("pressure", {"lease_margin": 10.0}),
                ("vacuum", None),
                ("oldest_due", None),
            ):
                results[name] = timed(
                    args.reads, lambda n=name, p=params: conn.execute(doctor_query(n), p).fetchone()
                )
            pages = int(probe.rows("table_pages")[0][0])
            results["claim_explain"] = timed(
                max(1, args.reads // 10), lambda: claim.explain(probe, "pdf", pages)
            )
            start = time.perf_counter()
            checks = diagnose(conn, config)
            results["doctor_seconds"] = round(time.perf_counter() - start, 3)
            results["checks"] = len(checks)
    for key in ("horizon", "pressure", "vacuum", "oldest_due", "claim_explain"):
        r = results[key]
        print(f"{key:<14} p50 {r['p50_ms']:8.3f} ms  p99 {r['p99_ms']:8.3f} ms  (n={r['n']})")
    whole = results["doctor_seconds"]
    print(f"whole doctor   {whole:.3f} s ({results['checks']} checks, a 1 s sample)")
    print(
        f"horizon vs claim EXPLAIN (p50): 1 : "
        f"{results['claim_explain']['p50_ms'] / max(1e-9, results['horizon']['p50_ms']):.1f}"
    )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
