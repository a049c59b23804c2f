"""Periodic schedules as `status` and the dashboard show them: each schedule's rule, its last
run (recorded in the database) and its next tick."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from supervisor.config import Config, ScheduleConfig
from supervisor.config.ticks import next_ticks
from supervisor.config.units import format_duration
from supervisor.queue import scheduled
from supervisor.views.text import clock_time, iso, table


def rule(schedule: ScheduleConfig) -> str:
    if schedule.every is not None:
        return f"every {format_duration(schedule.every)}"
    return f"cron {schedule.cron} ({schedule.timezone})"


def describe(s: ScheduleConfig) -> dict[str, Any]:
    return {
        "name": s.name,
        "kind": s.kind,
        "queue": s.queue,
        "priority": s.priority,
        "cron": s.cron,
        "every_seconds": s.every,
        "timezone": s.timezone if s.cron is not None else None,
        "missed": s.missed,
    }


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule in `status`: what the file says, and what the database recorded."""

    schedule: ScheduleConfig
    last_tick: datetime | None
    last_job_id: int | None
    next_tick: datetime


def gather(conn: psycopg.Connection[Any], config: Config, now: datetime) -> list[ScheduleRow]:
    if not config.schedules:
        return []
    return rows(config, scheduled.schedule_records(conn), now)


def rows(
    config: Config, records: dict[str, scheduled.ScheduleRecord], now: datetime
) -> list[ScheduleRow]:
    """Each schedule of the file with its recorded last run and its next tick (the web
    dashboard reads the records on its own async connections)."""
    found = []
    for name, s in config.schedules.items():
        record = records.get(name)
        found.append(
            ScheduleRow(
                s,
                record.last_tick if record else None,
                record.last_job_id if record else None,
                next_ticks(s, now, 1)[0],
            )
        )
    return found


def to_json(rows: list[ScheduleRow]) -> list[dict[str, Any]]:
    return [
        {
            **describe(r.schedule),
            "last_tick": iso(r.last_tick),
            "last_job_id": r.last_job_id,
            "next_tick": iso(r.next_tick),
        }
        for r in rows
    ]


def lines(rows: list[ScheduleRow]) -> list[str]:
    if not rows:
        return []
    headers = ["SCHEDULE", "KIND", "QUEUE", "RULE", "LAST TICK", "LAST JOB", "NEXT TICK"]
    body = [
        [
            r.schedule.name,
            r.schedule.kind,
            r.schedule.queue,
            rule(r.schedule),
            clock_time(r.last_tick),
            r.last_job_id if r.last_job_id is not None else "-",
            clock_time(r.next_tick),
        ]
        for r in rows
    ]
    return ["", "SCHEDULES", *table(headers, body, right=(5,))]
