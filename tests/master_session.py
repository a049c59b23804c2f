"""A master's database session for the tests that drive the master's services directly."""

from __future__ import annotations

import time

from supervisor.services.vacuum import QueueVacuum
from supervisor.sessions.database import MasterDatabase


def connected(db: MasterDatabase, timeout: float = 15.0) -> MasterDatabase:
    """``db`` with its session open. The master's connect advances a moment per call (its loop
    never waits on the network), so on a loaded machine the first call of a test, expected to
    run a statement, could find the connect still under way and return None."""
    deadline = time.monotonic() + timeout
    while db.connection() is None:
        assert time.monotonic() < deadline, f"the master's session never connected ({db.name})"
        time.sleep(0.01)
    return db


def vacuum_started(vacuum: QueueVacuum, timeout: float) -> None:
    """Check ``vacuum`` until its vacuum runs: its own session's connect advances a moment per
    check, as the master's does."""
    deadline = time.monotonic() + timeout
    while vacuum.pending is None:
        assert time.monotonic() < deadline, "the vacuum never started"
        vacuum.run_once()
        time.sleep(0.02)
