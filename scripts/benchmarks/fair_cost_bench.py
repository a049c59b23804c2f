"""Fair share by cost against by count (issue 34, docs/job-cost.md).

    python scripts/benchmarks/fair_cost_bench.py [--dsn DSN] [--seconds 60] [--cheap 0.02]
                                                 [--ratio 10]

Two tenants share one queue: tenant `cheap` enqueues jobs that cost --cheap CPU seconds each,
tenant `dear` jobs --ratio times as costly, both far more than can run in the window. A
supervisor with one inline child (batch 1) serves the queue for --seconds, first with the
default fairness (by count), then with `tenants: {fair: {fairness: cost}}`. Each run's CPU
seconds per tenant come from pgq.attempt_costs (what the children measured); the first tenth of
the window is left out (the cost fairness learns each tenant's cost from its first attempts).

By count the CPU shares are about 1 : ratio; by cost they should be within 10% of equal. The
last line on stdout is one JSON object; the exit status is 0 only if both held.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from supervisor import NewJob, enqueue_many, migrate  # noqa: E402


def run(dsn: str, workdir: Path, fairness: str, args: argparse.Namespace) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.jobs WHERE queue = 'fair'")
        conn.execute("DELETE FROM pgq.attempt_costs WHERE queue = 'fair'")
    # Far more of each than the window can run, interleaved so neither waits behind the other.
    room = int(args.seconds / args.cheap) + 10
    jobs = []
    for i in range(room):
        jobs.append(NewJob("burn", {"cpu_seconds": args.cheap}, queue="fair", tenant="cheap"))
        if i % 2 == 0:
            dear = {"cpu_seconds": args.cheap * args.ratio}
            jobs.append(NewJob("burn", dear, queue="fair", tenant="dear"))
    with psycopg.connect(dsn) as conn:
        enqueue_many(conn, jobs)
    path = workdir / f"{fairness}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            handlers: {{burn: "elastic_jobs:burn"}}
            history: {{enabled: true}}
            shutdown_timeout: 10s
            tenants: {{fair: {{fairness: {fairness}}}}}
            pools:
              p: {{queues: {{fair: 1}}, processes: 1}}
            """
        )
    )
    env = {
        **os.environ,
        "PGQ_DSN": dsn,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'scripts' / 'benchmarks'}",
    }
    with open(workdir / f"{fairness}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "-c", str(path)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        time.sleep(args.seconds)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            """
            WITH window_ AS (
                SELECT min(finished_at) + (max(finished_at) - min(finished_at)) / 10 AS after
                FROM pgq.attempt_costs WHERE queue = 'fair'
            )
            SELECT tenant, count(*), sum(cpu_seconds)
            FROM pgq.attempt_costs, window_
            WHERE queue = 'fair' AND finished_at >= window_.after
            GROUP BY tenant
            """
        ).fetchall()
    cpu = {tenant: float(seconds) for tenant, _, seconds in rows}
    count = {tenant: int(n) for tenant, n, _ in rows}
    total = sum(cpu.values()) or 1.0
    return {
        "fairness": fairness,
        "jobs": count,
        "cpu_seconds": {t: round(s, 2) for t, s in cpu.items()},
        "cpu_share": {t: round(s / total, 3) for t, s in cpu.items()},
        "cheap_to_dear_cpu": round(cpu.get("cheap", 0.0) / max(cpu.get("dear", 0.0), 1e-9), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQ_DSN"))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--cheap", type=float, default=0.02, help="CPU seconds of a cheap job")
    parser.add_argument("--ratio", type=float, default=10.0)
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("give --dsn or PGQ_DSN")
    migrate(args.dsn)
    with tempfile.TemporaryDirectory(prefix="pgq-fair-") as tmp:
        by_count = run(args.dsn, Path(tmp), "count", args)
        by_cost = run(args.dsn, Path(tmp), "cost", args)
    checks = {
        "by count: the dear tenant takes most of the CPU": by_count["cheap_to_dear_cpu"] < 0.5,
        "by cost: CPU shares within 10% of equal": 0.9 <= by_cost["cheap_to_dear_cpu"] <= 1.1,
    }
    report = {"by_count": by_count, "by_cost": by_cost, "checks": checks}
    report["ok"] = all(checks.values())
    print(json.dumps(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
