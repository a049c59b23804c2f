"""Where a child's claims start inside each tenant: just past the last job it claimed there.

Every claimed job leaves a dead entry at the head of its tenant's range in the claim index
(jobs_claim_tenant). VACUUM removes them, and an index scan marks them dead once no snapshot can
see them; but while any snapshot older than them is open (a report, a pg_dump, a session idle in
a transaction, a replica with hot_standby_feedback) neither may happen, and a claim that starts
at the head of the range visits every one of them, each a heap fetch: the claim's cost grows
with the jobs consumed since the horizon was taken (issue 20, part 3; docs/claim-order.md).

So the child remembers, per (queue, tenant), the key (priority, run_at, id) of the last job it
claimed, and its next claim there starts past it (sql/claim.sql: the walk's cursor
probe). What it skips is what it and its siblings consumed, plus any job that became available
later with a key below the cursor: a producer's transaction that committed late, a scheduled
job staged at its run_at, a rescued or released job, a higher priority. For those, a claim
from the head of every tenant comes again at most ``refresh`` seconds (the pool's poll
interval, the longest an idle child waits anyway) after the last, and the cursors start again
from what it claimed. How soon it comes depends on what the last one cost: HEAD_EVERY times
its duration, so on a clean database (where it costs what any claim costs) a late commit waits
a few claims, and while a horizon is held (where it walks the whole dead prefix) it takes
1/HEAD_EVERY of the child's time, more once one walk costs more than refresh/HEAD_EVERY (the
refresh bounds the wait), but never more than 1/HEAD_AT_MOST: the dead prefix grows as long as
the horizon is held (149 ms a walk after five minutes at 3,000 jobs/s, about 1.8 s after an
hour), and claims from the head every refresh would take the whole child. So no job waits
longer than the refresh because of a cursor, or HEAD_AT_MOST walks' time once a walk costs
more than refresh/HEAD_AT_MOST. The claims between walk only the entries that siblings
consumed since this child's last one.

While the head is dear, the late commits (the most frequent job below a cursor by far, and the
one a busy fleet with many producers makes all the time) do not wait for it: every HEAD_EVERY of
its own walks a claim starts NEAR (2 s of run_at) before each cursor, which walks only what was
consumed in those two seconds. What only the head finds (a higher priority, a rescued job, a
producer's transaction longer than NEAR) waits for it, HEAD_AT_MOST walks apart at most. A
claim from the head that came back short of its limit found everything below the cursors, so
the cursors of the tenants where it took nothing stay.

What a walk costs is read from the claims from the head, but believed only up to WALK_GROWTH
times the last walk: the dead prefix grows with the time the horizon has been held, so between
two claims from the head (at most a few walks apart) its walk cannot grow that much, while a
claim that waited on a row lock for its carried outcomes, carried a slow completion, or queued
for a queue's limits mutex is longer by the whole wait. Taken whole, a 15 s wait behind a row
lock put the next claim from the head 60 s away (four times it), and hid a late-committed job
below the cursors for that long (issue 30); believed up to four walks, it puts it where the walk
says. A walk that really grew that fast (a child started an hour into a hold) is believed within
a few claims from the head.

While a horizon is held, the pool's walks take turns (shared/head_walks.py): a child whose
claim from the head is due while a sibling's is under way claims from its cursors meanwhile,
and walks after it. Overlapping walks left one child to take the whole offered rate, and the
pickup's slowest hundredth was those moments.

The state lives in the child's memory, not in a database row: a row updated per claim would
grow its own unprunable version chain while the horizon is held, the very cost avoided here.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from datetime import timedelta

from supervisor.queue.job import Job
from supervisor.queue.jobs import Cursor
from supervisor.shared.head_walks import HeadWalks

# At most this many tenants remembered per queue (the most recently claimed): a tenant beyond
# them is probed from its head, as without cursors.
PER_QUEUE = 64
# At most this many cursors sent with one claim, the queues tried first first: each of the walk's
# steps reads the list.
PER_CLAIM = 256
# The next claim from the head is due this many times the last one's duration after it (at
# most the refresh): a twentieth of the child's time, until one costs over refresh / 20.
HEAD_EVERY = 20.0
# ... and never sooner than this many times it: at most a tenth of the child's time. The claims
# from near the cursors (NEAR) find the late commits between; what only the head finds (a higher
# priority, a rescued job, a producer's transaction longer than NEAR) is rare. At a quarter, a
# child at 3,000 jobs/s spent a quarter of its time walking dead entries once the walk cost more
# than the refresh / 20 (a few minutes into a hold), and the pool fell behind the offered rate.
HEAD_AT_MOST = 10.0
# A claim from near the cursors starts each cursor's tenant this much run_at before the cursor.
# It finds the jobs that became available just below a cursor, by far the most frequent kind:
# a producer's transaction that committed after a sibling claimed past its jobs (their run_at is
# the transaction's start, committed a few milliseconds later). Its walk is the dead entries of
# NEAR seconds' consumption, not of everything consumed since the horizon was taken, so it comes
# HEAD_EVERY of its own walks apart however long the horizon is held.
NEAR = timedelta(seconds=2)
# A claim from the head is believed to have walked at most this many times the last walk (the
# rest of its time was a wait: a row lock, a completion, the limits mutex). Before the first,
# the walk believed is the dearest that still brings the next within the refresh.
WALK_GROWTH = 4.0
# A claim from the head that took at most this long is as cheap as any: no horizon is held. An
# empty claim then drops the cursors, so that an idle child's next claim (after its wake-up)
# starts from the head, and the child is not woken early for one (due_in): kept, the cursors
# cost an idle child an empty claim from the head every HEAD_EVERY claims' time (14 ms on a
# clean database), a second claim for every job at one job every 20 ms.
CHEAP_WALK = 0.005


class ClaimCursors:
    def __init__(self, refresh: float, shared: HeadWalks | None = None, walker: int = 0) -> None:
        self.refresh = refresh
        # The pool's walk under way, if any (None: this child walks on its own schedule), and
        # this child's name there (its pid).
        self.shared = shared
        self.walker = walker
        self._at: dict[str, OrderedDict[str, Cursor]] = {}
        self._full_due = 0.0  # the first claim starts from the head
        self._full = False
        self._near_due = 0.0
        self._near = False
        # What the last claim from the head is believed to have walked (seconds).
        self.walk = refresh / (HEAD_AT_MOST * WALK_GROWTH)

    def for_claim(self, order: Sequence[str], now: float) -> list[Cursor]:
        """The cursors the next claim (trying ``order``) starts from: none when a claim from the
        head of every tenant is due (then the cursors start again from what it claims)."""
        self._full = now >= self._full_due and self._turn(now)
        if self._full:
            return []
        # While the head is cheap, a claim from it comes as often as one from near would.
        self._near = self.walk > CHEAP_WALK and now >= self._near_due
        out: list[Cursor] = []
        at = self._at
        for queue in order:
            tenants = at.get(queue)
            if not tenants:
                continue  # most queues of a large pool: nothing claimed there since the head
            # In tenant order: the claim takes the first one at or after a key as the nearest.
            # Python's str order is the index's byte order (COLLATE "C") for UTF-8.
            out.extend(sorted(tenants.values(), key=lambda c: c[1]))
            if len(out) >= PER_CLAIM:
                out = out[:PER_CLAIM]
                break
        if self._near:
            return [(q, t, priority, run_at - NEAR, 0) for q, t, priority, run_at, _ in out]
        return out

    def observe(
        self, jobs: Iterable[Job], now: float, took: float = 0.0, whole: bool = False
    ) -> None:
        """After a claim that the last ``for_claim`` prepared (started at ``now``, ``took``
        seconds, its whole round trip): each tenant's cursor moves to the last job claimed
        there. ``jobs`` in claim order (jobs_api.read_claim's), so a tenant's last is its
        furthest. ``whole``: the claim visited every tenant of its queues and took every job it
        found there (it came back short of its limit, with no limit holding a job back)."""
        # One step per tenant, not per job (a step per job cost about 2 us a job at batch 100).
        last = {(job.queue, job.tenant): job for job in jobs}
        if self._full:
            if whole:
                # Nothing waited below a tenant's cursor where it claimed nothing: that cursor
                # stays, and the next claims do not walk the dead prefix again. Without this a
                # claim from the head that found nothing left no cursor, and every claim after
                # it walked from the head until one claimed a job: at 3,000 jobs/s with a held
                # horizon, a child often drained its queue, and claims from the head came
                # three a second, not one a HEAD_EVERY walks (steady_latency.py).
                for queue, tenant in last:
                    self._at.get(queue, {}).pop(tenant or "", None)
            else:
                self._at.clear()
            if self.shared is not None:
                self.shared.end(self.walker)
            walk = self.walk = min(took, WALK_GROWTH * self.walk)
            self._full_due = now + max(min(self.refresh, HEAD_EVERY * walk), HEAD_AT_MOST * walk)
            self._full = False
            self._near_due = now + min(self.refresh, HEAD_EVERY * min(took, CHEAP_WALK))
        elif self._near:
            # A claim from near that waited (a row lock, a completion) is not believed to have
            # walked longer than one from the head.
            self._near_due = now + min(self.refresh, HEAD_EVERY * min(took, self.walk))
            self._near = False
        if not last and self.walk <= CHEAP_WALK:
            self._at.clear()
        for job in last.values():
            tenants = self._at.setdefault(job.queue, OrderedDict())
            key = job.tenant or ""
            old = tenants.get(key)
            if old is None or job.sort_key > (-old[2], old[3], old[4]):
                tenants[key] = (job.queue, key, job.priority, job.run_at, job.id)
            tenants.move_to_end(key)
            if len(tenants) > PER_QUEUE:
                tenants.popitem(last=False)

    def _turn(self, now: float) -> bool:
        """Whether this child's claim from the head, due now, goes now: not while a sibling's
        is under way, once a walk costs more than any claim (a horizon held). Going, it says
        so, believed answered within WALK_GROWTH walks."""
        shared = self._turns()
        if shared is None:
            return True
        # Its own mark from a claim that never came back is not a sibling's.
        if shared.sibling_until(self.walker, now) is not None:
            return False
        shared.begin(self.walker, now + WALK_GROWTH * self.walk)
        return True

    def _turns(self) -> HeadWalks | None:
        """The pool's record of its walk under way, while the walks take turns: shared, and a
        walk costs more than any claim (None: no turns to take)."""
        return self.shared if self.walk > CHEAP_WALK else None

    def due_in(self, now: float) -> float | None:
        """Seconds until the claim from the head is due, while some cursor could be skipping a
        job (None: no cursor, every claim starts from the head anyway). An idle child waits no
        longer than this, so that claim is never a poll interval late."""
        if not any(self._at.values()):
            return None
        # Not for one from near the cursors: an idle child would wake every twenty cheap walks.
        # Its next claim, when a wake-up comes, is one from near (its time has come by then), so
        # a late commit that the wake-up announced is found by it.
        due = self._full_due
        shared = self._turns()
        if shared is not None:
            due = max(due, shared.sibling_until(self.walker, now) or 0.0)
        return max(0.0, due - now)
