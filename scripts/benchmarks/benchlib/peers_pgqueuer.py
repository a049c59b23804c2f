"""PgQueuer (1.x) as a peer: drain throughput and idle pick-up latency.

How it runs, and why that is fair to it:

- Installed with its own CLI, ``pgq install`` (default durability: logged tables, like ours).
- Workers are real OS processes, each running ``pgqueuer.run(factory, batch_size=B)`` on uvloop:
  exactly what its CLI ``pgq run module:factory --batch-size B`` does (the CLI itself fails to
  start with typer 0.29, see ``worker_main``). The factory builds the asyncpg driver and a bare
  ``QueueManager`` (no scheduler polling beside it). ``batch_size`` is its dequeue batch and
  also sizes its completion-log buffer; every other setting is its default: no concurrency
  cap, LISTEN/NOTIFY wake-ups with the 30 s fallback poll, 30 s heartbeat timeout; its logger
  stays at WARNING (it logs nothing per job at INFO either).
- Stopped with SIGTERM, which ``pgqueuer.run`` turns into a graceful shutdown.

What is timed:

- ``drain``: PgQueuer keeps its own log table, ``pgqueuer_log``, with a row per status change
  stamped by the database (``created DEFAULT now()``: the time its transaction started). The
  handler does nothing at all. Throughput is jobs over the span from the first ``picked`` row
  (the first claim) to the last ``successful`` row (the last completion reaching the
  database).
- ``pickup``: its log has no row for "handler started", so the handler's first statement
  writes ``clock_timestamp()`` into ``bench_started``, and a trigger on ``pgqueuer`` stamps the
  enqueue in ``bench_enqueued`` (see ``common``).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

from .common import (
    DSN_ENV,
    MARK_READY_ASYNCPG,
    MARK_STARTED_ASYNCPG,
    as_uri,
    claim_latencies,
    connect,
    create_side_tables,
    default_log_dir,
    fresh_database,
    install_enqueue_marker,
    latency_summary_ms,
    measure_pickup,
    rate,
    ready_spread,
    wait_until,
    worker_processes,
)

ENTRYPOINT = "noop"
#: Set in a worker's environment when its handler must record its start (pickup only).
RECORD_START_ENV = "BENCH_PEER_RECORD_START"
ENQUEUE_CHUNK = 5000

DRAIN_SPAN = """
SELECT
    count(*) FILTER (WHERE status = 'successful'),
    count(*) FILTER (WHERE status NOT IN ('queued', 'picked', 'successful')),
    extract(epoch FROM max(created) FILTER (WHERE status = 'successful')
                     - min(created) FILTER (WHERE status = 'picked'))::float8
FROM pgqueuer_log
"""

#: Enqueue to claim: the 'picked' log row is stamped with the dequeue transaction's now().
CLAIM_LATENCIES = """
SELECT extract(epoch FROM l.created - e.at)::float8
FROM bench_enqueued AS e
JOIN pgqueuer_log AS l ON l.job_id = e.job_id AND l.status = 'picked'
WHERE e.job_id <> ALL(%(warmup)s::bigint[])
"""

QUEUE_EMPTY = "SELECT NOT EXISTS (SELECT 1 FROM pgqueuer)"


def settings(batch: int) -> dict[str, Any]:
    """The worker settings used, as reported with every result."""
    return {
        "driver": "asyncpg",
        "manager": "QueueManager",
        "batch_size": batch,
        "dequeue_timeout_s": 30.0,
        "max_concurrent_tasks": None,
        "durability": "durable",
        "runner": "pgqueuer.run on uvloop (what `pgq run` calls)",
    }


# -- the worker process side: `python -m benchlib.peers_pgqueuer` in each worker ---------------


@asynccontextmanager
async def worker_factory() -> AsyncIterator[QueueManager]:
    """The factory ``pgqueuer.run`` calls in each worker process (as ``pgq run`` would)."""
    dsn = os.environ[DSN_ENV]
    conn = await asyncpg.connect(dsn)
    side = await asyncpg.connect(dsn) if os.environ.get(RECORD_START_ENV) else None
    side_lock = asyncio.Lock()
    manager = QueueManager(Queries(AsyncpgDriver(conn)))

    if side is None:

        @manager.entrypoint(ENTRYPOINT)
        async def noop(job: Job) -> None:
            return None

    else:

        @manager.entrypoint(ENTRYPOINT)
        async def noop_recorded(job: Job) -> None:
            async with side_lock:
                await side.execute(MARK_STARTED_ASYNCPG, job.id)

    await conn.execute(MARK_READY_ASYNCPG, os.getpid())
    try:
        yield manager
    finally:
        if side is not None:
            await side.close()


def _worker_argv(batch: int) -> list[str]:
    return [sys.executable, "-m", "benchlib.peers_pgqueuer", "--batch-size", str(batch)]


def worker_main(argv: list[str] | None = None) -> None:
    """One worker process: ``pgqueuer.run``, the function behind ``pgq run``, on uvloop.

    ``pgq run`` itself cannot start under typer 0.29: its ``--log-level`` parser hands a str
    where an enum is expected, even for the default. ``pgqueuer.run`` is what it would call
    next, with the same arguments and the same SIGINT/SIGTERM handling.
    """
    import argparse

    import uvloop
    from pgqueuer import run

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, required=True)
    args = parser.parse_args(argv)
    uvloop.run(run(worker_factory, batch_size=args.batch_size))


# -- the benchmark side -------------------------------------------------------------------------


def install(dsn: str) -> None:
    """`pgq install` into the database (its own CLI, DSN passed through the environment)."""
    env = dict(os.environ, PGDSN=as_uri(dsn))
    done = subprocess.run(
        [sys.executable, "-m", "pgqueuer", "install"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pgq install failed ({done.returncode}): {done.stderr.strip()}")


async def _enqueue_bulk(uri: str, jobs: int) -> None:
    conn = await asyncpg.connect(uri)
    try:
        queries = Queries(AsyncpgDriver(conn))
        left = jobs
        while left > 0:
            n = min(ENQUEUE_CHUNK, left)
            await queries.enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)
            left -= n
    finally:
        await conn.close()


def drain(
    dsn: str,
    jobs: int,
    processes: int,
    batch: int,
    *,
    timeout: float = 600.0,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """Enqueue `jobs` no-op jobs, then time `processes` PgQueuer workers emptying the queue."""
    with fresh_database(dsn, "pgqueuer_drain") as db:
        install(db)
        create_side_tables(db)
        asyncio.run(_enqueue_bulk(as_uri(db), jobs))
        with connect(db) as conn:
            conn.execute("VACUUM ANALYZE pgqueuer")
            with worker_processes("pgqueuer", log_dir or default_log_dir()) as workers:
                workers.start(_worker_argv(batch), dsn=as_uri(db), count=processes)
                wait_until(
                    lambda: bool(conn.execute(QUEUE_EMPTY).fetchone()[0]),  # type: ignore[index]
                    timeout=timeout,
                    what=f"PgQueuer to drain {jobs} jobs",
                    workers=workers,
                    interval=0.1,
                )
                ready, spread = ready_spread(conn)
            done, failed, seconds = conn.execute(DRAIN_SPAN).fetchone()  # type: ignore[misc]
    if done != jobs or failed:
        raise RuntimeError(f"PgQueuer drain: {done} of {jobs} jobs succeeded, {failed} failed")
    return {
        "system": "pgqueuer",
        "scenario": "drain",
        "jobs": jobs,
        "processes": processes,
        "batch": batch,
        "seconds": round(seconds, 4),
        "jobs_per_s": rate(jobs, seconds),
        "ready_spread_s": None if spread is None or ready < 2 else round(spread, 3),
        "timed_by": "pgqueuer_log: first 'picked' to last 'successful' (database now())",
        "settings": settings(batch),
    }


async def _enqueue_paced(uri: str, count: int, interval: float) -> list[int]:
    conn = await asyncpg.connect(uri)
    try:
        queries = Queries(AsyncpgDriver(conn))
        ids: list[int] = []
        start = time.perf_counter()
        for i in range(count):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            [job_id] = await queries.enqueue(ENTRYPOINT, None)
            ids.append(int(job_id))
        return ids
    finally:
        await conn.close()


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
    """Idle PgQueuer workers; one job every `interval`; enqueue-commit to handler-start latency.

    The first `warmup` jobs (same pacing) wake every worker, its connections and plans, and
    are left out of the figures.
    """
    with fresh_database(dsn, "pgqueuer_pickup") as db:
        install(db)
        create_side_tables(db)
        install_enqueue_marker(db, "pgqueuer")
        uri = as_uri(db)
        with connect(db) as conn, worker_processes("pgqueuer", log_dir or default_log_dir()) as w:
            w.start(
                _worker_argv(batch), dsn=uri, count=processes, extra_env={RECORD_START_ENV: "1"}
            )
            wait_until(
                lambda: ready_spread(conn)[0] >= processes,
                timeout=timeout,
                what="PgQueuer workers to start",
                workers=w,
            )
            warm, latencies = measure_pickup(
                conn,
                lambda count: asyncio.run(_enqueue_paced(uri, count, interval)),
                warmup=warmup,
                jobs=jobs,
                wait=lambda ok, what: wait_until(
                    ok, timeout=timeout, what=f"PgQueuer {what}", workers=w
                ),
            )
            claims = claim_latencies(conn, CLAIM_LATENCIES, warm)
    return {
        "system": "pgqueuer",
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


if __name__ == "__main__":
    worker_main()
