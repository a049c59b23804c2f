"""last_error keeps what matters most: the end of a traceback, and the attempts note on it."""

from __future__ import annotations

from datetime import datetime, timezone

from supervisor.queue.jobs import Job
from supervisor.queue.outcomes import MAX_ERROR_CHARS, describe_exception, failure


def _job(attempts: int) -> Job:
    now = datetime.now(timezone.utc)
    return Job(1, "q", "k", {}, 0, now, attempts, 5, 1, now, now)


def _long_traceback() -> str:
    try:
        raise ValueError("detail " * 1500 + "THE END")
    except ValueError as exc:
        return describe_exception(exc)


def test_a_long_traceback_keeps_its_last_line_whole() -> None:
    text = _long_traceback()
    assert len(text) <= MAX_ERROR_CHARS
    assert text.startswith("Traceback") and text.endswith("THE END\n")
    retried = failure(_job(1), text).error
    assert retried is not None and retried.endswith("THE END\n")


def test_the_last_attempt_note_goes_on_the_exception_line_and_survives_clipping() -> None:
    final = failure(_job(5), _long_traceback()).error
    assert final is not None and len(final) <= MAX_ERROR_CHARS
    assert final.splitlines()[-1].endswith("THE END (attempt 5 of 5: no attempts left)")
    short = failure(_job(5), "Traceback\nKeyError: 'x'\n").error
    assert short == "Traceback\nKeyError: 'x' (attempt 5 of 5: no attempts left)"
