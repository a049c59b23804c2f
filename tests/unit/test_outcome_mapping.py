"""One outcome mapping: what the workers' executor records for an attempt is what
``supervisor.testing.run_inline`` says it would, for every way a handler can end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from supervisor import Discard, JobContext, Retry, Snooze
from supervisor.config import parse_config
from supervisor.testing import _STATUS, run_inline
from tests.executors import claimed_job, one_kind_executor

YAML = """
handlers: {k: tests.handlers:noop}
pools: {main: {processes: 1, queues: {default: 1}}}
jobs: {k: {max_attempts: 3}}
"""


def returns(*, job: JobContext) -> None:
    pass


def raises(*, job: JobContext) -> None:
    raise ValueError("boom")


def retries(*, job: JobContext) -> None:
    raise Retry(5, "later")


def discards(*, job: JobContext) -> None:
    raise Discard("no")


def snoozes(*, job: JobContext) -> None:
    raise Snooze(30)


def sees_cancel_then_raises(*, job: JobContext) -> None:
    if job.cancelled():
        raise RuntimeError("stopping: cancelled")


def sees_cancel_then_returns(*, job: JobContext) -> None:
    if job.cancelled():
        return


def sees_lease_lost_then_returns(*, job: JobContext) -> None:
    if not job.lease_held():
        return


CASES: list[tuple[Callable[..., Any], int, bool, bool, str]] = [
    # handler, attempt (of 3), lease held, cancelled, what both must say
    (returns, 1, True, False, "completed"),
    (raises, 1, True, False, "retry"),
    (raises, 3, True, False, "discard"),
    (retries, 1, True, False, "retry"),
    (retries, 3, True, False, "discard"),
    (discards, 1, True, False, "discard"),
    (snoozes, 3, True, False, "snooze"),
    (sees_cancel_then_raises, 3, True, True, "cancelled"),
    (sees_cancel_then_raises, 1, True, True, "cancelled"),
    (sees_cancel_then_returns, 3, True, True, "cancelled"),
    (sees_lease_lost_then_returns, 1, False, False, "lost"),
    (sees_lease_lost_then_returns, 3, False, False, "lost"),
]


def _executor_says(func: Callable[..., Any], attempt: int, lease: bool, cancel: bool) -> str:
    config = parse_config(YAML, source="queues.yaml")
    executor = one_kind_executor(config, func, wants_context=True, lease=lease, cancel=cancel)
    settlement = executor.run(claimed_job(attempt, max_attempts=3))
    return "completed" if settlement is None else _STATUS[settlement.label]


@pytest.mark.parametrize(("func", "attempt", "lease", "cancel", "expected"), CASES)
def test_the_executor_and_run_inline_map_an_attempt_alike(
    func: Callable[..., Any], attempt: int, lease: bool, cancel: bool, expected: str
) -> None:
    inline = run_inline(
        func, kind="k", attempt=attempt, max_attempts=3, lease_held=lease, cancelled=cancel
    )
    assert (_executor_says(func, attempt, lease, cancel), inline.status) == (expected, expected)


def takes_seconds(seconds: float, *, job: JobContext) -> None:
    pass


def test_arguments_that_do_not_fit_are_discarded_by_both_alike() -> None:
    config = parse_config(YAML, source="queues.yaml")
    executor = one_kind_executor(config, takes_seconds, wants_context=True)
    job = claimed_job()
    job.args["secs"] = 1
    settlement = executor.run(job)
    assert settlement is not None and settlement.label == "discarded"
    assert "unexpected argument 'secs'" in (settlement.error or "")
    inline = run_inline(takes_seconds, {"secs": 1})
    assert inline.status == "discard" and "unexpected argument 'secs'" in (inline.error or "")
