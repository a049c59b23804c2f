"""The fleet benchmark: several supervisors ("hosts", each its own PGQ_HOST) on one database.

Each run starts its supervisors on an empty fresh database and waits until every child is
registered idle, then commits all the no-op jobs in one transaction, and times from the first
claim to the moment none is left (the database clock, as ``ours.drain_with`` does). While it
drains, pg_stat_activity is sampled for the supervisors' sessions (connections per host), and
the WAL written is read from ``pg_current_wal_lsn()`` before and after (bytes per job: what a
replica and the archive must carry).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import psycopg

from benchlib.common import fresh_database, rate
from benchlib.ours import Supervisor, config_text, time_drain
from supervisor import NewJob, enqueue_many, migrate

IDLE = "SELECT count(*) FROM pgq.workers WHERE state = 'idle'"
SESSIONS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND application_name LIKE 'pgq-supervisor%%'
"""
WAL = "SELECT pg_current_wal_lsn()"
WAL_SINCE = "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)"


def fleet_drain(
    dsn: str,
    jobs: int,
    hosts: int,
    processes: int,
    batch: int,
    *,
    log_dir: Path,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """``hosts`` supervisors of ``processes`` children each drain ``jobs`` no-op jobs."""
    name = f"fleet-h{hosts}-p{processes}-b{batch}"
    with (
        fresh_database(dsn, name.replace("-", "_")) as db,
        contextlib.ExitStack() as stack,
        psycopg.connect(db, autocommit=True) as conn,
    ):
        migrate(db)
        config = config_text(processes, batch)
        sups = [
            stack.enter_context(Supervisor(db, config, log_dir, f"{name}-{i}", host=f"host-{i}"))
            for i in range(hosts)
        ]
        deadline = time.monotonic() + 60
        while conn.execute(IDLE).fetchone()[0] < hosts * processes:  # type: ignore[index]
            for sup in sups:
                sup.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: children not all idle after 60s")
            time.sleep(0.2)
        (wal_before,) = conn.execute(WAL).fetchone()  # type: ignore[misc]
        with conn.transaction():
            for start in range(0, jobs, 10_000):
                enqueue_many(conn, [NewJob("noop") for _ in range(min(10_000, jobs - start))])
        sessions = 0

        def sample(polls: int) -> None:
            nonlocal sessions
            if polls % 50 == 0:
                sessions = max(sessions, conn.execute(SESSIONS).fetchone()[0])  # type: ignore[index]
                for sup in sups:
                    sup.check_alive()

        seconds = time_drain(
            conn,
            timeout=timeout,
            on_timeout=lambda: f"{name}: not drained after {timeout:.0f}s",
            each_poll=sample,
        )
        (wal,) = conn.execute(WAL_SINCE, (wal_before,)).fetchone()  # type: ignore[misc]
        codes = [sup.stop() for sup in sups]
    if any(codes):
        raise RuntimeError(f"{name}: supervisors exited {codes}; see {log_dir}")
    return {
        "hosts": hosts,
        "processes_per_host": processes,
        "children": hosts * processes,
        "batch": batch,
        "jobs": jobs,
        "seconds": round(seconds, 3),
        "jobs_per_s": rate(jobs, seconds),
        "connections": sessions,
        "connections_per_host": round(sessions / hosts, 1),
        "wal_bytes_per_job": round(float(wal) / jobs, 1),
    }
