"""What job.progress() and the cost meter cost per call, in-process (issue 34).

    python scripts/benchmarks/progress_cost.py [--calls 200000]

- progress: a handler's job.progress(fraction, message) between two writes (coalesced: only
  the value is recorded), against a bare Python function call, side by side in one run.
- meter: the per-attempt cost measurement around a handler (inline: getrusage and the peak-RSS
  mark, here and in a forked child as the workers are; threaded: the thread's CPU clock),
  against the same bare call.

No database is involved: a write happens at most once a second per job and is the same round
trip as lease_held(). The last line on stdout is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from supervisor.queue.context import JobContext  # noqa: E402
from supervisor.queue.costs import Meter  # noqa: E402
from supervisor.queue.progress import Reporter  # noqa: E402


def per_call(fn, calls: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(5):  # the best of five: the machine is shared
        started = time.perf_counter()
        for i in range(calls):
            fn(i)
        best = min(best, (time.perf_counter() - started) / calls)
    return best * 1e9


def in_forked_child(measure) -> float:  # type: ignore[no-untyped-def]
    """``measure()`` run in a child forked from here, as the supervisor's workers are: there
    the inline meter reads the attempt's peak from getrusage (supervisor/queue/costs.py),
    where this process, started by exec, reads /proc/self/status."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, repr(measure()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        value = float(pipe.read())
    os.waitpid(pid, 0)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args(argv)
    writes: list[object] = []
    reporter = Reporter(1, 1, writes.append)
    job = JobContext(
        id=1,
        kind="export",
        queue="q",
        attempt=1,
        max_attempts=3,
        lease_id=1,
        worker="w",
        created_at=datetime.now(timezone.utc),
        _report_progress=reporter.report,
    )
    n = args.calls

    def bare(i: int) -> None:
        pass

    def report(i: int) -> None:
        job.progress(i / n, "page")

    inline, threaded = Meter(shared=False), Meter(shared=True)

    def meter_inline(i: int) -> None:
        inline.start()
        inline.stop()

    def meter_threaded(i: int) -> None:
        threaded.start()
        threaded.stop()

    figures = {
        "bare_call_ns": per_call(bare, n),
        "progress_call_ns": per_call(report, n),
        "meter_inline_ns": per_call(meter_inline, n // 10),
        "meter_inline_forked_ns": in_forked_child(lambda: per_call(meter_inline, n // 10)),
        "meter_threaded_ns": per_call(meter_threaded, n // 10),
    }
    figures["progress_vs_bare"] = figures["progress_call_ns"] / figures["bare_call_ns"]
    figures["database_writes"] = len(writes)
    for name, value in figures.items():
        print(f"{name:>20}: {value:,.1f}", file=sys.stderr)
    print(json.dumps({k: round(v, 2) for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
