"""When a periodic schedule fires: its ticks, from a cron expression or a fixed interval.

Pure functions of the schedule and a time, so every supervisor computes the same ticks (they
are the identity of a schedule's jobs across hosts). Cron runs in the schedule's time zone with
cronsim, which treats daylight-saving changes as cron does: a tick in the hour that does not
exist runs at the first minute after it, and a tick in the hour that happens twice runs once.
Interval ticks fall on whole multiples of the interval since the Unix epoch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from itertools import islice
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from supervisor.config.model import ScheduleConfig

__all__ = ["cron_problem", "latest_tick", "next_tick", "next_ticks", "ticks_after"]


def cron_problem(expression: str) -> str | None:
    """Why ``expression`` is not a five-field cron expression, or None when it is one."""
    fields = expression.split()
    if len(fields) != 5:
        return f"must have five fields (minute hour day month weekday), not {len(fields)}"
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=timezone.utc))
    except CronSimError as exc:
        return f"is not a valid cron expression: {exc}"
    return None


def ticks_after(schedule: ScheduleConfig, after: datetime) -> Iterator[datetime]:
    """The schedule's ticks strictly after ``after``, in order, as UTC datetimes."""
    if schedule.every is not None:
        step = schedule.every
        n = math.floor(after.timestamp() / step) + 1
        while True:
            yield datetime.fromtimestamp(n * step, timezone.utc)
            n += 1
    assert schedule.cron is not None
    local = after.astimezone(ZoneInfo(schedule.timezone))
    for tick in CronSim(schedule.cron, local):
        yield tick.astimezone(timezone.utc)


def next_tick(schedule: ScheduleConfig, after: datetime) -> datetime:
    return next(ticks_after(schedule, after))


def next_ticks(schedule: ScheduleConfig, after: datetime, count: int) -> list[datetime]:
    return list(islice(ticks_after(schedule, after), count))


def latest_tick(schedule: ScheduleConfig, at: datetime) -> datetime:
    """The schedule's last tick at or before ``at``."""
    if schedule.every is not None:
        step = schedule.every
        return datetime.fromtimestamp(math.floor(at.timestamp() / step) * step, timezone.utc)
    assert schedule.cron is not None
    # cronsim's reverse iteration is strictly before its start, and cron ticks fall on whole
    # minutes: starting one second past ``at`` (truncated to the second) includes ``at``.
    start = at.astimezone(ZoneInfo(schedule.timezone)).replace(microsecond=0)
    start += timedelta(seconds=1)
    return next(CronSim(schedule.cron, start, reverse=True)).astimezone(timezone.utc)
