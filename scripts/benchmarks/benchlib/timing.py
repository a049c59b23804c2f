"""Time scenarios: what future jobs cost a claim, and how late delayed jobs start.

- claim rate with future jobs: one connection claims (batch 10) and completes due jobs of
  priority 0, first with nothing else in the table, then beside 200,000 jobs due in an hour at
  priority 5, then beside the same jobs kept 'available' as every future job was before the
  scheduled state (the old layout, for comparison);
- delayed-start lateness: a real supervisor with the default poll interval runs jobs enqueued
  with a delay; lateness is the handler's first statement minus the job's run_at, both on the
  database's clock.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import psycopg

from benchlib.common import (
    create_side_tables,
    fresh_database,
    latency_summary_ms,
    median,
    paced,
)
from benchlib.ours import Supervisor, _wait, config_text, wait_idle_children
from supervisor import NewJob, claim, complete, enqueue, enqueue_many, migrate

DUE_PRIORITY = 0
FUTURE_PRIORITY = 5


BATCH = 10
# Claims per turn: the layouts take turns in short bursts, so a change in the machine's load
# (it is shared) falls on all of them alike.
BURST = 50


def _fill_due(conn: psycopg.Connection[Any], claims: int) -> None:
    enqueue_many(
        conn,
        [NewJob("noop", priority=DUE_PRIORITY) for _ in range((claims + 60) * BATCH)],
        notify=False,
    )
    conn.execute("VACUUM ANALYZE pgq.jobs")
    for _ in range(50):  # warm-up: plans, caches
        complete(conn, claim(conn, "default", worker="bench", limit=BATCH))


def _burst(conn: psycopg.Connection[Any]) -> tuple[int, float]:
    """Jobs claimed and completed in BURST claims on one connection, and the seconds taken."""
    started = time.perf_counter()
    done = 0
    for _ in range(BURST):
        jobs = claim(conn, "default", worker="bench", limit=BATCH)
        complete(conn, jobs)
        done += len(jobs)
    return done, time.perf_counter() - started


def _add_future(conn: psycopg.Connection[Any], future: int) -> None:
    for start in range(0, future, 10_000):
        count = min(10_000, future - start)
        enqueue_many(
            conn,
            [NewJob("noop", priority=FUTURE_PRIORITY, delay=3600) for _ in range(count)],
            notify=False,
        )


def claim_rate_with_future(
    dsn: str, future: int = 200_000, claims: int = 1000, repeats: int = 3
) -> dict[str, Any]:
    """Three tables built side by side; in each repeat the layouts take turns in bursts of
    BURST claims until each has made `claims`, and the rate is jobs over summed time. Ratios
    are the medians of the ratios within each repeat."""
    layouts = ("none", "scheduled", "old_available")
    rates: dict[str, list[float]] = {k: [] for k in layouts}
    with ExitStack() as stack:
        dbs = {k: stack.enter_context(fresh_database(dsn, f"future_{k}")) for k in layouts}
        conns = {
            k: stack.enter_context(psycopg.connect(db, autocommit=True)) for k, db in dbs.items()
        }
        for layout, conn in conns.items():
            migrate(dbs[layout])
            if layout != "none":
                _add_future(conn, future)
            if layout == "old_available":
                # Every future job in the claim index, as before the scheduled state.
                conn.execute("UPDATE pgq.jobs SET state = 'available' WHERE state = 'scheduled'")
        for _ in range(repeats):
            totals = {k: [0, 0.0] for k in layouts}
            for conn in conns.values():
                _fill_due(conn, claims)
            for _ in range(claims // BURST):
                for layout, conn in conns.items():
                    done, seconds = _burst(conn)
                    totals[layout][0] += done
                    totals[layout][1] += seconds
            for layout, (done, seconds) in totals.items():
                rates[layout].append(done / seconds)
    within = [s / n for s, n in zip(rates["scheduled"], rates["none"], strict=True)]
    old = [o / n for o, n in zip(rates["old_available"], rates["none"], strict=True)]
    return {
        "scenario": "claim_rate_with_future",
        "future_jobs": future,
        "future_priority": FUTURE_PRIORITY,
        "due_priority": DUE_PRIORITY,
        "claims": claims,
        "batch": BATCH,
        "burst": BURST,
        "repeats": repeats,
        "jobs_per_s": {k: round(median(v)) for k, v in rates.items()},
        "runs": {k: [round(x) for x in v] for k, v in rates.items()},
        "ratio": round(median(within), 3),
        "ratio_old_layout": round(median(old), 3),
    }


def delayed_lateness(
    dsn: str,
    jobs: int = 200,
    delay: float = 1.0,
    interval: float = 0.025,
    processes: int = 2,
    *,
    log_dir: Path,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Jobs enqueued every `interval` with `delay`: handler start minus run_at."""
    with fresh_database(dsn, "ours_delayed") as db:
        migrate(db)
        create_side_tables(db)
        config = config_text(
            processes, 10, kind="record_start", handler="benchlib.ours_handlers:record_start"
        )
        with (
            psycopg.connect(db, autocommit=True) as conn,
            Supervisor(db, config, log_dir, "delayed") as sup,
        ):
            wait_idle_children(conn, sup, processes, timeout)
            run_at: dict[int, Any] = {}
            for _ in paced(jobs, interval):
                job_id = enqueue(conn, "record_start", delay=delay)
                run_at[job_id] = conn.execute(
                    "SELECT run_at FROM pgq.jobs WHERE id = %s", (job_id,)
                ).fetchone()[0]

            def started() -> dict[int, Any]:
                return dict(conn.execute("SELECT job_id, min(at) FROM bench_started GROUP BY 1"))

            _wait(lambda: len(started()) >= jobs, sup, timeout, "delayed jobs started")
            starts = started()
    lateness = [(starts[i] - at).total_seconds() for i, at in run_at.items()]
    return {
        "scenario": "delayed_lateness",
        "jobs": jobs,
        "delay_s": delay,
        "interval_s": interval,
        "poll_interval_s": 1.0,
        "early": sum(1 for x in lateness if x < 0),
        **latency_summary_ms(lateness),
        "timed_by": "bench_started (handler's first statement) minus the job's run_at",
    }
