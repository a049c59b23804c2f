"""The hard memory limit: a child above it is killed, whatever it is doing."""

from __future__ import annotations

from supervisor.services.base import Service
from supervisor.shared import memory


class MemoryWatch(Service):
    """The hard memory limit: a child (with its subprocesses) above it is killed, whatever it
    is doing; the soft limit is the child's own business between jobs."""

    name = "memory watch"

    def run_once(self) -> int:
        killed = 0
        pools = self.host.config.pools
        for child in self.host.live_children():
            pool = pools.get(child.pool)
            limit = pool.memory_hard_limit if pool else None
            if limit is None or child.kill_reason:
                continue
            used = memory.group_uss(child.pid)
            if used > limit:
                self.host.counters.hard_memory_kills += 1
                self.host.counters.recycle(child.pool, "hard")
                self.host.kill_child(
                    child, f"memory {used >> 20} MiB is above the hard limit of {limit >> 20} MiB"
                )
                killed += 1
        return killed
