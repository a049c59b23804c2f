"""The inline cost meter (supervisor/queue/costs.py): in a forked child the attempt's peak comes
from the getrusage that reads its CPU, and it is the same peak /proc/self/status shows; in a
process started by exec (whose ru_maxrss may hold the peak of the image before the exec) it is
read from /proc/self/status. Each attempt's peak is its own, not an earlier attempt's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.queue import costs

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/clear_refs").exists(), reason="needs Linux's resettable peak RSS"
)

ROOT = Path(__file__).resolve().parents[2]


def status_peak() -> int:
    text = Path("/proc/self/status").read_text()
    line = next(x for x in text.splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def attempts() -> dict[str, object]:
    """Three attempts measured here: a small one, one that writes 64 MiB, a small one again."""
    meter = costs.Meter(shared=False)
    found: dict[str, object] = {"in_rusage": None}
    for name, megabytes in (("before", 0), ("hog", 64), ("after", 0)):
        meter.start()
        block = bytearray(megabytes << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        cost = meter.stop()
        # What the status file says right after, in this same attempt (nothing reset since).
        found[name] = (cost.peak_memory, status_peak(), cost.cpu_seconds)
        del block
    found["in_rusage"] = costs._MARK.in_rusage
    return found


def in_forked_child() -> dict[str, object]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            os.write(write, json.dumps(attempts()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


def check(found: dict[str, object]) -> None:
    for name in ("before", "hog", "after"):
        peak, status, cpu = found[name]  # type: ignore[misc]
        assert peak is not None and cpu >= 0
        # The status file was read a moment later (reading it allocates); the two counters may
        # also differ by a few pages either way (seen: getrusage 40 KiB above VmHWM in CI).
        assert peak - (1 << 20) <= status <= peak + (4 << 20), (name, peak, status)
    assert found["hog"][0] >= found["before"][0] + (64 << 20)  # type: ignore[index]
    assert found["after"][0] < found["hog"][0] - (32 << 20)  # type: ignore[index]


def test_a_forked_child_reads_the_peak_from_getrusage() -> None:
    found = in_forked_child()
    assert found["in_rusage"] is True
    check(found)


def test_a_process_started_by_exec_after_a_large_peak_reads_the_status_file() -> None:
    # The exec'd image inherits the 200 MiB peak of the one before it in ru_maxrss.
    script = (
        "import json, os, sys\n"
        "block = bytearray(200 << 20)\n"
        "for i in range(0, len(block), 4096): block[i] = 1\n"
        "os.execv(sys.executable, [sys.executable, '-c', "
        "'import json; from tests.unit.test_cost_meter import attempts; "
        "print(json.dumps(attempts()))'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout)
    assert found["in_rusage"] is False
    check(found)
    assert found["before"][0] < 150 << 20  # not the earlier image's peak
