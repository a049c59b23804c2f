"""Maintenance in slices: a run that advances one bounded step per turn of the master's loop.

Some maintenance has no upper bound on its work: ten million dead letters for the purge, a
hundred thousand expired leases for the rescuer after a host with big batches died. Done in
one go, it would hold the loop that renews leases, reaps children and answers signals and
/livez. So such a duty is a *run* that does one step per turn and then gives the loop back;
a step that deletes or moves rows takes a slice sized to last about ``SLICE_SECONDS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from supervisor.services.base import Host, Service

# How long one slice should take; the slice size follows what the last one took. Measured
# (docs/benchmarks.md): on a loaded machine a slice can take five times its aim (a core to wait
# for, a WAL flush), and 10 ms slices made a few turns in a thousand pass 50 ms; 5 ms ones
# almost none, for a purge about a third slower.
SLICE_SECONDS = 0.005
MIN_SLICE = 100
# The first slice of a run, before any has been timed (capped by the duty's own batch).
FIRST_SLICE = 1000
# After a failed step (database down, a timeout), the run waits this long before going on.
STEP_RETRY_AFTER = 5.0

T = TypeVar("T")


class SliceSize:
    """How many rows the next slice takes: scaled so a slice lasts about SLICE_SECONDS, between
    MIN_SLICE and ``most``. It shrinks at once after a slow slice but grows by half at most
    after a fast one: one slice that found everything cached must not make the next one five
    times as long."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.limit = min(most, FIRST_SLICE)
        self.used = self.limit

    def take(self, work: Callable[[int], T | None], rows: Callable[[T], int]) -> T | None:
        """Run ``work`` with the current limit (None: it failed) and learn from its time."""
        self.used = limit = self.limit
        started = time.monotonic()
        result = work(limit)
        took = max(time.monotonic() - started, 1e-4)
        if result is not None and rows(result) >= limit:
            scaled = min(limit * SLICE_SECONDS / took, limit * 1.5)
            self.limit = max(MIN_SLICE, min(self.most, int(scaled)))
        return result

    def full(self, rows: int) -> bool:
        """Whether the last slice came back full: more may be left."""
        return rows >= self.used


class Run(Protocol):
    def step(self) -> float | None:
        """Do one bounded step; the pause before the next one, or None when the run is done."""
        ...


R = TypeVar("R", bound=Run)


class SlicedService(Service, Generic[R]):
    """A periodic duty whose run spans turns. When due and idle, ``start`` begins a run (or
    says not this time: another supervisor has it); while a run is under way the service is
    due again after the pause its last step asked for, and ``finish`` reports a run that
    ended."""

    def __init__(self, host: Host, interval: float, *, first_in: float = 0.0) -> None:
        super().__init__(host, interval, first_in=first_in)
        self.current: R | None = None
        self.pause = 0.0

    @property
    def running(self) -> bool:
        return self.current is not None

    def next_run(self, now: float) -> float:
        if self.current is not None:
            return now + self.pause
        return self.next_start(now)

    def next_start(self, now: float) -> float:
        """When to try to start the next run, once none is under way."""
        return now + self.interval

    def run_once(self) -> int:
        """One slice of the run under way (starting one when due); 1 when a slice ran."""
        if self.current is None:
            self.current = self.start()
            if self.current is None:
                return 0
        try:
            pause = self.current.step()
        except Exception:
            # Not the database (a step returns a pause for that): a bug, which would fail
            # again at every turn. The run is dropped; the next one starts at the next start.
            self.current = None
            raise
        if pause is not None:
            self.pause = pause
            return 1
        run, self.current = self.current, None
        self.finish(run)
        return 1

    def start(self) -> R | None:
        raise NotImplementedError

    def finish(self, run: R) -> None:
        raise NotImplementedError
