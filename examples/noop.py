"""Trivial handlers for benchmarks: the cost of the queue itself, without work."""

from __future__ import annotations

import math
import time

from supervisor.queue.outcomes import Discard


def noop(**_: object) -> None:
    """Do nothing, whatever the arguments."""


def sleep(seconds: float) -> None:
    """Wait ``seconds``, like a handler blocked on I/O."""
    if (
        not isinstance(seconds, int | float)
        or isinstance(seconds, bool)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise Discard(f"seconds must be a finite number of zero or more, got {seconds!r}")
    time.sleep(seconds)
