"""Claims while the xmin horizon is held (issue 20, part 3), second by second.

A producer offers --rate jobs/s; --consumers connections drain them with the claim a child uses
(scripts/benchmarks/claim_shapes.py's Drain: the weights' order, the tenants' rotation,
completion in the next claim's statement, batch --batch). After --warm seconds a REPEATABLE READ
reader takes a snapshot and holds it for --hold seconds (a report, a pg_dump, a session idle in a
transaction), then lets go; the run goes on for --after seconds. Every consumed job leaves a dead
entry at the head of the claim index that VACUUM may not remove while the snapshot is open, so
each claim walks all of them: this shows how much that costs.

    .venv/bin/python scripts/benchmarks/horizon_bench.py [--rate 1000] [--hold 60] \
        [--claim current|previous]
    git show main:sql/claim.sql > /tmp/main.sql
    .venv/bin/python scripts/benchmarks/horizon_bench.py --lanes current,main \
        --baseline /tmp/main.sql

--lanes runs several claims one after the other, each on a fresh database (current: this
tree's claim as a child runs it, cursors included; main: the claim statement of --baseline, run
as that release's child ran it; previous: the claim before tenants,
scripts/benchmarks/benchlib/earlier_claims.sql), --rounds times in alternation, and ends with one
JSON line of the summaries side by side.

Prints one line per second (offered, completed, backlog, claim p50 and p99) and one JSON line
with the per-second series and the summary: completions during the hold against the rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.common import fresh_database
from claim_shapes import Drain, claim_from

from supervisor import NewJob, enqueue_many, migrate
from supervisor.queue.job import Job


class Meter:
    """Counts per whole second since the start, shared by the threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.perf_counter()
        self.offered: dict[int, int] = {}
        self.completed: dict[int, int] = {}
        self.latency: dict[int, list[float]] = {}

    def second(self) -> int:
        return int(time.perf_counter() - self.started)

    def add(self, table: dict[int, int], n: int) -> None:
        with self.lock:
            s = self.second()
            table[s] = table.get(s, 0) + n


def produce(dsn: str, rate: int, meter: Meter, stop: threading.Event) -> None:
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
        tick = 0.02
        per_tick = max(1, round(rate * tick))
        next_at = time.perf_counter()
        while not stop.is_set():
            enqueue_many(conn, [NewJob("noop", queue="q") for _ in range(per_tick)], notify=False)
            meter.add(meter.offered, per_tick)
            next_at += tick
            time.sleep(max(0.0, next_at - time.perf_counter()))


def consume(
    dsn: str, batch: int, old: bool, sql: str | None, meter: Meter, stop: threading.Event
) -> None:
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
        drain = Drain(conn, ["q"], old=old, sql=sql)
        done: list[Job] = []
        while not stop.is_set():
            started = time.perf_counter()
            jobs = drain.claim(batch, done)
            elapsed = time.perf_counter() - started
            with meter.lock:
                meter.latency.setdefault(meter.second(), []).append(elapsed)
            if done:
                meter.add(meter.completed, len(done))
            done = jobs
            if not jobs:
                time.sleep(0.005)
        drain.claim(0, done)


def hold_horizon(dsn: str, warm: float, hold: float, stop: threading.Event) -> None:
    if stop.wait(warm):
        return
    with psycopg.connect(dsn) as reader:
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        reader.execute("SELECT count(*) FROM pgq.jobs")  # the snapshot is taken here
        stop.wait(hold)
        reader.rollback()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--warm", type=float, default=10.0)
    parser.add_argument("--hold", type=float, default=60.0)
    parser.add_argument("--after", type=float, default=10.0)
    parser.add_argument("--claim", choices=("current", "main", "previous"), default="current")
    parser.add_argument("--lanes", help="comma-separated claims, run in alternation")
    parser.add_argument(
        "--baseline",
        help="a file of named queries (sql/claim.sql, or an older sql/queries.sql) whose claim"
        " is the 'main' lane",
    )
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    lanes = args.lanes.split(",") if args.lanes else [args.claim]
    summaries: dict[str, list[dict[str, object]]] = {}
    for _ in range(args.rounds):
        for lane in lanes:
            summaries.setdefault(lane, []).append(run_lane(args, lane))
    if len(lanes) > 1 or args.rounds > 1:
        print(json.dumps({"side_by_side": summaries}))
    return 0


def run_lane(args: argparse.Namespace, lane: str) -> dict[str, object]:
    total = args.warm + args.hold + args.after
    sql = claim_from(args.baseline) if lane == "main" else None
    if lane == "main" and not args.baseline:
        raise SystemExit("--baseline FILE is needed for the main lane")
    with fresh_database(args.dsn, "horizon") as db:
        migrate(db)
        meter = Meter()
        stop = threading.Event()
        threads = [
            threading.Thread(target=produce, args=(db, args.rate, meter, stop)),
            threading.Thread(target=hold_horizon, args=(db, args.warm, args.hold, stop)),
            *(
                threading.Thread(
                    target=consume,
                    args=(db, args.batch, lane == "previous", sql, meter, stop),
                )
                for _ in range(args.consumers)
            ),
        ]
        for thread in threads:
            thread.start()
        try:
            time.sleep(total)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    series = []
    backlog = 0
    for s in range(int(total)):
        offered, completed = meter.offered.get(s, 0), meter.completed.get(s, 0)
        backlog += offered - completed
        lat = sorted(meter.latency.get(s, [0.0]))
        row = {
            "second": s,
            "held": args.warm <= s < args.warm + args.hold,
            "offered": offered,
            "completed": completed,
            "backlog": backlog,
            "claim_p50_ms": round(1000 * statistics.median(lat), 3),
            "claim_p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 3),
            # The slowest: with cursors, the claim from the head (once a second per consumer).
            "claim_max_ms": round(1000 * lat[-1], 3),
        }
        series.append(row)
        print(
            f"{lane:8} {s:4d}s {'held' if row['held'] else '    '} offered {offered:6d} "
            f"completed {completed:6d} backlog {backlog:8d} claim p50 "
            f"{row['claim_p50_ms']:7.3f} ms p99 {row['claim_p99_ms']:7.3f} ms "
            f"max {row['claim_max_ms']:7.3f} ms"
        )
    held = [r for r in series if r["held"]]
    clean = [r for r in series if r["second"] < args.warm and r["second"] >= 2]
    summary = {
        "claim": lane,
        "rate": args.rate,
        "hold_s": args.hold,
        "completed_per_s_clean": round(statistics.fmean(r["completed"] for r in clean)),
        "completed_per_s_held": round(statistics.fmean(r["completed"] for r in held)),
        "completed_held_vs_rate": round(
            statistics.fmean(r["completed"] for r in held) / args.rate, 3
        ),
        "completed_last_held_s": held[-1]["completed"] if held else None,
        "max_backlog": max(r["backlog"] for r in series),
        "claim_p50_ms_clean": statistics.median(r["claim_p50_ms"] for r in clean),
        "claim_p50_ms_end_of_hold": held[-1]["claim_p50_ms"] if held else None,
        "claim_p99_ms_end_of_hold": held[-1]["claim_p99_ms"] if held else None,
        "claim_max_ms_end_of_hold": held[-1]["claim_max_ms"] if held else None,
        "claim_p50_ms_by_hold_s": {
            str(at): held[at - 1]["claim_p50_ms"]
            for at in (1, 30, 60, 120, 180, 240, 300)
            if at <= len(held)
        },
        "claim_max_ms_by_hold_s": {
            str(at): held[at - 1]["claim_max_ms"]
            for at in (1, 30, 60, 120, 180, 240, 300)
            if at <= len(held)
        },
    }
    print(json.dumps({"summary": summary, "series": series}))
    return summary


if __name__ == "__main__":
    raise SystemExit(main())
