"""Handlers of the order-key lifecycle test: each attempt writes its start and its end to the
ledger (tests/handlers), so the test can check that a key's attempts never overlap."""

from __future__ import annotations

import time
from typing import Any

from supervisor import JobContext
from tests.handlers import _record


def hook(seconds: float = 0.0, fail_once: bool = False, *, job: JobContext, **_: Any) -> None:
    """Fails its first attempt when asked (a retry, which must hold its key's followers)."""
    _record(job, "started")
    time.sleep(seconds)
    if fail_once and job.attempt == 1:
        _record(job, "failed")
        raise RuntimeError("fails once, on purpose")
    _record(job, "finished")
