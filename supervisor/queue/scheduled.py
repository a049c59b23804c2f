"""Jobs waiting for a future time: staging them when due, and the ticks of periodic schedules.

A job due later is written 'scheduled' and kept out of the claim index; the stager (a master
service) moves due ones to available in bounded batches. The schedule functions record which
tick of a periodic schedule has been enqueued, so that exactly one supervisor enqueues each.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from supervisor.queue.queries import query

STAGE_BATCH = 1000


@dataclass(frozen=True)
class Staged:
    queue: str
    jobs: int


def stage_due(conn: psycopg.Connection[Any], *, limit: int = STAGE_BATCH) -> list[Staged]:
    """Move up to ``limit`` due scheduled jobs to available; wakes their queues' workers."""
    rows = conn.execute(query("stage_due"), {"limit": limit}).fetchall()
    return [Staged(queue, int(jobs)) for queue, jobs, _ in rows]


def seconds_to_next(conn: psycopg.Connection[Any]) -> float | None:
    """Seconds until the earliest scheduled job is due (database clock); None when none."""
    row = conn.execute(query("next_scheduled")).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def database_now(conn: psycopg.Connection[Any]) -> datetime:
    """The database's clock: the time every supervisor on it agrees on."""
    row = conn.execute(query("database_clock")).fetchone()
    assert row is not None
    now: datetime = row[0]
    return now


def claim_tick(conn: psycopg.Connection[Any], name: str, tick: datetime) -> bool:
    """Move schedule ``name``'s last tick to ``tick``; True for the one caller that did.

    Run it in the transaction that enqueues the tick's job: both commit or neither does.
    """
    row = conn.execute(query("claim_schedule_tick"), {"name": name, "tick": tick}).fetchone()
    return row is not None


def last_tick(conn: psycopg.Connection[Any], name: str) -> datetime | None:
    row = conn.execute(query("schedule_last_tick"), {"name": name}).fetchone()
    return None if row is None else row[0]


def record_job(conn: psycopg.Connection[Any], name: str, job_id: int) -> None:
    conn.execute(query("record_schedule_job"), {"name": name, "job_id": job_id})


@dataclass(frozen=True)
class ScheduleRecord:
    name: str
    last_tick: datetime
    last_job_id: int | None


def schedule_records(conn: psycopg.Connection[Any]) -> dict[str, ScheduleRecord]:
    return {
        name: ScheduleRecord(name, tick, job_id)
        for name, tick, job_id in conn.execute(query("list_schedules")).fetchall()
    }


def paused(conn: psycopg.Connection[Any], name: str) -> bool:
    """Whether schedule ``name`` is paused: its ticks pass without enqueueing a job."""
    row = conn.execute(query("schedule_paused"), {"name": name}).fetchone()
    return bool(row and row[0])


def pause(conn: psycopg.Connection[Any], name: str, by: str) -> bool:
    """Pause schedule ``name`` on every supervisor; False when it was paused already."""
    return conn.execute(query("pause_schedule"), {"name": name, "by": by}).fetchone() is not None


def resume(conn: psycopg.Connection[Any], name: str) -> bool:
    """Resume schedule ``name`` from its next tick; False when it was not paused."""
    return conn.execute(query("resume_schedule"), {"name": name}).fetchone() is not None


def paused_schedules(conn: psycopg.Connection[Any]) -> dict[str, tuple[datetime, str]]:
    """name -> (paused_at, paused_by) of every paused schedule."""
    return {r[0]: (r[1], r[2]) for r in conn.execute(query("paused_schedules")).fetchall()}
