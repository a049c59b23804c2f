"""The handlers of elastic_bench.py and fair_cost_bench.py (scripts/benchmarks): jobs that
take a set time and some memory, or a set amount of CPU."""

from __future__ import annotations

import time


def nap(seconds: float = 2.0, megabytes: int = 0) -> None:
    """A job of ``seconds`` (waiting, like I/O) holding ``megabytes`` written (USS) meanwhile."""
    held = b"x" * (megabytes << 20)
    time.sleep(seconds)
    del held


def burn(cpu_seconds: float = 0.02) -> None:
    """A job that costs ``cpu_seconds`` of CPU, however long a busy machine makes it take."""
    end = time.process_time() + cpu_seconds
    while time.process_time() < end:
        sum(range(1000))
