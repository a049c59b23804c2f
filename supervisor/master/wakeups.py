"""The master's wake-up flags: an enqueue NOTIFYs only while some master has a child asleep
for the queue (pgq.wakeup_flags: sql/migrations/0021_enqueue_wakeups.sql, then 0071).

NOTIFY takes a database-wide lock at commit, so an enqueue per transaction that always
notified made concurrent producers commit one after another. Instead each queue has a flag
that says "a child of some master sleeps until this queue's wake-up", raised by any master
serving the queue. The first enqueue of a due job takes the flag down and sends the one NOTIFY,
which every master hears; later enqueues find it down and send none. A master raises it again
when a child goes to sleep after an empty claim
(the child says so on its report pipe, b"I"), or, when other children of the queue still sleep
after a wake-up, AFTER_TAKE later: by then the child just woken has claimed and is running the
job, so the write no longer competes with that claim for the machine (raised at once, it cost
the idle pickup about 0.25 ms of its 3, issue 29); with a short job the child's own b"I" comes
first and raises it. A job enqueued meanwhile was not notified: the watch below covers it.

Raising a flag races with an enqueue whose statement read it down just before: that job is
not notified. Any claim of the queue that begins after the flag is visible finds every job
committed before, so whenever a flag actually goes up the master that raised it watches for
one (a master that found it already up leaves that to the one that raised it): the children
of the queue's pools show on their boards when they claim. Usually one comes at once (the child
just woken finishes its job and claims again, carrying its completion); if none has begun within
RECHECK, the master wakes a child of the queue itself. (It used to wake one at every raise: with
two idle children, every job then cost an empty claim of the other, a second claim a job, and
the idle pickup paid for it. And for a while the raise itself looked for a waiting job: that
probe of the claim index's head walked every dead entry a held xmin horizon keeps there, on
this loop, and the wake-ups waited behind it; see sql/functions/want_wakeups.sql.) What is
left is a job whose transaction read the flag before it went up and committed after that claim
began; the child's next claim finds it (it follows the next job's wake-up, the end of a running
batch, or at the latest the poll interval).
docs/enqueue_wakeups.md states the bound.

The master's belief of which flags are up is refreshed every REASSERT seconds (a NOTIFY lost
with a listener connection would otherwise leave a flag down); the write then only touches a
flag that is down.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from supervisor.queue.queries import query
from supervisor.shared.board import Counter, State

if TYPE_CHECKING:
    from supervisor.config import PoolConfig
    from supervisor.master.children import Child, Slot
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
# How long after raising a flag the master waits for a claim of the queue to begin (one that
# covers the race in the module's note) before it wakes a child for that claim itself: what a
# job enqueued in the race may wait beyond it.
RECHECK = 0.05
# How long after a wake-up took the flag, while other children of the queue still sleep, the
# master raises it again (unless the woken child's empty claim raised it first): past the woken
# child's claim, short beside a job that keeps that child busy.
AFTER_TAKE = 0.005


def claims_begun(child: Child) -> int:
    """The claims ``child`` has begun: those it finished, and the one under way if any."""
    board = child.board
    return board.counter(Counter.CLAIMS) + (board.state == State.CLAIMING)


class Recheck:
    """A raised flag's watch: the claims each child of the queue had begun at the raise."""

    def __init__(self, due: float, begun: list[tuple[Child, int]]) -> None:
        self.due = due
        self.begun = begun

    def covered(self) -> bool:
        """Whether a child of the queue began a claim after the raise."""
        return any(not c.closed and claims_begun(c) > n for c, n in self.begun)


class WakeupFlags:
    def __init__(self, master: FlagHost) -> None:
        self.master = master
        self.up: set[str] = set()  # flags this master believes are up
        self.to_raise: set[str] = set()
        self.next_reassert = 0.0
        self.rechecks: dict[str, Recheck] = {}
        self.after_take: dict[str, float] = {}  # queue -> when to raise its flag again

    @property
    def enabled(self) -> bool:
        # Without a listener nobody here would hear the NOTIFY: leave the flags down, so that
        # enqueues to these queues never notify; idle children poll.
        return self.master.listener is not None

    def served(self) -> set[str]:
        return {q for rt in self.master.pools.values() for q in rt.config.queues}

    def serving(self, queue: str) -> list[tuple[int, Child]]:
        """The children of the pools serving ``queue``, each with its pool's threads."""
        return [
            (runtime.config.threads, slot.child)
            for runtime in self.master.pools.values()
            if queue in runtime.config.queues
            for slot in runtime.slots
            if slot.child is not None
        ]

    def children_of(self, queue: str) -> list[Child]:
        return [child for _, child in self.serving(queue)]

    def sleeps(self, queue: str) -> bool:
        """Whether a child of a pool serving ``queue`` waits for a wake-up: idle, or threaded
        with a free thread (wake_idle's choices, claiming aside: a claiming child that finds
        nothing says so)."""
        for threads, child in self.serving(queue):
            if child.draining:
                continue
            state = child.board.state
            if state == State.IDLE or (
                threads > 1 and state == State.RUNNING and len(child.board.running_jobs()) < threads
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
        (or an operator's verb woke the queue). Raised again AFTER_TAKE later if more children
        still sleep then."""
        self.up.discard(queue)
        self.after_take.setdefault(queue, time.monotonic() + AFTER_TAKE)

    def reassert_soon(self) -> None:
        self.next_reassert = 0.0

    def flush(self) -> None:
        """A step of the master's turn: write the flags that must go up, and watch each one
        that did go up for a claim of its queue (see the module's note on the race)."""
        if not self.enabled or self.master.stopping:
            self.rechecks.clear()
            self.after_take.clear()
            return
        now = time.monotonic()
        self.recheck(now)
        for queue, due in list(self.after_take.items()):
            if now >= due:
                del self.after_take[queue]
                if queue not in self.up and self.sleeps(queue):
                    self.to_raise.add(queue)
        if now >= self.next_reassert:
            self.next_reassert = now + REASSERT
            self.up.clear()
            self.to_raise.update(q for q in self.served() if self.sleeps(q))
        if not self.to_raise:
            return
        queues = sorted(self.to_raise)
        params = {"supervisor_id": self.master.supervisor_id, "queues": queues}

        def write(conn: Any) -> list[str]:
            return [queue for (queue,) in conn.execute(query("want_wakeups"), params)]

        raised = self.master.db.run("wake-up flags", write)
        if raised is None:
            return  # the database is away: kept for the next turn
        self.to_raise.clear()
        self.up.update(queues)
        for queue in queues:
            self.after_take.pop(queue, None)
        # Read after the raise committed: a claim begun later sees every job committed before.
        due = time.monotonic() + RECHECK
        for queue in dict.fromkeys(raised):
            earlier = self.rechecks.get(queue)
            begun = [(c, claims_begun(c)) for c in self.children_of(queue)]
            self.rechecks[queue] = Recheck(min(due, earlier.due) if earlier else due, begun)

    def recheck(self, now: float) -> None:
        """Each raised flag's watch: done when a claim of its queue has begun since the raise;
        past its time, a child of the queue is woken for that claim."""
        for queue, watch in list(self.rechecks.items()):
            if watch.covered():
                del self.rechecks[queue]
            elif now >= watch.due:
                del self.rechecks[queue]
                self.master.wake_queue(queue)

    def next_due(self) -> float | None:
        """When the master must look at the flags again: a watch, or a raise after a take."""
        dues = [w.due for w in self.rechecks.values()] + list(self.after_take.values())
        return min(dues, default=None)

    def configure(self) -> None:
        """After a start or a reload: forget the flags of queues no pool serves any more. The
        database's flags are left as they are: a flag is the queue's, perhaps raised for another
        master's children too, and one left up with nobody asleep costs a single NOTIFY."""
        if not self.enabled:
            return
        keep = self.served()
        self.up &= keep
        self.to_raise &= keep
        self.rechecks = {q: w for q, w in self.rechecks.items() if q in keep}
        self.after_take = {q: t for q, t in self.after_take.items() if q in keep}
        self.reassert_soon()
