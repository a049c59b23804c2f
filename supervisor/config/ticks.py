"""When a periodic schedule fires: its ticks, from a cron expression or a fixed interval.

Pure functions of the schedule and a time, so every supervisor computes the same ticks (they
are the identity of a schedule's jobs across hosts). Interval ticks fall on whole multiples of
the interval since the Unix epoch.

Cron runs in the schedule's time zone. cronsim matches the expression against local wall-clock
times (naive, so it never guesses about daylight saving); this module turns each matching wall
time into instants, and every question (the next ticks, the latest tick, what was missed) is
answered by that one forward iteration. Its rules for daylight-saving changes:

- A wall time that does not exist (the hour skipped in spring) ticks once, at the first instant
  after the gap: ``*/20 2 * * *`` on the spring night in Berlin runs once, at 03:00.
- A wall time that happens twice (the hour repeated in autumn) ticks once, at its first pass,
  when the expression names its hours (``*/20 2 * * *``, ``30 1 * * *``); an expression whose
  hour field is ``*`` or ``*/N`` follows the clock and ticks in both passes (``0,30 * * * *``
  runs four times in the repeated hour's two passes, like every other hour of real time).

These are Vixie cron's rules, with its "wildcard" decided by the hour field alone.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from itertools import islice
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from supervisor.config.model import ScheduleConfig

__all__ = ["cron_problem", "latest_tick", "next_tick", "next_ticks", "ticks_after"]

UTC = timezone.utc
# Daylight-saving folds are an hour (two, for the double summer time of old): wall times this
# far before ``after``'s own may still have a second pass after it.
FOLD_REACH = timedelta(hours=3)
# How far back latest_tick looks for the previous tick, widening until it finds one (a cron
# expression may fire once in years: 29 February on a Monday).
LOOK_BACK = (
    timedelta(minutes=2),
    timedelta(hours=2),
    timedelta(days=1, hours=2),
    timedelta(days=32),
    timedelta(days=367),
    timedelta(days=4 * 366),
    timedelta(days=29 * 366),
)


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
            yield datetime.fromtimestamp(n * step, UTC)
            n += 1
    assert schedule.cron is not None
    after = after.astimezone(UTC)
    last = after
    for tick in _cron_instants(schedule.cron, ZoneInfo(schedule.timezone), after):
        if tick > last:
            last = tick
            yield tick


def next_tick(schedule: ScheduleConfig, after: datetime) -> datetime:
    return next(ticks_after(schedule, after))


def next_ticks(schedule: ScheduleConfig, after: datetime, count: int) -> list[datetime]:
    return list(islice(ticks_after(schedule, after), count))


def latest_tick(schedule: ScheduleConfig, at: datetime) -> datetime:
    """The schedule's last tick at or before ``at``: the forward iteration's, from a little
    earlier (never a backward walk, which cannot agree with it across a daylight-saving
    change)."""
    if schedule.every is not None:
        step = schedule.every
        return datetime.fromtimestamp(math.floor(at.timestamp() / step) * step, UTC)
    at = at.astimezone(UTC)
    for back in LOOK_BACK:
        found = None
        for tick in ticks_after(schedule, at - back):
            if tick > at:
                break
            found = tick
        if found is not None:
            return found
    raise ValueError(f"cron {schedule.cron!r} has no tick in the {LOOK_BACK[-1].days} days")


def _cron_instants(expression: str, zone: ZoneInfo, after: datetime) -> Iterator[datetime]:
    """Instants of the expression's matching wall times, in order (possibly repeated, and
    possibly some at or before ``after``: the caller filters)."""
    by_clock = expression.split()[1].startswith("*")
    # The wall clock's earliest reading from here on: lower than ``after``'s own when a fold
    # is near (the clock goes back), whose wall times then have a pass after ``after``.
    offset = min(_offset(zone, after + d) for d in (timedelta(0), FOLD_REACH))
    start = after.replace(tzinfo=None) + offset - timedelta(minutes=1)
    # Second passes of a fold come later than first passes of the wall times after them: they
    # wait in a heap until the forward stream reaches them.
    later: list[datetime] = []
    for wall in CronSim(expression, start):
        first, second = _instants(wall, zone)
        while later and later[0] <= first:
            yield heapq.heappop(later)
        yield first
        if second is not None and by_clock:
            heapq.heappush(later, second)


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta:
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return offset


def _instants(wall: datetime, zone: ZoneInfo) -> tuple[datetime, datetime | None]:
    """The instant(s) a local wall time names: one; two in a fold (first pass, second pass);
    for a time inside a gap, the first instant after the gap."""
    early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if early == late:
        return early, None
    if early.astimezone(zone).replace(tzinfo=None) == wall:
        return early, late  # a fold: the offset before the change puts it earlier
    # A gap: fold=1 reads it with the offset after the change (an instant before the change),
    # fold=0 with the offset before it (after the change). The change lies between.
    lo, hi = min(early, late), max(early, late)
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        mid = mid.replace(microsecond=0)
        if _offset(zone, mid) == _offset(zone, hi):
            hi = mid
        else:
            lo = mid
    return hi, None
