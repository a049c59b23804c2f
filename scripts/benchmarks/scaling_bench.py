"""How our cost scales with the shapes production grows into: backlog, children with I/O-bound
handlers, and the CPU per job at batch 100. Figures as text, then one JSON line. Each shape is
one short run of the real supervisor on a fresh database; every figure is also a ratio to the
smallest case of its shape, measured in the same run.

    python scripts/benchmarks/scaling_bench.py [--dsn DSN] [--only backlog,children,cpu]
                                    [--backlogs 1000,10000,100000,1000000] [--with-10m]
                                    [--children 1,2,4,8,16,32] [--measured 20000]

- backlog: B no-op jobs wait in the queue, and ``--measured`` more of a higher priority, which
  the claims take first (they sit at the head of the claim index, above the backlog). Time to
  drain the measured ones, 2 children at batch 10: jobs/s against B (1k to 1M; 10M with
  --with-10m, which takes minutes to fill). Timed by polling the database clock every 2 ms
  from the first claim to the last measured job claimed.
- children: N children, batch 1, each job a 50 ms sleep (a handler waiting on I/O): jobs/s
  against the ideal N / 50 ms. The children are all connected and asleep before 100 jobs a
  child (5 s at the ideal rate) are enqueued in one statement; timed from the first claim to
  none left.
- cpu: the CPU time of the children and the master per job (psutil), draining 50,000 no-op jobs
  with 2 children at batch 100: what scripts/benchmarks/profile_drain.py --no-profile measures,
  here so the table's row comes from one command.
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

import psutil
import psycopg
from benchlib import ours
from benchlib.common import default_log_dir, fresh_database, rate

from supervisor import NewJob, enqueue_many, migrate

ONLY = ("backlog", "children", "cpu")
FILL = """
INSERT INTO pgq.jobs (queue, kind, priority)
SELECT 'default', 'noop', %(priority)s
FROM generate_series(1, %(jobs)s)
"""
# The measured jobs are the only ones at priority 1: the claim index (queue, priority DESC, ...)
# finds whether one is left at its very first entry.
MEASURED_LEFT = """
SELECT (SELECT is_called FROM pgq.lease_seq),
       NOT EXISTS (SELECT 1 FROM pgq.jobs
                   WHERE state = 'available' AND queue = 'default' AND priority = 1),
       clock_timestamp()
"""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def backlog(dsn: str, sizes: list[int], measured: int, log: Path) -> dict[str, Any]:
    results: dict[int, dict[str, Any]] = {}
    for size in sizes:
        with fresh_database(dsn, f"scaling_backlog_{size}") as db:
            migrate(db)
            with psycopg.connect(db, autocommit=True) as conn:
                filled = time.monotonic()
                for start in range(0, size, 1_000_000):
                    conn.execute(FILL, {"jobs": min(1_000_000, size - start), "priority": 0})
                conn.execute(FILL, {"jobs": measured, "priority": 1})
                conn.execute("VACUUM ANALYZE pgq.jobs")
                fill_s = time.monotonic() - filled
                with ours.Supervisor(db, ours.config_text(2, 10), log, f"backlog-{size}") as sup:
                    first = None
                    deadline = time.monotonic() + 300
                    while True:
                        claimed, done, now = conn.execute(MEASURED_LEFT).fetchone()  # type: ignore[misc]
                        if first is None and claimed:
                            first = now
                        if done and first is not None:
                            break
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"backlog {size}: measured jobs not drained")
                        sup.check_alive()
                        time.sleep(0.002)
                seconds = (now - first).total_seconds()
        results[size] = {"jobs_per_s": rate(measured, seconds), "fill_s": round(fill_s, 1)}
        say(f"  backlog {size:>10,}: {results[size]['jobs_per_s']:>9,.0f} jobs/s")
    base = results[sizes[0]]["jobs_per_s"]
    for r in results.values():
        r["ratio"] = round(r["jobs_per_s"] / base, 3)
    return {"measured_jobs": measured, "children": 2, "batch": 10, "by_backlog": results}


def children(dsn: str, counts: list[int], per_child: int, log: Path) -> dict[str, Any]:
    results: dict[int, dict[str, Any]] = {}
    for n in counts:
        jobs = per_child * n
        with fresh_database(dsn, f"scaling_children_{n}") as db:
            migrate(db)
            config = ours.config_text(n, 1, kind="sleep", handler="benchlib.ours_handlers:sleep")
            with (
                psycopg.connect(db, autocommit=True) as conn,
                ours.Supervisor(db, config, log, f"children-{n}") as sup,
            ):
                # Every child connected and asleep before the jobs arrive, so a slow start of
                # the last children is no part of the figure; one bulk insert wakes them.
                ours.wait_idle_children(conn, sup, n, 120)
                enqueue_many(
                    conn, [NewJob("sleep", {"seconds": 0.05}) for _ in range(jobs)], notify=True
                )
                seconds = ours.time_drain(
                    conn,
                    timeout=300,
                    on_timeout=lambda n=n: f"children {n}: the drain did not finish",
                    each_poll=lambda _: sup.check_alive(),
                )
        ideal = n / 0.05
        results[n] = {
            "jobs": jobs,
            "jobs_per_s": rate(jobs, seconds),
            "ideal_jobs_per_s": ideal,
            "of_ideal": round(rate(jobs, seconds) / ideal, 3),
        }
        say(
            f"  children {n:>3}: {results[n]['jobs_per_s']:>8,.1f} jobs/s, "
            f"{results[n]['of_ideal']:.2f} of the ideal {ideal:,.0f}"
        )
    return {"handler_s": 0.05, "batch": 1, "jobs_per_child": per_child, "by_children": results}


def cpu(dsn: str, jobs: int, log: Path) -> dict[str, Any]:
    with fresh_database(dsn, "scaling_cpu") as db:
        migrate(db)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(FILL, {"jobs": jobs, "priority": 0})
            conn.execute("VACUUM ANALYZE pgq.jobs")
        sup = ours.Supervisor(db, ours.config_text(2, 100), log, "cpu-b100")
        with sup, psycopg.connect(db, autocommit=True) as conn:
            master = psutil.Process(sup.proc.pid)
            kids: list[psutil.Process] = []
            deadline = time.monotonic() + 60
            while len(kids) < 2 and time.monotonic() < deadline:
                kids = master.children()
                time.sleep(0.01)
            procs = [master, *kids]
            before = [sum(p.cpu_times()[:2]) for p in procs]
            seconds = ours.time_drain(
                conn,
                timeout=300,
                on_timeout=lambda: "cpu: the drain did not finish",
                each_poll=lambda _: sup.check_alive(),
            )
            after = [sum(p.cpu_times()[:2]) for p in procs]
    spent = [a - b for a, b in zip(after, before, strict=True)]
    return {
        "jobs": jobs,
        "children": 2,
        "batch": 100,
        "jobs_per_s": rate(jobs, seconds),
        "child_us_per_job": round(sum(spent[1:]) / jobs * 1e6, 2),
        "master_us_per_job": round(spent[0] / jobs * 1e6, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--only", default=",".join(ONLY))
    parser.add_argument("--backlogs", default="1000,10000,100000,1000000")
    parser.add_argument("--with-10m", action="store_true", help="add a 10,000,000-job backlog")
    parser.add_argument("--children", default="1,2,4,8,16,32")
    parser.add_argument("--measured", type=int, default=20_000)
    parser.add_argument("--jobs-per-child", type=int, default=100)
    parser.add_argument("--cpu-jobs", type=int, default=50_000)
    args = parser.parse_args()
    only = set(args.only.split(","))
    if only - set(ONLY):
        parser.error(f"unknown scenarios {sorted(only - set(ONLY))}; choose from {ONLY}")
    sizes = [int(s) for s in args.backlogs.split(",")] + ([10_000_000] if args.with_10m else [])
    log = default_log_dir()
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
    }
    if "backlog" in only:
        say("backlog")
        report["backlog"] = backlog(args.dsn, sizes, args.measured, log)
    if "children" in only:
        say("children, I/O-bound handlers (50 ms sleeps)")
        counts = [int(n) for n in args.children.split(",")]
        report["children"] = children(args.dsn, counts, args.jobs_per_child, log)
    if "cpu" in only:
        say("CPU per job at batch 100")
        report["cpu"] = cpu(args.dsn, args.cpu_jobs, log)
        c = report["cpu"]
        say(
            f"  {c['jobs_per_s']:,.0f} jobs/s; children {c['child_us_per_job']:.1f} us a job, "
            f"master {c['master_us_per_job']:.1f} us"
        )
    print(json.dumps(report, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
