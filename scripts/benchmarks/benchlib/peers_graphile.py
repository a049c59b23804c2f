"""Graphile Worker (Node.js, npm ``graphile-worker``) as a peer: drain throughput and idle
pick-up latency, driven like PgQueuer and Procrastinate.

How it runs, and why that is fair to it:

- Installed by npm into a temporary folder this module creates (and removes at exit), pinned to
  GRAPHILE_VERSION; its schema by its own CLI (``graphile-worker --schema-only``). Node 20+.
- Workers are real OS processes, each ``run()`` from its library (graphile_worker.mjs): at
  batch 1 its defaults (one job per fetch, a completion per job); at batch B > 1 its own
  batching, as its performance documentation describes: a local queue of B jobs locked per
  fetch, completions batched per tick (``completeJobBatchDelay: 0``), B concurrent jobs.
  LISTEN/NOTIFY wake-ups with its default 2 s poll. Stopped with SIGTERM (its graceful
  shutdown).
- Jobs are added in bulk with its SQL API (``graphile_worker.add_jobs``); the task does
  nothing.

What is timed:

- ``drain``: Graphile deletes a job when it completes, so the database is polled every few
  milliseconds (``clock_timestamp()``): from the first poll that sees a locked job to the first
  that sees none left (resolution: the poll interval).
- ``pickup``: as for the other peers, a trigger on its job table stamps the enqueue in
  ``bench_enqueued`` and the task's first statement writes ``bench_started``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import (
    as_uri,
    connect,
    create_side_tables,
    default_log_dir,
    fresh_database,
    install_enqueue_marker,
    latency_summary_ms,
    measure_pickup,
    paced,
    rate,
    ready_spread,
    wait_until,
    worker_processes,
)

GRAPHILE_VERSION = "0.17.3"
WORKER_SCRIPT = Path(__file__).with_name("graphile_worker.mjs")
FILL = """
SELECT count(*)
FROM graphile_worker.add_jobs(ARRAY(
    SELECT ROW('noop', '{}'::json, NULL, NULL, NULL, NULL, NULL, NULL)::graphile_worker.job_spec
    FROM generate_series(1, %(jobs)s)
))
"""
PROGRESS = """
SELECT EXISTS (SELECT 1 FROM graphile_worker._private_jobs WHERE locked_at IS NOT NULL),
       NOT EXISTS (SELECT 1 FROM graphile_worker._private_jobs),
       clock_timestamp()
"""
ADD_ONE = "SELECT (graphile_worker.add_job('noop', '{}'::json)).id"
_installed: Path | None = None


def available() -> bool:
    return shutil.which("node") is not None and shutil.which("npm") is not None


def install_package() -> Path:
    """npm-install graphile-worker into a temporary folder, once per run; removed at exit."""
    global _installed
    if _installed is not None:
        return _installed
    folder = Path(tempfile.mkdtemp(prefix="pgq-graphile-"))
    atexit.register(shutil.rmtree, folder, True)
    done = subprocess.run(
        [
            "npm",
            "install",
            "--no-audit",
            "--no-fund",
            "--silent",
            f"graphile-worker@{GRAPHILE_VERSION}",
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"npm install graphile-worker failed: {done.stderr.strip()[-2000:]}")
    shutil.copy(WORKER_SCRIPT, folder / WORKER_SCRIPT.name)
    _installed = folder
    return folder


def install_schema(folder: Path, dsn: str) -> None:
    cli = folder / "node_modules" / "graphile-worker" / "dist" / "cli.js"
    done = subprocess.run(
        ["node", str(cli), "--schema-only"],
        cwd=folder,
        env={**os.environ, "DATABASE_URL": dsn},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(f"graphile-worker --schema-only failed: {done.stderr.strip()[-2000:]}")


def settings(batch: int) -> dict[str, Any]:
    return {
        "version": GRAPHILE_VERSION,
        "concurrent_jobs": max(1, batch),
        "local_queue_size": batch if batch > 1 else None,
        "complete_job_batch_delay_ms": 0 if batch > 1 else None,
        "poll_interval_ms": 2000,
    }


def _worker_argv(folder: Path) -> list[str]:
    return ["node", str(folder / WORKER_SCRIPT.name)]


def drain(
    dsn: str,
    jobs: int,
    processes: int,
    batch: int,
    *,
    timeout: float = 600.0,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """Add `jobs` no-op jobs, then time `processes` Graphile Worker processes emptying them."""
    folder = install_package()
    with fresh_database(dsn, "graphile_drain") as db:
        install_schema(folder, as_uri(db))
        create_side_tables(db)
        with connect(db) as conn:
            conn.execute(FILL, {"jobs": jobs})
            conn.execute("VACUUM ANALYZE graphile_worker._private_jobs")
            first = last = None
            with worker_processes("graphile", log_dir or default_log_dir()) as workers:
                workers.start(
                    _worker_argv(folder),
                    dsn=as_uri(db),
                    count=processes,
                    extra_env={"BENCH_BATCH": str(batch)},
                )
                deadline = time.monotonic() + timeout
                while last is None:
                    started, done, at = conn.execute(PROGRESS).fetchone()  # type: ignore[misc]
                    if first is None and (started or done):
                        first = at
                    if done:
                        last = at
                    elif time.monotonic() > deadline:
                        raise TimeoutError(f"Graphile Worker did not drain {jobs} jobs")
                    else:
                        workers.check_alive()
                        time.sleep(0.003)
                ready, spread = ready_spread(conn)
    seconds = (last - first).total_seconds()
    return {
        "system": "graphile-worker",
        "scenario": "drain",
        "jobs": jobs,
        "processes": processes,
        "batch": batch,
        "seconds": round(seconds, 4),
        "jobs_per_s": rate(jobs, seconds),
        "ready_spread_s": None if spread is None or ready < 2 else round(spread, 3),
        "timed_by": "polled: first locked job to none left (database clock_timestamp())",
        "settings": settings(batch),
    }


def pickup(
    dsn: str,
    jobs: int = 200,
    interval: float = 0.020,
    processes: int = 2,
    *,
    batch: int = 1,
    warmup: int = 20,
    timeout: float = 120.0,
    log_dir: Path | None = None,
) -> dict[str, Any]:
    """Idle Graphile workers; one job every `interval`; enqueue-commit to task-start latency.
    At its defaults (batch 1: no local queue, which would hold jobs back for a batch)."""
    folder = install_package()
    with fresh_database(dsn, "graphile_pickup") as db:
        install_schema(folder, as_uri(db))
        create_side_tables(db)
        install_enqueue_marker(db, "graphile_worker", "_private_jobs")
        with connect(db) as conn, worker_processes("graphile", log_dir or default_log_dir()) as w:
            w.start(
                _worker_argv(folder),
                dsn=as_uri(db),
                count=processes,
                extra_env={"BENCH_BATCH": str(batch), "BENCH_PEER_RECORD_START": "1"},
            )
            wait_until(
                lambda: ready_spread(conn)[0] >= processes,
                timeout=timeout,
                what="Graphile workers to start",
                workers=w,
            )
            _, latencies = measure_pickup(
                conn,
                lambda count: [
                    int(conn.execute(ADD_ONE).fetchone()[0])  # type: ignore[index]
                    for _ in paced(count, interval)
                ],
                warmup=warmup,
                jobs=jobs,
                wait=lambda ok, what: wait_until(
                    ok, timeout=timeout, what=f"Graphile {what}", workers=w
                ),
            )
    return {
        "system": "graphile-worker",
        "scenario": "pickup",
        "jobs": jobs,
        "interval_s": interval,
        "processes": processes,
        "batch": batch,
        **latency_summary_ms(latencies),
        "timed_by": "bench_enqueued (insert trigger) to bench_started (task's first statement)",
        "settings": settings(batch),
    }
