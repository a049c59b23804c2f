"""Concurrent producers of one-job transactions, every enqueue path, against a plain INSERT of
the same row into a copy of pgq.jobs; and the pickup latency of each path to idle children.
Figures as text, then one JSON line.

    python scripts/benchmarks/producers_bench.py [--dsn DSN] [--producers 1,4,16,64] [--seconds 1.5]
                                      [--only listening,consuming,pickup] [--pickup-jobs 100]
                                      [--repeats 1] [--baseline DIR]

Scenarios, each on a fresh database (dropped afterwards):

- listening (jobs due now, or --delay seconds ahead): a session LISTENs on pgq_jobs (as a
  supervisor's master does) and no master has raised a wake-up flag: every producer count,
  every path, and "before" (the enqueue statement as it was before migration 0021: a NOTIFY in
  every transaction) and "insert_notify" (the plain INSERT plus one pg_notify) beside the plain
  INSERT;
- consuming: a real supervisor (2 children, no-op jobs) serves the queue while 16 producers
  enqueue to it: its children drain, go idle, raise the flags and are woken;
- pickup: idle children, one job every 20 ms through each path: enqueue commit to the
  handler's first statement (p50/p99), timed by the database clock as in scripts/bench.py.

Ratios are each path's transactions per second over the plain INSERT's in the same scenario and
producer count, measured back to back. With ``--repeats N`` (listening), every path runs N times
in rotation (insert, enqueue, ..., insert, enqueue, ...) and its median counts: on a shared
machine the load moves between one path's run and the next, and the rotation spreads it over
all of them. With ``--baseline DIR`` (another revision's tree, for example ``git archive main |
tar -x -C DIR``), the library paths run a second time as ``<path>@baseline`` with DIR's
supervisor package, in the same rotation: before and after side by side in one run. The
NOTIFYs column counts what the listening session heard during the run (at most one per
transaction: NOTIFY deduplicates within one).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg
from benchlib import ours, producers
from benchlib.common import (
    create_side_tables,
    default_log_dir,
    fresh_database,
    install_enqueue_marker,
    latency_summary_ms,
    measure_pickup,
    paced,
)

from supervisor import NewJob, enqueue, enqueue_many, migrate

ONLY = ("pgbench", "listening", "consuming", "pickup")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class Listener:
    """A session that LISTENs on pgq_jobs and counts what it hears, on a thread."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("LISTEN pgq_jobs")
        self.heard = 0
        self.stopping = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping:
            for _ in self.conn.notifies(timeout=0.2):
                self.heard += 1

    def close(self) -> None:
        self.stopping = True
        self.thread.join()
        self.conn.close()


def ratios(row: dict[str, Any], paths: list[str]) -> None:
    """Each path over the plain INSERT made by the same kind of client: the async paths over
    the async INSERT (asyncio's own cost is no part of the enqueue's), the others over the
    sync one."""
    for path in paths:
        base_path = "insert_async" if producers.plain(path) in producers.ASYNC_PATHS else "insert"
        base = row.get(base_path, {}).get("tps")
        row[path]["ratio"] = round(row[path]["tps"] / base, 3) if base else None
        row[path]["over"] = base_path


def one_run(
    db: str, path: str, n: int, seconds: float, listener: Listener, baseline: str = ""
) -> dict[str, Any]:
    producers.reset(db)
    before = listener.heard
    tps = producers.run(db, path, n, seconds, baseline=baseline)
    time.sleep(0.3)  # the last commits' NOTIFYs
    return {"tps": tps, "notifies": listener.heard - before}


def pgbench(args: argparse.Namespace) -> dict[str, Any]:
    """The statements alone, from pgbench's C clients, a session listening."""
    results: dict[int, dict[str, Any]] = {}
    with fresh_database(args.dsn, "producers_pgbench") as db:
        migrate(db)
        producers.prepare(db)
        listener = Listener(db)
        try:
            for n in args.producers:
                row: dict[str, Any] = {}
                for path in producers.PGBENCH_PATHS:
                    producers.reset(db)
                    before = listener.heard
                    tps = producers.pgbench_tps(db, path, n, args.pgbench_seconds)
                    time.sleep(0.3)
                    row[path] = {"tps": tps, "notifies": listener.heard - before}
                    say(
                        f"  pgbench {n:>3} clients {path:16s} {tps:>9,.0f} tps "
                        f"({row[path]['notifies']:,} NOTIFYs)"
                    )
                ratios(row, list(producers.PGBENCH_PATHS))
                results[n] = row
        finally:
            listener.close()
    return results


def listening(args: argparse.Namespace) -> dict[str, Any]:
    producers.DELAY = args.delay  # this scenario's alone: the others need jobs due now
    try:
        return _listening(args)
    finally:
        producers.DELAY = 0.0


def _listening(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[int, dict[str, Any]] = {}
    with fresh_database(args.dsn, "producers_listening") as db:
        migrate(db)
        producers.prepare(db)
        listener = Listener(db)
        try:
            for n in args.producers:
                runs: dict[str, list[dict[str, Any]]] = {path: [] for path in args.all_paths}
                for _ in range(args.repeats):
                    for path in args.all_paths:
                        got = one_run(db, path, n, args.seconds, listener, args.baseline)
                        runs[path].append(got)
                        say(
                            f"  listening {n:>3} producers {path:28s} {got['tps']:>9,.0f} tps "
                            f"({got['notifies']:,} NOTIFYs)"
                        )
                row: dict[str, Any] = {}
                for path, got in runs.items():
                    row[path] = {
                        "tps": statistics.median(r["tps"] for r in got),
                        "notifies": max(r["notifies"] for r in got),
                        "runs": [r["tps"] for r in got],
                    }
                ratios(row, args.all_paths)
                results[n] = row
        finally:
            listener.close()
    return results


def consuming(args: argparse.Namespace, log: Path) -> dict[str, Any]:
    n = 16
    row: dict[str, Any] = {}
    with fresh_database(args.dsn, "producers_consuming") as db:
        migrate(db)
        producers.prepare(db)
        listener = Listener(db)
        config = ours.config_text(2, 10)
        try:
            with (
                psycopg.connect(db, autocommit=True) as conn,
                ours.Supervisor(db, config, log, "producers_consuming") as sup,
            ):
                ours.wait_idle_children(conn, sup, 2, 60)
                for path in args.paths:
                    row[path] = one_run(db, path, n, args.seconds, listener)
                    sup.check_alive()
                    say(
                        f"  consuming {n:>3} producers {path:20s} {row[path]['tps']:>9,.0f} tps "
                        f"({row[path]['notifies']:,} NOTIFYs)"
                    )
        finally:
            listener.close()
    ratios(row, args.paths)
    return {"producers": n, "children": 2, **row}


def _sql_enqueue(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pgq.enqueue('record_start')").fetchone()
    assert row is not None
    return int(row[0])


def pickup(args: argparse.Namespace, log: Path) -> dict[str, Any]:
    import asyncio

    from supervisor import enqueue_async, enqueue_many_async

    results: dict[str, Any] = {}
    with fresh_database(args.dsn, "producers_pickup") as db:
        migrate(db)
        create_side_tables(db)
        install_enqueue_marker(db, "pgq", "jobs")
        config = ours.config_text(
            2, 10, kind="record_start", handler="benchlib.ours_handlers:record_start"
        )
        with (
            psycopg.connect(db, autocommit=True) as conn,
            ours.Supervisor(db, config, log, "producers_pickup") as sup,
        ):
            ours.wait_idle_children(conn, sup, 2, 60)
            loop = asyncio.new_event_loop()
            aconn = loop.run_until_complete(psycopg.AsyncConnection.connect(db, autocommit=True))
            one: dict[str, Any] = {
                "enqueue": lambda: enqueue(conn, "record_start"),
                "enqueue_many": lambda: enqueue_many(conn, [NewJob("record_start")])[0],
                "pgq.enqueue": lambda: _sql_enqueue(conn),
                "enqueue_async": lambda: loop.run_until_complete(
                    enqueue_async(aconn, "record_start")
                ),
                "enqueue_many_async": lambda: loop.run_until_complete(
                    enqueue_many_async(aconn, [NewJob("record_start")])
                )[0],
            }
            for path, call in one.items():
                conn.execute("TRUNCATE bench_enqueued, bench_started")
                _, latencies = measure_pickup(
                    conn,
                    lambda count, c=call: [c() for _ in paced(count, 0.020)],
                    warmup=10,
                    jobs=args.pickup_jobs,
                    wait=lambda ok, what: ours._wait(ok, sup, 60, what),
                )
                results[path] = latency_summary_ms(latencies)
                say(
                    f"  pickup {path:20s} p50 {results[path]['p50_ms']:.2f} ms  p99 "
                    f"{results[path]['p99_ms']:.2f}  max {results[path]['max_ms']:.2f}"
                )
            loop.run_until_complete(aconn.close())
            loop.close()
    return results


def machine(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        commit = conn.execute("SHOW synchronous_commit").fetchone()[0]  # type: ignore[index]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "postgresql": server,
        "synchronous_commit": commit,
        "load_average_at_start": os.getloadavg(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--producers", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--pgbench-seconds", type=float, default=2)
    parser.add_argument("--paths", default=",".join(producers.PATHS))
    parser.add_argument("--only", default=",".join(ONLY))
    parser.add_argument("--pickup-jobs", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=1, help="listening: runs per path, rotated")
    parser.add_argument(
        "--delay",
        type=float,
        default=0.0,
        help="listening: every job due this many seconds ahead ('scheduled', for the stagers)",
    )
    parser.add_argument(
        "--baseline", default="", help="another revision's tree: its library paths run beside"
    )
    args = parser.parse_args()
    args.producers = [int(n) for n in args.producers.split(",")]
    args.paths = [p for p in args.paths.split(",") if p]
    unknown = set(args.paths) - set(producers.PATHS)
    if unknown:
        parser.error(f"unknown paths {sorted(unknown)}; choose from {', '.join(producers.PATHS)}")
    for base in ("insert_async", "insert"):  # the baselines every ratio needs
        if base not in args.paths:
            args.paths.insert(0, base)
    args.all_paths = list(args.paths)
    if args.baseline:
        if not (Path(args.baseline) / "supervisor" / "__init__.py").is_file():
            parser.error(f"--baseline {args.baseline}: no supervisor package there")
        args.baseline = str(Path(args.baseline).resolve())
        args.all_paths += [
            p + producers.BASELINE for p in args.paths if p in producers.LIBRARY_PATHS
        ]
    only = set(args.only.split(","))
    if only - set(ONLY):
        parser.error(f"unknown scenarios {sorted(only - set(ONLY))}; choose from {ONLY}")
    log = default_log_dir()
    report: dict[str, Any] = {
        "machine": machine(args.dsn),
        "seconds_per_run": args.seconds,
        "repeats": args.repeats,
        "delay_seconds": args.delay,
        "baseline": args.baseline or None,
    }
    started = time.monotonic()
    if "pgbench" in only:
        say("pgbench (the statements alone, no wake-up flag raised)")
        report["pgbench"] = pgbench(args)
    if "listening" in only:
        say("listening (no wake-up flag raised)")
        report["listening"] = listening(args)
    if "consuming" in only:
        say("consuming (a supervisor serves the queue)")
        report["consuming"] = consuming(args, log)
    if "pickup" in only:
        say("pickup to idle children, one job every 20 ms")
        report["pickup"] = pickup(args, log)
    report["seconds"] = round(time.monotonic() - started, 1)
    print_tables(report, args)
    print(json.dumps(report, default=str, separators=(",", ":")))
    return 0


def print_tables(report: dict[str, Any], args: argparse.Namespace) -> None:
    m = report["machine"]
    print(
        f"producers, {m['date']}: PostgreSQL {m['postgresql']}, {m['cpus']} CPUs, "
        f"load {m['load_average_at_start'][0]:.2f} at start, {report['seconds_per_run']}s a run"
    )
    if "pgbench" in report:
        print("\npgbench, one job per transaction, tps (ratio to the plain INSERT):")
        print(f"  {'statement':20s}" + "".join(f"{f'{n} clients':>22s}" for n in args.producers))
        for path in producers.PGBENCH_PATHS:
            cells = []
            for n in args.producers:
                r = report["pgbench"][n][path]
                cells.append(f"{r['tps']:>10,.0f} ({r['ratio']:.2f})")
            print(f"  {path:20s}" + "".join(f"{c:>22s}" for c in cells))
    if "listening" in report:
        print(
            "\nOne job per transaction, tps (ratio to the plain INSERT), a session listening"
            + (f", median of {args.repeats} rotations:" if args.repeats > 1 else ":")
        )
        print(f"  {'path':28s}" + "".join(f"{f'{n} producers':>22s}" for n in args.producers))
        for path in args.all_paths:
            cells = []
            for n in args.producers:
                r = report["listening"][n][path]
                cells.append(f"{r['tps']:>10,.0f} ({r['ratio']:.2f})")
            print(f"  {path:28s}" + "".join(f"{c:>22s}" for c in cells))
    if "consuming" in report:
        c = report["consuming"]
        print(f"\n16 producers, a supervisor ({c['children']} children) consuming the queue:")
        for path in args.paths:
            r = c[path]
            print(
                f"  {path:20s} {r['tps']:>10,.0f} tps ({r['ratio']:.2f}), {r['notifies']:,} NOTIFYs"
            )
    if "pickup" in report:
        print("\nPickup to idle children, one job every 20 ms (ms):")
        for path, r in report["pickup"].items():
            print(
                f"  {path:20s} p50 {r['p50_ms']:6.2f}  p99 {r['p99_ms']:6.2f}"
                f"  max {r['max_ms']:6.2f}"
            )


if __name__ == "__main__":
    sys.exit(main())
