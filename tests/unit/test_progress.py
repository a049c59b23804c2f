"""job.progress() coalesced in the child (supervisor.queue.progress.Reporter): pure logic."""

from __future__ import annotations

import pytest

from supervisor.queue.progress import Reporter


def test_progress_is_coalesced_before_it_reaches_the_database():
    now = [0.0]
    asked: list[object] = []
    reporter = Reporter(7, 1, asked.append, every=1.0, clock=lambda: now[0])
    for i in range(1000):  # 1000 calls over 2.5 s
        now[0] = i * 0.0025
        reporter.report(i / 1000, f"row {i}")
    assert len(asked) == 3  # at 0 s, 1 s and 2 s
    reporter.finish()  # the last value, once more
    assert len(asked) == 4
    reporter.finish()
    assert len(asked) == 4
    with pytest.raises(ValueError, match="job 7: progress must be from 0 to 1"):
        reporter.report(1.5)
    with pytest.raises(TypeError, match="job 7"):
        reporter.report("half")
