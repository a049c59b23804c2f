"""An executor for one kind ("k") in a test's own process, and a claimed job of that kind:
the workers' real code for running a job, without a fork or a database."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from supervisor.child.executor import Executor
from supervisor.config import Config
from supervisor.config.handlers import Handler
from supervisor.queue.jobs import Job
from supervisor.shared.board import Board


def one_kind_executor(
    config: Config,
    func: Callable[..., Any],
    *,
    wants_context: bool,
    lease: bool = True,
    cancel: bool = False,
) -> Executor:
    """``lease`` and ``cancel``: what the handler's lease_held() and cancelled() answer."""
    return Executor(
        config=config,
        pool="main",
        worker_id="w",
        handlers={"k": Handler("k", "tests:k", func, wants_context)},
        kinds=["k"],
        board=Board(1),
        lease_check=lambda job: lease,
        cancel_check=lambda job: cancel,
        interruptible_thread=0,
    )


def claimed_job(attempt: int = 1, max_attempts: int = 3) -> Job:
    now = datetime.now(timezone.utc)
    return Job(1, "default", "k", {}, 0, now, attempt, max_attempts, 1, now, now)
