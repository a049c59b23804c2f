"""Fleet benchmark: one supervisor with N children against N supervisors with one child each
on one database (the same total), throughput as hosts are added, and pgbench's limit for the
same claim-and-complete SQL with as many clients.

    python scripts/benchmarks/fleet_bench.py [--dsn DSN] [--jobs 20000] [--batch 10] [--children 4]
                                  [--max-hosts 4] [--repeat 3]

Every supervisor is a separate process tree with its own host identity (PGQ_HOST=host-i), as
on separate machines, but here they share this machine's cores with PostgreSQL: read the
figures as what the database and its connections allow, not as the fleet's capacity. Prints
a table per part and, last, one JSON line with every figure (medians of --repeat runs).
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below need the path set up first)
import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "benchmarks")]

from benchlib import limit as limit_mod
from benchlib.fleet import fleet_drain


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median rate, and every run's rate beside it."""
    ordered = sorted(runs, key=lambda r: r["jobs_per_s"])
    middle = dict(ordered[len(ordered) // 2])
    middle["runs_jobs_per_s"] = [r["jobs_per_s"] for r in runs]
    return middle


def measure(args: argparse.Namespace, hosts: int, processes: int, log: Path) -> dict[str, Any]:
    runs = []
    for _ in range(args.repeat):
        runs.append(fleet_drain(args.dsn, args.jobs, hosts, processes, args.batch, log_dir=log))
        say(f"  {hosts} x {processes}: {json.dumps(runs[-1], sort_keys=True)}")
    return best_of(runs)


def pgbench_limit(args: argparse.Namespace, clients: int) -> dict[str, Any]:
    """pgbench's rate for the same SQL with ``clients`` clients; a run that pgbench reports
    with failed transactions (a deadlock between clients) is left out and counted."""
    rates, failed = [], 0
    for _ in range(args.repeat):
        try:
            result = limit_mod.limit(
                args.dsn, args.jobs, args.batch, clients, shape="one_statement"
            )
        except RuntimeError as exc:
            failed += 1
            say(f"  pgbench, {clients} clients: {exc}")
            continue
        rates.append(result["jobs_per_s"])
        say(f"  pgbench, {clients} clients: {rates[-1]:,.0f} jobs/s")
    median = statistics.median(rates) if rates else None
    return {"clients": clients, "jobs_per_s": median, "runs_jobs_per_s": rates, "failed": failed}


def share(row: dict[str, Any], limits: dict[int, dict[str, Any]]) -> None:
    ceiling = limits[row["children"]]["jobs_per_s"]
    row["pgbench_jobs_per_s"] = ceiling
    row["share_of_pgbench"] = round(row["jobs_per_s"] / ceiling, 3) if ceiling else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQ_BENCH_DSN"))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--children", type=int, default=4, help="N, the total of the first part")
    parser.add_argument("--max-hosts", type=int, default=4)
    parser.add_argument("--per-host", type=int, default=2, help="children per host when adding")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="on a private embedded PostgreSQL: its WAL counter then counts these runs alone",
    )
    args = parser.parse_args(argv)
    if args.embedded:
        from supervisor.embedded.server import EmbeddedPostgres

        with tempfile.TemporaryDirectory(prefix="pgq-fleet-bench-pg-") as tmp:
            server = EmbeddedPostgres(Path(tmp) / "pgdata")
            args.dsn = server.start()
            try:
                return run(args)
            finally:
                server.stop()
    args.dsn = args.dsn or "postgresql://postgres@127.0.0.1:5432/postgres"
    return run(args)


def run(args: argparse.Namespace) -> int:
    log = Path(tempfile.mkdtemp(prefix="pgq-fleet-bench-"))
    load_at_start = os.getloadavg()  # the machine is shared: say how busy it was
    n = args.children
    say(f"one supervisor with {n} children against {n} supervisors with one child each")
    shape = {"one_host": measure(args, 1, n, log), "n_hosts": measure(args, n, 1, log)}
    say(f"hosts of {args.per_host} children, added one by one")
    adding = [measure(args, h, args.per_host, log) for h in range(1, args.max_hosts + 1)]
    say("pgbench: the same claim-and-complete SQL, one statement per batch")
    clients = sorted({n, *(h * args.per_host for h in range(1, args.max_hosts + 1))})
    limits = {c: pgbench_limit(args, c) for c in clients}
    for row in [*shape.values(), *adding]:
        share(row, limits)
    print("HOSTS x CHILDREN   JOBS/S   PGBENCH  SHARE  CONNS/HOST  WAL B/JOB")
    for row in [*shape.values(), *adding]:
        ceiling = row["pgbench_jobs_per_s"] or 0
        print(
            f"{row['hosts']:>5} x {row['processes_per_host']:<8} {row['jobs_per_s']:>8,.0f}"
            f"  {ceiling:>8,.0f}  {row['share_of_pgbench'] or 0:>5.0%}"
            f"  {row['connections_per_host']:>10}  {row['wal_bytes_per_job']:>9}"
        )
    report = {
        "jobs": args.jobs,
        "batch": args.batch,
        "cpus": os.cpu_count(),
        "load_average_at_start": load_at_start,
        "load_average_at_end": os.getloadavg(),
        "one_vs_many": shape,
        "adding_hosts": adding,
        "pgbench": list(limits.values()),
    }
    print(json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
