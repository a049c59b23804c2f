"""Timeouts: a job past its kind's timeout gets its child stopped."""

from __future__ import annotations

import time

from supervisor.services.base import Service


class TimeoutWatch(Service):
    """A job past its kind's timeout gets its child's process group stopped (TERM, then KILL
    after a grace period); the job is then retried."""

    name = "timeout watch"

    def run_once(self) -> int:
        killed = 0
        now = time.monotonic()
        kinds = self.host.kinds
        for child in self.host.live_children():
            if child.kill_reason:
                continue
            for job in child.board.running_jobs():
                if job.deadline is not None and now >= job.deadline:
                    kind = kinds[job.kind_index] if 0 <= job.kind_index < len(kinds) else "?"
                    self.host.counters.timeouts += 1
                    self.host.kill_child(
                        child,
                        f"job {job.job_id} ({kind}) exceeded its timeout of "
                        f"{job.deadline - job.started:g}s",
                    )
                    killed += 1
                    break
        return killed
