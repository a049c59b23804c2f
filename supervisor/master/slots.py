"""The master's slots: one per child a pool should have, refilled one fork per turn. A part of
Master (supervisor.master.loop)."""

from __future__ import annotations

import logging
import selectors
import signal
import time
from typing import TYPE_CHECKING

from supervisor.master.children import Child, Slot, spawn
from supervisor.master.pools import PoolRuntime
from supervisor.shared.board import State

if TYPE_CHECKING:
    from supervisor.config import Config, PoolConfig
    from supervisor.config.handlers import Handler
    from supervisor.services.limits_sync import LimitSync

log = logging.getLogger("pgq.master")


class Slots:
    config: Config
    handlers: dict[str, Handler]
    kinds: list[str]
    dsn: str
    host_name: str
    generation: int
    stopping: bool
    pools: dict[str, PoolRuntime]
    children: dict[int, Child]
    selector: selectors.BaseSelector
    limit_sync: LimitSync
    # ... and the Master's enforce_stop_deadline and inherited_fds.

    def new_pool_runtime(self, pool: PoolConfig) -> PoolRuntime:
        self.generation += 1
        return PoolRuntime(
            pool, self.generation, [Slot(pool.name, i + 1) for i in range(pool.processes)]
        )

    def tend_slots(self) -> None:
        """Refill empty slots; while stopping, only enforce the deadline. Decided when the step
        runs, not when the turn begins: a SIGTERM handled earlier in this turn must not be
        followed by a fresh child in the slot its drained child just left."""
        if self.stopping:
            self.enforce_stop_deadline()
        else:
            self.refill_slots()

    def refill_slots(self) -> None:
        """One fork per turn: a fork copies the master's page tables and costs milliseconds,
        and a pool of many children forked in one turn would hold the loop for all of them.
        The next empty slot is due still, so the next turn follows at once."""
        if not self.limit_sync.settled:
            return  # no child may claim before its queues' limits are in the database
        now = time.monotonic()
        for runtime in self.pools.values():
            for slot in runtime.slots:
                if slot.child is None and not slot.retired and now >= slot.next_spawn:
                    self.spawn_into(runtime, slot)
                    return

    def spawn_into(self, runtime: PoolRuntime, slot: Slot) -> None:
        try:
            child = spawn(
                config=self.config,
                pool=runtime.config,
                slot=slot.index,
                generation=runtime.generation,
                host=self.host_name,
                dsn=self.dsn,
                handlers=self.handlers,
                kinds=self.kinds,
                inherited_fds=self.inherited_fds,
                head_walks=runtime.head_walks,
            )
        except OSError as exc:
            log.error(
                "cannot fork a child for %s#%s: %s; retrying in 1s", slot.pool, slot.index, exc
            )
            slot.next_spawn = time.monotonic() + 1.0
            return
        slot.child = child
        self.children[child.pid] = child
        self.selector.register(child.report_fd, selectors.EVENT_READ, child)
        log.info(
            "spawned %s#%s (pid %s)", slot.pool, slot.index, child.pid, extra={"pool": slot.pool}
        )

    def pool_size(self, pool: str) -> int:
        """The children an elastic pool is committed to: its slots not retired."""
        runtime = self.pools.get(pool)
        return sum(1 for s in runtime.slots if not s.retired) if runtime is not None else 0

    def resize_pool(self, pool: str, desired: int, reason: str) -> None:
        """Grow by opening slots (a retired one whose child has left first), shrink by
        retiring slots: an empty one first, then an idle child's, then a claiming one's; a
        child running a job is never chosen, so a shrink waits for the next decision rather
        than stopping work. A retired child drains (TERM: it finishes the job in hand and gives
        back what it has not started) with no deadline: a shrink never kills a job."""
        runtime = self.pools.get(pool)
        if runtime is None or self.stopping:
            return
        active = [s for s in runtime.slots if not s.retired]
        before = len(active)
        if desired > before:
            for _ in range(desired - before):
                reusable = [s for s in runtime.slots if s.retired and s.child is None]
                if reusable:
                    reusable[0].retired = False
                    reusable[0].next_spawn = 0.0
                else:
                    runtime.slots.append(Slot(pool, len(runtime.slots) + 1))
        elif desired < before:
            order = {State.IDLE: 1, State.CLAIMING: 2, State.BOOTING: 3, State.CONNECTING: 3}
            candidates = sorted(
                (s for s in active if s.child is None or s.child.board.state in order),
                key=lambda s: (
                    0 if s.child is None else order[s.child.board.state],
                    -s.index,
                ),
            )
            for slot in candidates[: before - desired]:
                slot.retired = True
                if slot.child is not None:
                    slot.child.draining = True
                    slot.child.signal(signal.SIGTERM)
        after = self.pool_size(pool)
        if after != before:
            log.info(
                "pool %s: %s from %d to %d children: %s",
                pool,
                "growing" if after > before else "shrinking",
                before,
                after,
                reason,
                extra={"pool": pool},
            )

    def slot_of(self, child: Child) -> Slot | None:
        runtime = self.pools.get(child.pool)
        if runtime is None or runtime.generation != child.generation:
            return None  # retired by a reload
        slot = runtime.slots[child.slot - 1]
        return slot if slot.child is child else None
