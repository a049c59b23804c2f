"""Time the embedded PostgreSQL server: initdb, start, stop, restart, and recovery after kill -9.

    python scripts/benchmarks/embedded_timings.py [--runs 3]

Each run uses a fresh data directory under a temporary folder, once durable (what the
supervisor uses) and once not (what the tests use). Prints the median of each step in seconds.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from supervisor.embedded.server import EmbeddedPostgres


def timed(figures: dict[str, list[float]], step: str, action: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = action()
    figures[step].append(time.perf_counter() - started)
    return result


def one_run(durable: bool, figures: dict[str, list[float]]) -> None:
    with tempfile.TemporaryDirectory(prefix="pgq-timing-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "data", durable=durable)
        dsn = timed(figures, "first start (initdb + start)", pg.start)
        timed(figures, "connect + query", lambda: psycopg.connect(dsn).close())
        timed(figures, "stop (fast)", pg.stop)
        timed(figures, "start (initialised)", pg.start)
        timed(figures, "restart", pg.restart)
        pg.kill()
        timed(figures, "start after kill -9", pg.start)
        pg.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    logging.getLogger("pgq.embedded").setLevel(logging.ERROR)  # o+x notes and kill warnings
    for durable in (True, False):
        figures: dict[str, list[float]] = defaultdict(list)
        for _ in range(runs):
            one_run(durable, figures)
        print(f"durable={durable} (median of {runs} runs)")
        for step, values in figures.items():
            print(f"  {step:30s} {statistics.median(values):6.3f}s   max {max(values):.3f}s")


if __name__ == "__main__":
    main()
