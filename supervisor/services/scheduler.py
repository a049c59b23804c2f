"""Periodic schedules (`schedules:` in the YAML): one job per tick, across every supervisor.

At each tick the master enqueues the schedule's job in one transaction with a row that moves
the schedule's last tick forward (pgq.schedules). Only one transaction can move it past a given
tick, so among any number of supervisors, and across restarts, a tick is enqueued once; the
job also carries the unique key ``schedule:NAME:TICK``. Ticks are read on the database's
clock, the one every host shares: a host whose own clock runs ahead takes no tick early (it
would move the schedule's last tick past ticks the others then never enqueue).

A tick first looked at more than a grace period after its time (no supervisor ran then) was
missed: ``missed: skip`` records it and enqueues nothing, ``missed: run_once`` enqueues one job
for the latest tick however many were missed. Lateness is counted from this master's first try
at the tick, so a tick it tried on time but could not take (another supervisor held the
schedule's row, then froze or died) is late, not missed, and runs. So is a tick this master was
waiting for when its own loop was held up past it (a starved CPU, a slow statement): having
dealt with the tick before, it was due to look at this one on time, so the ticks it slept
through run, oldest first, as long as they are within the grace period. A schedule seen for the
first time starts at its next tick.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import psycopg.errors

from supervisor.config import ScheduleConfig
from supervisor.config.ticks import latest_tick, next_tick
from supervisor.queue import scheduled
from supervisor.queue.enqueue import enqueue
from supervisor.queue.queries import query
from supervisor.services.base import Host, Service

log = logging.getLogger("pgq.master")

# A tick seen later than this (or than one period, when shorter) counts as missed.
GRACE = 60.0
# Look at the clock at least this often (a clock that jumps; a database that was down).
LOOK_EVERY = 30.0
# How soon to try again a tick that could not be dealt with.
RETRY = 1.0
# At most this many ticks a held-up loop slept through are caught up at one look (a schedule of
# every second, a loop held up for most of the grace period).
MAX_SLEPT_THROUGH = 60


def unique_key(name: str, tick: datetime) -> str:
    return f"schedule:{name}:{tick.isoformat()}"


class Scheduler(Service):
    name = "scheduler"

    def __init__(self, host: Host) -> None:
        super().__init__(host, LOOK_EVERY)
        self.unsettled = False
        # The latest tick this master has dealt with, per schedule (enqueued here or elsewhere).
        self.done: dict[str, datetime] = {}
        # Per schedule, the tick this master is trying to deal with and when (database clock)
        # it first tried: the time its lateness is counted from.
        self.first_tried: dict[str, tuple[datetime, datetime]] = {}
        # How far the database's clock is ahead of this host's, in seconds (measured at every
        # look), so that the wait for the next tick is counted on the database's clock too.
        self.offset = 0.0

    def next_run(self, now: float) -> float:
        wall = datetime.now(timezone.utc) + timedelta(seconds=self.offset)
        schedules = self.host.config.schedules.values()
        wait = min(
            ((next_tick(s, wall) - wall).total_seconds() for s in schedules),
            default=self.interval,
        )
        if self.unsettled:  # a tick not dealt with (database down, row locked): soon again
            wait = min(wait, RETRY)
        return time.monotonic() + min(max(wait, 0.0), self.interval)

    def run_once(self) -> int:
        if not self.host.config.schedules:
            return 0
        now = self.host.db.run("schedules (the database's clock)", self._database_now)
        if now is None:
            self.unsettled = True
            return 0
        return self.run_at(now)

    def _database_now(self, conn: psycopg.Connection[Any]) -> datetime:
        before = datetime.now(timezone.utc)
        now = scheduled.database_now(conn)
        after = datetime.now(timezone.utc)
        self.offset = (now - before - (after - before) / 2).total_seconds()
        return now

    def run_at(self, now: datetime) -> int:
        """Enqueue what the schedules owe at ``now`` (the database's clock); how many ticks it
        dealt with."""
        self.unsettled = False
        dealt = 0
        for schedule in self.host.config.schedules.values():
            tick = latest_tick(schedule, now)
            if self.done.get(schedule.name) == tick:
                continue
            tried = self.first_tried.get(schedule.name)
            if tried is None or tried[0] != tick:
                tried = self.first_tried[schedule.name] = (tick, now)
            # The ticks slept through count as tried on time: this master was due at each.
            owed = [(t, t) for t in self._slept_through(schedule, tick, now)]
            for owed_tick, tried_at in [*owed, (tick, tried[1])]:
                deal = self._tick(schedule, owed_tick, tried_at)
                if not self.host.db.run(f"schedule {schedule.name}", deal):
                    self.unsettled = True
                    break
                self.done[schedule.name] = owed_tick
                dealt += 1
        return dealt

    def _slept_through(
        self, schedule: ScheduleConfig, tick: datetime, now: datetime
    ) -> list[datetime]:
        """The ticks between the last one this master dealt with and ``tick``, within the grace
        period: none when it never dealt with one (it just started, and cannot tell a tick it
        slept through from one missed while no supervisor ran)."""
        last = self.done.get(schedule.name)
        if last is None:
            return []
        owed: list[datetime] = []
        at = next_tick(schedule, max(last, now - timedelta(seconds=GRACE)))
        while at < tick and len(owed) < MAX_SLEPT_THROUGH:
            owed.append(at)
            at = next_tick(schedule, at)
        return owed

    def _tick(
        self, schedule: ScheduleConfig, tick: datetime, tried: datetime
    ) -> Callable[[psycopg.Connection[Any]], bool]:
        """The transaction that deals with ``tick``, first tried at ``tried``."""

        def deal(conn: psycopg.Connection[Any]) -> bool:
            try:
                return enqueue_tick(conn)
            except psycopg.errors.LockNotAvailable:
                # Another supervisor is enqueueing this tick and has not committed (it may be
                # frozen): the master's loop must not wait on it. Looked at again shortly.
                log.info("schedule %s: another supervisor holds its row; later", schedule.name)
                return False

        def enqueue_tick(conn: psycopg.Connection[Any]) -> bool:
            with conn.transaction():
                conn.execute(query("schedule_lock_timeout"))
                last = scheduled.last_tick(conn, schedule.name)
                if last is not None and last >= tick:
                    return True  # enqueued by another supervisor, or by this one before
                if not scheduled.claim_tick(conn, schedule.name, tick):
                    return True  # another supervisor took this tick a moment ago
                if last is None:
                    # Name the tick its first job is for, not the one just recorded (before it).
                    log.info(
                        "schedule %s: first seen at its tick %s; its first job is for %s",
                        schedule.name,
                        tick.isoformat(),
                        next_tick(schedule, tick).isoformat(),
                    )
                    return True
                if not should_run(schedule, last, tick, tried):
                    return True
                if scheduled.paused(conn, schedule.name):
                    # The tick passes (resuming does not make up for the ticks paused).
                    log.info(
                        "schedule %s is paused: its tick %s passes without a job",
                        schedule.name,
                        tick.isoformat(),
                    )
                    return True
                job_id = enqueue(
                    conn,
                    schedule.kind,
                    dict(schedule.args),
                    queue=schedule.queue,
                    priority=schedule.priority,
                    run_at=tick,
                    unique_key=unique_key(schedule.name, tick),
                )
                scheduled.record_job(conn, schedule.name, job_id)
            self.host.counters.schedule_jobs += 1
            self.host.wake_queue(schedule.queue)
            log.info(
                "schedule %s: enqueued %s job %s on queue %s for the tick at %s",
                schedule.name,
                schedule.kind,
                job_id,
                schedule.queue,
                tick.isoformat(),
                extra={"job_id": job_id, "kind": schedule.kind, "queue": schedule.queue},
            )
            return True

        return deal


def should_run(schedule: ScheduleConfig, last: datetime, tick: datetime, now: datetime) -> bool:
    """Whether the job for ``tick`` runs at ``now``, given the schedule's previous tick ``last``.

    The latest tick runs when it is on time, even if earlier ones were missed; a late one runs
    only with ``missed: run_once``.
    """
    period = (next_tick(schedule, tick) - tick).total_seconds()
    late = (now - tick).total_seconds() > min(GRACE, period)
    missed = next_tick(schedule, last) < tick
    if not (late or missed):
        return True
    runs = schedule.missed == "run_once" or not late
    log.warning(
        "schedule %s: ticks missed while no supervisor ran (previous tick enqueued %s, "
        "latest %s); missed: %s, so %s",
        schedule.name,
        last.isoformat(),
        tick.isoformat(),
        schedule.missed,
        "a job runs for the latest tick" if runs else "no job runs for them",
    )
    return runs
