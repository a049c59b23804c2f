"""Exit codes and exit reasons, named in one place.

The master's codes are the CLI contract (DESIGN.md). A child's code tells the master why it
left, so the master can log it in words and decide whether the slot is crash-looping.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from enum import IntEnum


class MasterExit(IntEnum):
    OK = 0  # clean stop
    ERROR = 1  # anything else
    CONFIG = 2  # bad config or usage
    BOOT_FAILED = 3  # a pool's children could not boot (crash loop)


class ChildExit(IntEnum):
    DRAINED = 0  # told to stop; finished the job in hand, gave back the rest
    BOOT_FAILED = 70  # could not get ready (an error before the first claim)
    MEMORY_RECYCLE = 71  # soft memory limit reached between jobs
    MAX_JOBS_RECYCLE = 72  # ran max_jobs jobs
    ORPHANED = 73  # the master died; gave back what it could
    CRASHED = 74  # an unexpected error in the worker loop itself (not in a handler)


_CHILD_WORDS = {
    ChildExit.DRAINED: "drained and stopped",
    ChildExit.BOOT_FAILED: "failed to boot",
    ChildExit.MEMORY_RECYCLE: "recycled: soft memory limit reached",
    ChildExit.MAX_JOBS_RECYCLE: "recycled: max_jobs reached",
    ChildExit.ORPHANED: "stopped: its master died",
    ChildExit.CRASHED: "crashed in the worker loop",
}


@dataclass(frozen=True)
class ExitReason:
    """A decoded wait status: how a child left, in the operator's words."""

    code: int | None
    signal: int | None

    @classmethod
    def from_status(cls, status: int) -> ExitReason:
        if os.WIFSIGNALED(status):
            return cls(None, os.WTERMSIG(status))
        return cls(os.waitstatus_to_exitcode(status), None)

    @property
    def child_exit(self) -> ChildExit | None:
        try:
            return ChildExit(self.code) if self.code is not None else None
        except ValueError:
            return None

    @property
    def clean(self) -> bool:
        """Left on purpose (drained or recycled): nothing to requeue, no backoff."""
        return self.child_exit in (
            ChildExit.DRAINED,
            ChildExit.MEMORY_RECYCLE,
            ChildExit.MAX_JOBS_RECYCLE,
        )

    @property
    def metric_label(self) -> str:
        if self.signal is not None:
            return f"signal_{signal.Signals(self.signal).name.lower()}"
        known = self.child_exit
        return known.name.lower() if known is not None else "exit_error"

    def describe(self, *, killed_by_master: bool = False) -> str:
        if self.signal is not None:
            name = signal.Signals(self.signal).name
            if self.signal == signal.SIGKILL and not killed_by_master:
                return f"killed by {name} (perhaps out of memory?)"
            if self.signal == signal.SIGSEGV:
                return f"killed by {name} (a crash in native code)"
            return f"killed by {name}"
        known = self.child_exit
        if known is not None:
            return _CHILD_WORDS[known]
        return f"exited with code {self.code}"
