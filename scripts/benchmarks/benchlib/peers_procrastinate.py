"""Procrastinate (3.x) as a peer: drain throughput and idle pick-up latency.

How it runs, and why that is fair to it:

- Installed with its own CLI, ``procrastinate --app=... schema --apply``.
- Workers are real OS processes started with its own CLI, ``python -m procrastinate
  --app=benchlib.peers_procrastinate.app worker --concurrency=B``. Procrastinate fetches one
  job per query and has no batch setting; ``--concurrency`` (jobs in flight per worker) is
  the setting that plays the role of our batch, so it gets ``batch``. Its psycopg pool gets
  ``concurrency + 2`` connections, at most 12 (one for LISTEN, one for fetching, one per job
  in flight for its completion): psycopg_pool's default of 4 would cap the completions in
  flight; measured here, 4 against 12 changes its drain rate by less than the noise (about
  700 against 780 jobs/s at concurrency 10), and 102 connections per worker would exhaust
  the server's max_connections. Everything else is its default: LISTEN/NOTIFY
  wake-ups (``fetch_job_polling_interval`` 5 s is only the fallback), jobs kept after success
  (``delete_jobs=never``), log level WARNING (nothing logged per job).
- Stopped with SIGTERM, which its worker turns into a graceful shutdown.

What is timed:

- ``drain``: Procrastinate keeps its own event table, ``procrastinate_events``, written by
  triggers in the same transaction as each status change and stamped by the database
  (``at DEFAULT now()``). The handler does nothing at all. Throughput is jobs over the span
  from the first ``started`` event (the first fetch) to the last ``succeeded`` event (the last
  completion reaching the database).
- ``pickup``: the handler's first statement writes ``clock_timestamp()`` into
  ``bench_started`` (on a connection of its own, opened by the warm-up jobs), and a trigger on
  ``procrastinate_jobs`` stamps the enqueue in ``bench_enqueued`` (see ``common``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import procrastinate
import psycopg

from .common import (
    DSN_ENV,
    SCRIPTS_DIR,
    claim_latencies,
    connect,
    create_side_tables,
    default_log_dir,
    fresh_database,
    install_enqueue_marker,
    latency_summary_ms,
    measure_pickup,
    paced,
    rate,
    wait_until,
    worker_processes,
)

#: How many connections each worker's pool holds (set for the worker processes).
POOL_ENV = "BENCH_PROCRASTINATE_POOL"
APP_PATH = "benchlib.peers_procrastinate.app"
ENQUEUE_CHUNK = 5000

MARK_STARTED = "INSERT INTO bench_started (job_id, at) VALUES (%(job_id)s, clock_timestamp())"

DRAIN_SPAN = """
SELECT
    count(*) FILTER (WHERE type = 'succeeded'),
    count(*) FILTER (WHERE type NOT IN ('deferred', 'started', 'succeeded')),
    extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')
                     - min(at) FILTER (WHERE type = 'started'))::float8
FROM procrastinate_events
"""

QUEUE_EMPTY = """
SELECT NOT EXISTS (
    SELECT 1
    FROM procrastinate_jobs
    WHERE status IN ('todo', 'doing')
)
"""

#: Enqueue to claim: the 'started' event is stamped with the fetch transaction's now().
CLAIM_LATENCIES = """
SELECT extract(epoch FROM ev.at - e.at)::float8
FROM bench_enqueued AS e
JOIN procrastinate_events AS ev ON ev.job_id = e.job_id AND ev.type = 'started'
WHERE e.job_id <> ALL(%(warmup)s::bigint[])
"""

WORKERS_REGISTERED = (
    "SELECT count(*), extract(epoch FROM max(last_heartbeat) - min(last_heartbeat))::float8 "
    "FROM procrastinate_workers"
)


def make_app(conninfo: str, pool_size: int = 4) -> procrastinate.App:
    """An App with the benchmark's two tasks, on a psycopg pool of pool_size connections."""
    connector = procrastinate.PsycopgConnector(
        conninfo=conninfo, min_size=pool_size, max_size=pool_size
    )
    new_app = procrastinate.App(connector=connector)

    @new_app.task(name="noop")
    async def noop() -> None:
        return None

    @new_app.task(name="noop_recorded", pass_context=True)
    async def noop_recorded(context: procrastinate.JobContext) -> None:
        await _mark_started(conninfo, context.job.id)

    return new_app


_marker: psycopg.AsyncConnection[Any] | None = None
_marker_lock = asyncio.Lock()


async def _mark_started(conninfo: str, job_id: int | None) -> None:
    """Record the handler's start on a connection of its own, as the PgQueuer handler does.

    Going through the worker's pool instead would add a pool check-out to Procrastinate's
    figure that PgQueuer's does not pay.
    """
    global _marker
    async with _marker_lock:
        if _marker is None:
            _marker = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        await _marker.execute(MARK_STARTED, {"job_id": job_id})


#: What the worker CLI loads (``--app``); its DSN and pool size come from the environment.
app = make_app(os.environ.get(DSN_ENV, ""), int(os.environ.get(POOL_ENV, "4")))


def settings(batch: int) -> dict[str, Any]:
    """The worker settings used, as reported with every result."""
    return {
        "concurrency": batch,
        "pool_size": pool_size(batch),
        "listen_notify": True,
        "fetch_job_polling_interval_s": 5.0,
        "delete_jobs": "never",
        "log_level": "WARNING",
    }


#: Beyond this many jobs in flight a larger pool buys a no-op job nothing (one event loop does
#: all the work) and would only eat the server's max_connections.
POOL_CAP = 12


def pool_size(concurrency: int) -> int:
    return min(concurrency + 2, POOL_CAP)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "procrastinate", f"--app={APP_PATH}", *args]


def _worker_argv(batch: int) -> list[str]:
    return _cli("worker", f"--concurrency={batch}", "--shutdown-graceful-timeout=10")


def install(dsn: str) -> None:
    """`procrastinate schema --apply` into the database (its own CLI)."""
    env = dict(os.environ)
    env[DSN_ENV] = dsn
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SCRIPTS_DIR), env.get("PYTHONPATH", "")) if p
    )
    done = subprocess.run(
        _cli("schema", "--apply"), env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"procrastinate schema --apply failed ({done.returncode}): {done.stderr.strip()}"
        )


async def _enqueue_bulk(dsn: str, jobs: int) -> None:
    bench_app = make_app(dsn, pool_size=1)
    async with bench_app.open_async():
        task = bench_app.tasks["noop"]
        left = jobs
        while left > 0:
            n = min(ENQUEUE_CHUNK, left)
            await task.batch_defer_async(*({} for _ in range(n)))
            left -= n


def drain(
    dsn: str,
    jobs: int,
    processes: int,
    batch: int,
    *,
    timeout: float = 900.0,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """Enqueue `jobs` no-op jobs, then time `processes` Procrastinate workers emptying the queue.

    Procrastinate is slow at batch 1; pass a smaller `jobs` to bound the run, the rate holds.
    """
    with fresh_database(dsn, "procrastinate_drain") as db:
        install(db)
        asyncio.run(_enqueue_bulk(db, jobs))
        with connect(db) as conn:
            conn.execute("VACUUM ANALYZE procrastinate_jobs")
            with worker_processes("procrastinate", log_dir or default_log_dir()) as workers:
                workers.start(
                    _worker_argv(batch),
                    dsn=db,
                    count=processes,
                    extra_env={POOL_ENV: str(pool_size(batch))},
                )
                wait_until(
                    lambda: bool(conn.execute(QUEUE_EMPTY).fetchone()[0]),  # type: ignore[index]
                    timeout=timeout,
                    what=f"Procrastinate to drain {jobs} jobs",
                    workers=workers,
                    interval=0.1,
                )
            done, failed, seconds = conn.execute(DRAIN_SPAN).fetchone()  # type: ignore[misc]
    if done != jobs or failed:
        raise RuntimeError(
            f"Procrastinate drain: {done} of {jobs} jobs succeeded, {failed} other events"
        )
    return {
        "system": "procrastinate",
        "scenario": "drain",
        "jobs": jobs,
        "processes": processes,
        "batch": batch,
        "seconds": round(seconds, 4),
        "jobs_per_s": rate(jobs, seconds),
        "timed_by": "procrastinate_events: first 'started' to last 'succeeded' (database now())",
        "settings": settings(batch),
    }


def _enqueue_paced(bench_app: procrastinate.App, count: int, interval: float) -> list[int]:
    """Defer `count` jobs on a fixed schedule (the insert trigger stamps each one)."""
    task = bench_app.tasks["noop_recorded"]
    return [task.defer() for _ in paced(count, interval)]


def pickup(
    dsn: str,
    jobs: int = 200,
    interval: float = 0.020,
    processes: int = 2,
    *,
    batch: int = 10,
    warmup: int = 20,
    timeout: float = 120.0,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """Idle Procrastinate workers; one job every `interval`; enqueue-commit to start latency.

    The first `warmup` jobs (same pacing) wake every worker, its connections and plans, and
    are left out of the figures.
    """
    with fresh_database(dsn, "procrastinate_pickup") as db:
        install(db)
        create_side_tables(db)
        install_enqueue_marker(db, "procrastinate_jobs")
        bench_app = make_app(db, pool_size=1)
        with (
            connect(db) as conn,
            worker_processes("procrastinate", log_dir or default_log_dir()) as w,
            bench_app.open(),
        ):
            w.start(
                _worker_argv(batch),
                dsn=db,
                count=processes,
                extra_env={POOL_ENV: str(pool_size(batch))},
            )
            wait_until(
                lambda: conn.execute(WORKERS_REGISTERED).fetchone()[0] >= processes,  # type: ignore[index]
                timeout=timeout,
                what="Procrastinate workers to register",
                workers=w,
            )
            warm, latencies = measure_pickup(
                conn,
                lambda count: _enqueue_paced(bench_app, count, interval),
                warmup=warmup,
                jobs=jobs,
                wait=lambda ok, what: wait_until(
                    ok, timeout=timeout, what=f"Procrastinate {what}", workers=w
                ),
            )
            claims = claim_latencies(conn, CLAIM_LATENCIES, warm)
    return {
        "system": "procrastinate",
        "scenario": "pickup",
        "jobs": jobs,
        "interval_s": interval,
        "processes": processes,
        "batch": batch,
        **latency_summary_ms(latencies),
        "claim_p50_ms": latency_summary_ms(claims)["p50_ms"],
        "timed_by": "bench_enqueued (insert trigger) to bench_started (handler's first statement)",
        "settings": settings(batch),
    }
