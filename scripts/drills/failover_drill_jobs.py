"""The failover drill's handlers: each run appends one line to a ledger file outside the
database (the database is what fails over), so that what ran, and how often, is known whatever
the database kept.

A line: ``KIND SEQ ENQUEUED_AT RAN_AT PID``.
"""

from __future__ import annotations

import os
import time
from typing import Any

LEDGER = os.environ.get("PGQ_DRILL_LEDGER", "/tmp/pgq-failover-ledger")


def _append(kind: str, seq: int, at: float) -> None:
    line = f"{kind} {seq} {at:.6f} {time.time():.6f} {os.getpid()}\n".encode()
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def work(seq: int, at: float, **_: Any) -> None:
    _append("work", seq, at)


def tick(**_: Any) -> None:
    _append("tick", 0, time.time())
