"""The partition drill's job: sleeps without touching the database (its outcome is the only
write, and it is fenced), and a /livez (and /readyz) prober to run inside the cut-off host's
namespace.

    python scripts/drills/partition_drill_jobs.py probe URL SECONDS
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from typing import Any


def hold(seconds: float = 4.0, **_: Any) -> None:
    time.sleep(seconds)


def probe(url: str, seconds: float) -> None:
    """One line per look: the monotonic time, and the status (or the error)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                answer = str(response.status)
        except urllib.error.HTTPError as exc:  # answered, not ready: say if it blames the db
            unreachable = b"database unreachable" in exc.read()
            answer = f"{exc.code}{':database-unreachable' if unreachable else ''}"
        except Exception as exc:  # any failure is a finding, printed as such
            answer = type(exc).__name__
        print(f"{started:.3f} {time.monotonic() - started:.3f} {answer}", flush=True)
        time.sleep(0.25)


if __name__ == "__main__" and sys.argv[1:2] == ["probe"]:
    probe(sys.argv[2], float(sys.argv[3]))
