"""When a child should leave to be replaced: after max_jobs, or above its soft memory limit."""

from __future__ import annotations

import logging
import time

import psutil

from supervisor.child.spec import ChildSpec
from supervisor.shared import memory
from supervisor.shared.exits import ChildExit

log = logging.getLogger("pgq.worker")

MEMORY_CHECK_EVERY = 0.25


class Limits:
    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.jobs_run = 0
        self.last_memory_check = 0.0
        self.process = psutil.Process()
        self.decided: ChildExit | None = None

    def recycle_reason(self) -> ChildExit | None:
        """Whether this child should leave to be replaced; once decided, it stays decided
        (the memory check is rate-limited and would not say it twice)."""
        if self.decided is None:
            self.decided = self._check()
        return self.decided

    def _check(self) -> ChildExit | None:
        spec, pool = self.spec, self.spec.pool
        extra = {"pool": pool.name}
        if spec.max_jobs is not None and self.jobs_run >= spec.max_jobs:
            log.info(
                "%s#%s recycling after %d jobs (max_jobs)",
                pool.name,
                spec.slot,
                self.jobs_run,
                extra=extra,
            )
            return ChildExit.MAX_JOBS_RECYCLE
        limit = pool.memory_limit
        if limit is None:
            return None
        # RSS (a read of /proc/self/statm) is cheap and never below USS, so it screens every
        # job; USS, which walks the page tables, is measured only once RSS is over the limit,
        # and then at most every MEMORY_CHECK_EVERY (RSS also counts pages shared with the
        # master, so it can sit above the limit for good).
        rss = self.process.memory_info().rss
        spec.board.set_memory(rss)
        now = time.monotonic()
        if rss > limit and now - self.last_memory_check >= MEMORY_CHECK_EVERY:
            self.last_memory_check = now
            uss = memory.uss()
            spec.board.set_memory(uss)
            if uss > limit:
                log.warning(
                    "%s#%s recycling: memory %d MiB is above the soft limit of %d MiB",
                    pool.name,
                    spec.slot,
                    uss >> 20,
                    limit >> 20,
                    extra=extra,
                )
                return ChildExit.MEMORY_RECYCLE
        return None
