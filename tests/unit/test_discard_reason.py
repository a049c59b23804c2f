"""A discarded job's last error still names the error on its last line (the line logs show)."""

from __future__ import annotations

from datetime import datetime, timezone

from supervisor.queue.jobs import Job
from supervisor.queue.outcomes import settlement_for


def _job(attempts: int, max_attempts: int) -> Job:
    now = datetime.now(timezone.utc)
    return Job(1, "q", "k", {}, 0, now, attempts, max_attempts, 7, now, now)


def test_the_last_line_of_a_discard_names_the_error() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        settlement = settlement_for(_job(3, 3), exc)
    assert settlement.state == "discarded"
    last = (settlement.error or "").strip().splitlines()[-1]
    assert last == "RuntimeError: boom (attempt 3 of 3: no attempts left)"
