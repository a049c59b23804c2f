"""A pool as the master runs it: its config, its generation (a reload that changes the pool
starts a new one) and its slots; and which of its children a wake-up goes to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from supervisor.master.children import Child, Slot
from supervisor.shared.board import State
from supervisor.shared.head_walks import HeadWalks

if TYPE_CHECKING:
    from supervisor.config import PoolConfig


@dataclass
class PoolRuntime:
    config: PoolConfig
    generation: int
    slots: list[Slot]
    # Which of its children walks from the head now, shared through the fork, so that their
    # walks take turns (a new generation has new children, perhaps of other queues, and a
    # record of its own).
    head_walks: HeadWalks = field(default_factory=HeadWalks)

    def wake_one(self, *, exclude: Child | None = None, queue: str | None = None) -> None:
        """Wake one child that can take the work, telling it which queue has it.

        An idle child first. Then one that is claiming: its claim may have looked before this
        job committed, and it would then sleep a whole poll interval with the job waiting; the
        byte left in its pipe sends it straight back to claim. Then a threaded child with a
        free thread, which otherwise waits for a running job to end. Single-threaded running
        children claim when their batch is done, and connecting ones once connected.
        """
        queues = list(self.config.queues)
        hint = queues.index(queue) + 1 if queue in queues else 0
        threads = self.config.threads
        children = [s.child for s in self.slots if s.child is not None and s.child is not exclude]
        preferences: list[Callable[[Child], bool]] = [
            lambda c: c.board.state == State.IDLE,
            lambda c: c.board.state == State.CLAIMING,
            lambda c: (
                threads > 1
                and c.board.state == State.RUNNING
                and len(c.board.running_jobs()) < threads
            ),
        ]
        for can_take in preferences:
            for child in children:
                if can_take(child):
                    child.wake(hint)
                    return
