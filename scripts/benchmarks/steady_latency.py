"""Pickup latency at a fixed offered rate, clean and with the xmin horizon held (issue 36, 4).

For each --rates value, on a fresh database: a real supervisor (--processes children, batch
--batch, history on, its vacuum service on) drains no-op jobs that a producer enqueues at that
rate (enqueue_many every 10 ms, with the wake-up notify, as an application would; --producers
threads share the rate, committing out of order). Two phases of
--seconds each follow a --warm period:

- ``clean``: nothing else runs;
- ``held``: a REPEATABLE READ session holds a snapshot (a report, pg_dump, a replica's
  hot_standby_feedback) for the whole phase, so no dead row of pgq.jobs can be removed;
- ``recovery`` (with --recovery SECONDS): the snapshot released, the rate still offered.

With --slices N the held phase is reported as N consecutive windows too (``held 1/N`` ...), so
that a cost that grows with the hold's length shows as a trend, with the claim indexes' and the
table's sizes at the end of each window and what a claim from the head costs there (the
children's statement under EXPLAIN ANALYZE, rolled back: its time and the buffers it touched).
With --recovery-slices N the recovery is reported in N windows too (no probes there: the first
VACUUM after a long hold is what they would measure against). Every phase and window also shows
the WAL the server wrote in it (bytes: how far the WAL's insert position moved; full-page
images: pg_stat_wal, where a backend adds its count when its command ends, so a VACUUM's all
land in the window where it finishes) and its checkpoints, which is what a long hold's end costs
the commits.

Pickup is a job's wait from its enqueue to its claim: started_at - created_at of its history
row (both the database's clock, each its transaction's start), for the jobs claimed in the
phase. At the end of each phase: pgq.jobs' dead tuples (pg_stat_user_tables, read after the
statistics' flush) and the backlog left. After the run, each window's slowest hundredth of
pickups by what kept them (TAIL: passed over by a later job's claim, or stalled with the rest).
Prints a line per phase and, last, one JSON line.

    .venv/bin/python scripts/benchmarks/steady_latency.py [--rates 1000,3000,5000] \\
        [--seconds 30] [--held SECONDS] [--slices N] [--recovery SECONDS] \\
        [--recovery-slices N] [--warm 5] [--processes 2] [--producers 1] [--batch 10]

The DSN comes from --dsn, else PGQ_BENCH_DSN, else the machine's PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg
from benchlib.common import default_log_dir, fresh_database
from benchlib.ours import (
    Supervisor,
    config_text,
    explained_claim,
    plan_cost,
    wait_idle_children,
)

from supervisor.queue import claim_builder
from supervisor.queue.enqueue import NewJob, enqueue_many
from supervisor.queue.migrations import migrate

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
TICK = 0.010

PICKUP = """
SELECT count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY w),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY w),
       max(w)
FROM (
    SELECT extract(epoch FROM started_at - created_at) * 1000 AS w
    FROM pgq.job_history
    WHERE started_at >= %(begun)s AND started_at < %(ended)s
) AS h
"""

# The slowest hundredth of a window's pickups, by what kept them: "passed over" when a job
# enqueued after it was claimed more than PASSED_MS before it (it sat below a child's cursor
# until a claim from near or from the head found it), else a stall (the pool was slow for every
# job then: a walk, a vacuum, the CPU). Claims from the head and from near take few jobs each:
# "claims" counts the distinct claims (started_at) that took the passed-over ones.
PASSED_MS = 5.0
TAIL = """
WITH h AS (
    SELECT started_at,
           extract(epoch FROM started_at - created_at) * 1000 AS w,
           min(started_at) OVER (ORDER BY created_at DESC
                                 RANGE BETWEEN UNBOUNDED PRECEDING
                                           AND '1 microsecond' PRECEDING) AS newer_first
    FROM pgq.job_history
    WHERE created_at >= %(begun)s::timestamptz - interval '30 seconds'
      AND started_at < %(ended)s
),
win AS (
    SELECT * FROM h WHERE started_at >= %(begun)s
),
cut AS (
    SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY w) AS p99 FROM win
),
tail AS (
    SELECT win.*,
           coalesce(extract(epoch FROM win.started_at - win.newer_first) * 1000 > %(passed)s,
                    false) AS passed
    FROM win, cut
    WHERE win.w >= cut.p99
)
SELECT count(*),
       count(*) FILTER (WHERE passed),
       count(DISTINCT started_at) FILTER (WHERE passed),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY w) FILTER (WHERE passed),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY w) FILTER (WHERE NOT passed)
FROM tail
"""


def tail(conn: psycopg.Connection[Any], window: dict[str, Any]) -> None:
    """Adds to a measured window what kept its slowest hundredth (TAIL), and prints it."""
    n, passed, claims, passed_p50, stalled_p50 = conn.execute(  # type: ignore[misc]
        TAIL, {"begun": window["begun"], "ended": window["ended"], "passed": PASSED_MS}
    ).fetchone()
    window["tail"] = {
        "jobs": n,
        "passed_over": passed,
        "passed_over_claims": claims,
        "passed_over_p50_ms": round(float(passed_p50 or 0.0), 2),
        "stalled_p50_ms": round(float(stalled_p50 or 0.0), 2),
    }
    print(
        f"  {window['phase']:>16s} slowest 1%: {n:,} jobs, passed over {passed:,} "
        f"(by {claims:,} claims, p50 {window['tail']['passed_over_p50_ms']:.1f} ms), "
        f"stalled {n - passed:,} (p50 {window['tail']['stalled_p50_ms']:.1f} ms)",
        file=sys.stderr,
        flush=True,
    )


DEAD = """
SELECT n_dead_tup, n_live_tup, vacuum_count FROM pg_stat_user_tables
WHERE schemaname = 'pgq' AND relname = 'jobs'
"""

# The claim's indexes and the table: what a held horizon makes grow.
SIZES = """
SELECT c.relname, pg_relation_size(c.oid)
FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = 'pgq' AND (c.relname = 'jobs' OR c.relname LIKE 'jobs_claim%%')
ORDER BY c.relname
"""


# What the server wrote and checkpointed (PostgreSQL 14 and later; 17 moved the checkpoint
# counts to pg_stat_checkpointer). The bytes are the WAL's insert position, not pg_stat_wal's
# wal_bytes: a backend adds its WAL to pg_stat_wal when its command ends, so a VACUUM's whole
# writing (900 MiB after a 30-minute hold) showed in the window where it finished, 80 s after
# it wrote most of it.
WAL = """
SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0'), wal_fpi, (SELECT {checkpoints} FROM {view})
FROM pg_stat_wal
"""


def wal(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    """The server's WAL position (bytes), full-page images and checkpoints so far (zeros
    before PostgreSQL 14, which has no pg_stat_wal)."""
    if conn.info.server_version < 140000:
        return 0, 0, 0
    if conn.info.server_version >= 170000:
        counts, view = "num_timed + num_requested", "pg_stat_checkpointer"
    else:
        counts, view = "checkpoints_timed + checkpoints_req", "pg_stat_bgwriter"
    text = WAL.format(checkpoints=counts, view=view)
    nbytes, fpi, checkpoints = conn.execute(text).fetchone()  # type: ignore[misc]
    return int(nbytes), int(fpi), int(checkpoints)


def add_wal(
    window: dict[str, Any], before: tuple[int, int, int], after: tuple[int, int, int]
) -> None:
    """Adds to a measured window what the server wrote between ``before`` and ``after`` (wal()),
    and prints it."""
    w = window["wal"] = {
        "wal_mib": round((after[0] - before[0]) / 2**20, 1),
        "full_page_images": after[1] - before[1],
        "checkpoints": after[2] - before[2],
    }
    print(
        f"           WAL {w['wal_mib']:,.1f} MiB, {w['full_page_images']:,} full-page images, "
        f"{w['checkpoints']} checkpoints",
        file=sys.stderr,
        flush=True,
    )


def head_claim(conn: psycopg.Connection[Any]) -> dict[str, float | int]:
    """What a claim from the head costs now: the children's own statement for it (one job, no
    completions), rolled back; its time and the buffers it touched, which grow with the dead
    entries it walks."""
    ms, buffers = explained_claim(
        conn, variant=claim_builder.FLAT_HEAD_FRESH, limit=1, worker="steady-probe"
    )
    return {"ms": round(ms, 2), "buffers": buffers}


# The enqueue's look at the queue's wake-up flag (sql/enqueue.sql), which every enqueue of a due
# job makes; every take and raise changes the flag, and a held horizon keeps every version. Until
# migration 0071 the versions were one row's, and the look walked them all; since, each is a row
# of pgq.wakeup_flags and the look reads the newest first.
FLAG_PROBE = """
EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
SELECT f.up FROM pgq.wakeup_flags AS f WHERE f.queue = 'default' ORDER BY f.seq DESC LIMIT 1
"""


def flag_probe(conn: psycopg.Connection[Any]) -> dict[str, float | int]:
    """What the enqueue's look at the wake-up flag costs now: time and buffers."""
    ((plan,),) = conn.execute(FLAG_PROBE).fetchall()
    ms, buffers = plan_cost(plan)
    return {"ms": round(ms, 3), "buffers": buffers}


def produce(
    db: str, rate: float, stop: threading.Event, sent: list[int], lock: threading.Lock
) -> None:
    """Enqueue at ``rate`` jobs/s until stopped: each tick what is owed by then. Several
    producers commit out of order (a job's run_at is its transaction's start), as a web fleet's
    do: their late commits land below the children's cursors."""
    with psycopg.connect(db, autocommit=True) as conn:
        begun, mine = time.monotonic(), 0
        while not stop.is_set():
            owed = int((time.monotonic() - begun) * rate) - mine
            if owed > 0:
                enqueue_many(conn, [NewJob("noop", {}) for _ in range(owed)])
                mine += owed
                with lock:
                    sent[0] += owed
            time.sleep(TICK)


def hold(db: str, release: threading.Event, holding: threading.Event) -> None:
    with psycopg.connect(db) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.execute("SELECT count(*) FROM pgq.queue_limits").fetchone()  # takes the snapshot
        holding.set()
        release.wait()
        conn.rollback()


def clock(conn: psycopg.Connection[Any]) -> Any:
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]


def phase(
    conn: psycopg.Connection[Any], name: str, rate: int, seconds: float, sent: list[int]
) -> dict[str, Any]:
    before, begun, written = sent[0], clock(conn), wal(conn)
    time.sleep(seconds)
    result = measure(conn, name, rate, seconds, sent[0] - before, begun, clock(conn))
    add_wal(result, written, wal(conn))
    return result


def sliced(
    conn: psycopg.Connection[Any],
    name: str,
    rate: int,
    seconds: float,
    slices: int,
    sent: list[int],
    probes: bool = True,
) -> list[dict[str, Any]]:
    """The phase whole, then each of its ``slices`` windows (measured after it, so that the
    queries reading history do not run inside the windows). ``probes``: the sizes, the claim
    from the head and the flag's look at the end of each window, between its end and the next
    one's start: the claim from the head takes seconds late in a long hold, and inside a window
    its time counted as the window's (3,015 jobs/s claimed of 3,000 offered), with the one job it
    held locked meanwhile. That job's wait still lands in the next window's maximum."""
    before, begun, written = sent[0], clock(conn), wal(conn)
    start = (before, begun, written)
    marks = []
    for _ in range(slices):
        time.sleep(seconds / slices)
        end = (sent[0], clock(conn), wal(conn))
        probed = (sizes(conn), head_claim(conn), flag_probe(conn)) if probes else None
        marks.append((start, end, probed))
        start = (sent[0], clock(conn), wal(conn)) if probes else end
    # Rates over the time each span really lasted (the whole holds the probes between windows).
    last_count, phase_end, last_written = marks[-1][1]
    span = (phase_end - begun).total_seconds()
    whole = measure(conn, name, rate, span, last_count - before, begun, phase_end)
    add_wal(whole, written, last_written)
    windows = []
    for i, ((start_count, start_at, written_from), (count, ended, written_by), probed) in enumerate(
        marks
    ):
        window = measure(
            conn,
            f"{name} {i + 1}/{slices}",
            rate,
            (ended - start_at).total_seconds(),
            count - start_count,
            start_at,
            ended,
            with_dead=False,
        )
        add_wal(window, written_from, written_by)
        if probed is not None:
            size, head, flag = probed
            window["sizes"] = size
            window["head_claim"] = head
            window["flag_probe"] = flag
            print(
                f"           head claim {head['ms']:.2f} ms, {head['buffers']:,} buffers; "
                f"flag probe {flag['ms']:.3f} ms, {flag['buffers']:,} buffers; "
                + ", ".join(f"{name} {nbytes / 2**20:.1f} MiB" for name, nbytes in size.items()),
                file=sys.stderr,
                flush=True,
            )
        windows.append(window)
    return [whole, *windows]


def sizes(conn: psycopg.Connection[Any]) -> dict[str, int]:
    return dict(conn.execute(SIZES).fetchall())  # type: ignore[arg-type]


def measure(
    conn: psycopg.Connection[Any],
    name: str,
    rate: int,
    seconds: float,
    offered: int,
    begun: Any,
    ended: Any,
    with_dead: bool = True,
) -> dict[str, Any]:
    count, p50, p99, peak = conn.execute(PICKUP, {"begun": begun, "ended": ended}).fetchone()  # type: ignore[misc]
    dead = live = vacuums = None
    if with_dead:
        time.sleep(1.2)  # the backends' statistics reach pg_stat_user_tables within a second
        dead, live, vacuums = conn.execute(DEAD).fetchone() or (None, None, None)  # type: ignore[misc]
    result = {
        "phase": name,
        "rate": rate,
        "seconds": seconds,
        "offered_per_s": round(offered / seconds),
        "claimed_per_s": round(count / seconds),
        "pickup_p50_ms": round(float(p50 or 0.0), 2),
        "pickup_p99_ms": round(float(p99 or 0.0), 2),
        "pickup_max_ms": round(float(peak or 0.0), 2),
        "dead_tuples": dead,
        "live_tuples": live,
        # VACUUMs of pgq.jobs since the database was made (the vacuum service's and
        # autovacuum's are counted apart: autovacuum_count), at the phase's end.
        "vacuums": vacuums,
        "begun": begun,
        "ended": ended,
    }
    print(
        f"  {rate:>6,}/s {name:6s} claimed {result['claimed_per_s']:>6,}/s  pickup p50 "
        f"{result['pickup_p50_ms']:8.2f} ms  p99 {result['pickup_p99_ms']:8.2f}  max "
        f"{result['pickup_max_ms']:8.2f}  dead tuples {dead if dead is None else f'{dead:,}'}"
        + ("" if vacuums is None else f"  vacuums so far {vacuums}"),
        file=sys.stderr,
        flush=True,
    )
    return result


def run_rate(args: argparse.Namespace, rate: int) -> list[dict[str, Any]]:
    log = default_log_dir()
    with fresh_database(args.dsn, f"steady_{rate}") as db:
        migrate(db)
        config = config_text(args.processes, args.batch, history=True)
        stop, release, holding = threading.Event(), threading.Event(), threading.Event()
        sent = [0]
        lock = threading.Lock()
        producers = [
            threading.Thread(
                target=produce, args=(db, rate / args.producers, stop, sent, lock), daemon=True
            )
            for _ in range(args.producers)
        ]
        holder = threading.Thread(target=hold, args=(db, release, holding), daemon=True)
        with (
            psycopg.connect(db, autocommit=True) as conn,
            Supervisor(db, config, log, "steady") as sup,
        ):
            # Offered from when the children are up, so that no start-up backlog is measured.
            wait_idle_children(conn, sup, args.processes, 120.0)
            for producer in producers:
                producer.start()
            try:
                time.sleep(args.warm)
                results = [phase(conn, "clean", rate, args.seconds, sent)]
                holder.start()
                holding.wait(30)
                held = args.held or args.seconds
                if args.slices > 1:
                    results += sliced(conn, "held", rate, held, args.slices, sent)
                else:
                    results.append(phase(conn, "held", rate, held, sent))
                if args.recovery:
                    release.set()
                    if args.recovery_slices > 1:
                        results += sliced(
                            conn,
                            "recovery",
                            rate,
                            args.recovery,
                            args.recovery_slices,
                            sent,
                            probes=False,
                        )
                    else:
                        results.append(phase(conn, "recovery", rate, args.recovery, sent))
            finally:
                release.set()
                stop.set()
                for producer in producers:
                    producer.join(30)
                holder.join(30)
            # Read after the run, so that the window functions over the history do not run
            # inside a measured window.
            for result in results:
                tail(conn, result)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQ_BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--rates", default="1000,3000,5000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--held", type=float, default=0.0, help="the held phase (default: --seconds)"
    )
    parser.add_argument("--slices", type=int, default=1)
    parser.add_argument("--recovery", type=float, default=0.0)
    parser.add_argument("--recovery-slices", type=int, default=1)
    parser.add_argument("--warm", type=float, default=5.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--producers", type=int, default=1, help="threads sharing the rate")
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    load = os.getloadavg()
    phases = [p for rate in map(int, args.rates.split(",")) for p in run_rate(args, rate)]
    report = {
        "scenario": "steady_latency",
        "processes": args.processes,
        "producers": args.producers,
        "batch": args.batch,
        "load_average_at_start": load,
        "load_average_at_end": os.getloadavg(),
        "timed_by": "job_history started_at - created_at (database clock)",
        "phases": phases,
    }
    print(json.dumps(report, default=str, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
