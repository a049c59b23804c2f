"""The master's wake-up flags: an enqueue NOTIFYs only while some master has a child asleep
for the queue (pgq.queue_wakeups, sql/migrations/0021_enqueue_wakeups.sql).

NOTIFY takes a database-wide lock at commit, so an enqueue per transaction that always
notified made concurrent producers commit one after another. Instead each master keeps, per
queue it serves, a flag that says "a child of mine sleeps until this queue's wake-up". The
first enqueue of a due job takes the flag down and sends the one NOTIFY; later enqueues find it
down and send none. The master raises it again when a child goes to sleep after an empty claim
(the child says so on its report pipe, b"I"), or at once after a wake-up when other children of
the queue still sleep.

Raising a flag races with an enqueue whose statement read it down just before: that job is
not notified. So whenever a flag actually goes up, the master wakes a child of the queue once
more: its claim, which starts after the flag is visible, finds every job committed before. What
is left is a job whose transaction read the flag before it went up and committed after that
claim began; the child's next claim finds it (it follows the next job's wake-up, the end of a
running batch, or at the latest the poll interval). docs/enqueue_wakeups.md states the bound.

The master's belief of which flags are up is refreshed every REASSERT seconds (a NOTIFY lost
with a listener connection would otherwise leave a flag down); the write then only touches a
flag that is down.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from supervisor.queue.queries import query
from supervisor.shared.board import State

if TYPE_CHECKING:
    from supervisor.config import PoolConfig
    from supervisor.master.children import Slot
    from supervisor.sessions.database import MasterDatabase


class _Pool(Protocol):
    config: PoolConfig
    slots: list[Slot]


class FlagHost(Protocol):
    """What the flags need from the master (a protocol: the master imports this module)."""

    db: MasterDatabase
    listener: object | None
    supervisor_id: str
    stopping: bool

    @property
    def pools(self) -> Mapping[str, _Pool]: ...

    def wake_queue(self, queue: str) -> None: ...


# How often the master writes every flag it wants up, whatever it believes: a bound on how long
# a flag taken while the listener was reconnecting stays down (idle children still poll).
REASSERT = 1.0


class WakeupFlags:
    def __init__(self, master: FlagHost) -> None:
        self.master = master
        self.up: set[str] = set()  # flags this master believes are up
        self.to_raise: set[str] = set()
        self.next_reassert = 0.0

    @property
    def enabled(self) -> bool:
        # Without a listener nobody here would hear the NOTIFY: leave the flags down, so that
        # enqueues to these queues never notify; idle children poll.
        return self.master.listener is not None

    def served(self) -> set[str]:
        return {q for rt in self.master.pools.values() for q in rt.config.queues}

    def sleeps(self, queue: str) -> bool:
        """Whether a child of a pool serving ``queue`` waits for a wake-up: idle, or threaded
        with a free thread (wake_idle's choices, claiming aside: a claiming child that finds
        nothing says so)."""
        for runtime in self.master.pools.values():
            if queue not in runtime.config.queues:
                continue
            threads = runtime.config.threads
            for slot in runtime.slots:
                child = slot.child
                if child is None or child.draining:
                    continue
                state = child.board.state
                if state == State.IDLE or (
                    threads > 1
                    and state == State.RUNNING
                    and len(child.board.running_jobs()) < threads
                ):
                    return True
        return False

    def child_idle(self, pool: str) -> None:
        """A child of ``pool`` found nothing to claim and sleeps: its queues' flags go up."""
        runtime = self.master.pools.get(pool)
        if runtime is None:
            return
        self.to_raise.update(q for q in runtime.config.queues if q not in self.up)

    def taken(self, queue: str) -> None:
        """A NOTIFY for ``queue`` came from another session: an enqueue took the flag down
        (or an operator's verb woke the queue). Raise it again if more children sleep."""
        self.up.discard(queue)
        if self.sleeps(queue):
            self.to_raise.add(queue)

    def reassert_soon(self) -> None:
        self.next_reassert = 0.0

    def flush(self) -> None:
        """A step of the master's turn: write the flags that must go up, then wake a child of
        each queue whose flag did go up (see the module's note on the race)."""
        if not self.enabled or self.master.stopping:
            return
        now = time.monotonic()
        if now >= self.next_reassert:
            self.next_reassert = now + REASSERT
            self.up.clear()
            self.to_raise.update(q for q in self.served() if self.sleeps(q))
        if not self.to_raise:
            return
        queues = sorted(self.to_raise)
        params = {"supervisor_id": self.master.supervisor_id, "queues": queues}

        def write(conn: Any) -> list[str]:
            return [q for (q,) in conn.execute(query("want_wakeups"), params) if q is not None]

        raised = self.master.db.run("wake-up flags", write)
        if raised is None:
            return  # the database is away: kept for the next turn
        self.to_raise.clear()
        self.up.update(queues)
        for queue in dict.fromkeys(raised):
            self.master.wake_queue(queue)

    def configure(self) -> None:
        """After a start or a reload: forget the flags of queues no pool serves any more."""
        if not self.enabled:
            return
        keep = sorted(self.served())
        self.up &= set(keep)
        self.to_raise &= set(keep)
        params = {"supervisor_id": self.master.supervisor_id, "keep": keep}
        self.master.db.run(
            "wake-up flags", lambda conn: conn.execute(query("forget_wakeups"), params)
        )
        self.reassert_soon()
