"""Who is running: supervisors and their children, registered in the database for `status`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import psutil
import psycopg

from supervisor.queue.queries import query
from supervisor.queue.scaling import scaling_query
from supervisor.shared import memory

# A supervisor whose heartbeat is older than this is presumed dead and its rows are pruned.
STALE_AFTER = 30.0


@dataclass(frozen=True)
class WorkerRow:
    worker_id: str
    pool: str
    slot: int
    pid: int
    state: str
    job_id: int | None
    kind: str | None
    job_started: datetime | None
    spawned_at: datetime
    # Resident set size at the heartbeat (None when the process could not be read).
    rss_bytes: int | None = None


def _ts(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, timezone.utc) if epoch else None


def heartbeat(
    conn: psycopg.Connection[Any],
    supervisor_id: str,
    host: str,
    config_path: str,
    workers: list[WorkerRow],
    external_kinds: list[str] | None = None,
    scaling: str | None = None,
) -> list[tuple[str, str, int]]:
    """Refresh this supervisor's row and its children's; prune dead supervisors.
    Returns the (id, host, pid) of the supervisors pruned."""
    with conn.transaction():
        conn.execute(
            query("heartbeat_supervisor"),
            {
                "id": supervisor_id,
                "host": host,
                "pid": os.getpid(),
                "config": config_path,
                # The kinds this YAML declares `effects: external`: every rescuer honours them.
                "external_kinds": external_kinds or None,
            },
        )
        if scaling is not None:
            conn.execute(
                scaling_query("publish_scaling"), {"id": supervisor_id, "scaling": scaling}
            )
        conn.execute(query("clear_workers"), {"id": supervisor_id})
        if workers:
            conn.execute(
                query("record_workers"),
                {
                    "id": supervisor_id,
                    "worker_ids": [w.worker_id for w in workers],
                    "pools": [w.pool for w in workers],
                    "slots": [w.slot for w in workers],
                    "pids": [w.pid for w in workers],
                    "states": [w.state for w in workers],
                    "job_ids": [w.job_id for w in workers],
                    "kinds": [w.kind for w in workers],
                    "job_starts": [w.job_started for w in workers],
                    "spawned": [w.spawned_at for w in workers],
                    "rss": [w.rss_bytes for w in workers],
                },
            )
        pruned = conn.execute(query("prune_supervisors"), {"stale_after": STALE_AFTER})
        return [tuple(row) for row in pruned.fetchall()]  # type: ignore[misc]


def unregister(conn: psycopg.Connection[Any], supervisor_id: str) -> None:
    conn.execute(query("unregister_supervisor"), {"id": supervisor_id})


def worker_row(child: Any, kinds: list[str]) -> WorkerRow:
    """A child's registry row from its status board."""
    running = child.board.running_jobs()
    job = running[0] if running else None
    kind = kinds[job.kind_index] if job and 0 <= job.kind_index < len(kinds) else None
    state = "stopping" if child.kill_reason else child.board.state.name.lower()
    if child.draining and not child.kill_reason:
        state = "draining"
    return WorkerRow(
        worker_id=child.worker_id,
        pool=child.pool,
        slot=child.slot,
        pid=child.pid,
        state=state,
        job_id=job.job_id if job else None,
        kind=kind,
        job_started=_ts(job.started_wall) if job else None,
        spawned_at=_ts(child.spawned_wall) or datetime.now(timezone.utc),
        rss_bytes=_rss(child.pid),
    )


def _rss(pid: int) -> int | None:
    # One read of /proc/<pid>/statm: cheap enough for every child at every heartbeat.
    try:
        return memory.rss(pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
