"""Choosing the order a child's claim tries its pool's queues in, and where each queue's tenant
rotation resumes. One claim statement then takes a batch across them (sql/claim.sql).

Queues: smooth weighted round-robin (the algorithm nginx uses for upstreams) among the queues
that had work: every pick, each one's score grows by its weight; the highest score goes first
and pays back their total. With weights {pdf: 3, reports: 1} the order starts pdf, pdf,
reports, pdf, ... : while both have work, a weight-1 queue beside a weight-3 queue gets 1 claim
in 4 whatever the backlog, spread out, with no randomness to make tests or operators guess.

A queue the claim found empty rests at the back of the order (``EMPTY_FOR`` seconds, doubling
while it stays empty, up to ``REST_CAP``): the claim statement only reaches it when the queues
ahead cannot fill the batch, so a pool of a hundred queues with one busy costs about what that
queue alone costs, and an idle queue never takes a turn or shifts the others' shares. Any claim
that comes up short reaches it anyway, and a wake-up for it ends its rest.

Tenants: inside a queue the claim visits the tenants with available jobs in tenant order, from
where the child's last claim stopped, wrapping around; ``TenantRotation`` remembers that point.
A tenant's weight is how many jobs it gets per visit, so at batch 1 a weight-3 tenant is visited
three claims running.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from supervisor.queue.job import Job

# A queue found empty rests EMPTY_FOR seconds, twice as long each time it is found empty again,
# up to REST_CAP: a pool of a thousand idle queues is probed a few times a second at first,
# then about once a second, the most a job arriving there waits while its siblings are busy
# (an idle child, woken for that queue, takes it at once).
EMPTY_FOR = 0.05
REST_CAP = 1.0
# Tenant keys compare byte by byte, as the claim index does (COLLATE "C"); jobs without a
# tenant are ''. No tenant may hold a control character, so key + "\x01" is the first key after.
_AFTER = "\x01"


class WeightedQueues:
    def __init__(self, weights: Mapping[str, int]) -> None:
        if not weights:
            raise ValueError("at least one queue is needed")
        if any(w <= 0 for w in weights.values()):
            raise ValueError(f"weights must be positive: {dict(weights)}")
        self.weights = dict(weights)
        self._score = dict.fromkeys(self.weights, 0)
        self._empty_until = dict.fromkeys(self.weights, 0.0)
        self._rest = dict.fromkeys(self.weights, EMPTY_FOR)
        self._active: list[str] = list(self.weights)  # not resting at the last order()

    def reweigh(self, weights: Mapping[str, int]) -> None:
        """New weights for the same queues (a weight-only reload): the rotation starts over."""
        if set(weights) != set(self.weights) or any(w <= 0 for w in weights.values()):
            raise ValueError(f"reweigh needs positive weights for {list(self.weights)}")
        self.weights = {q: weights[q] for q in self.weights}
        self._score = dict.fromkeys(self.weights, 0)

    def order(self, now: float) -> list[str]:
        """Every queue, in the order the next claim should try them: the queues that had work
        in the order smooth weighted round-robin picks them, then those resting."""
        self._active = [q for q in self.weights if self._empty_until[q] <= now]
        resting = [q for q in self.weights if self._empty_until[q] > now]
        ranked = sorted(self._active, key=lambda q: -(self._score[q] + self.weights[q]))
        return ranked + resting

    def observe(
        self,
        order: Sequence[str],
        claimed: Sequence[Job],
        limit: int,
        now: float,
        *,
        charge: bool = True,
    ) -> None:
        """After a claim of up to ``limit`` jobs that tried ``order``: the round-robin turn is
        paid, and the queues the claim reached and found empty rest.

        The statement reaches the queues in order and stops once the batch is full, so a full
        batch reached the queues up to the last one that gave jobs; a short one reached all.
        The turn is counted among the queues with work only: each gains its weight and the
        first queue that gave jobs pays their total, so an empty queue shifts no one's share.
        ``charge=False``: a claim outside the rotation (a wake-up for one queue)."""
        gave = {job.queue for job in claimed}
        reached = len(order) - 1
        if len(claimed) >= limit:
            reached = max((i for i, q in enumerate(order) if q in gave), default=reached)
        empty = {q for q in order[: reached + 1] if q not in gave}
        winner = next((q for q in order if q in gave), None)
        if charge and winner is not None:
            with_work = [q for q in self._active if q not in empty]
            for queue in with_work:
                self._score[queue] += self.weights[queue]
            self._score[winner] -= sum(self.weights[q] for q in with_work)
        for queue in order[: reached + 1]:
            if queue in gave:
                self._empty_until[queue] = 0.0
                self._rest[queue] = EMPTY_FOR
            else:
                self._empty_until[queue] = now + self._rest[queue]
                self._rest[queue] = min(REST_CAP, 2 * self._rest[queue])

    def wake(self, queue: str) -> None:
        """Jobs arrived on ``queue``: back in the rotation at once."""
        if queue in self._empty_until:
            self._empty_until[queue] = 0.0
            self._rest[queue] = EMPTY_FOR


class TenantRotation:
    """Per queue, the tenant the child's last claim stopped at and how many jobs it had there."""

    def __init__(self, weights: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self.weights = {q: dict(t) for q, t in (weights or {}).items()}
        self._at: dict[str, tuple[str, int]] = {}

    def weight(self, queue: str, key: str) -> int:
        return self.weights.get(queue, {}).get(key, 1)

    def resume(self, queue: str) -> str:
        """The tenant key the next claim on ``queue`` starts at: the last tenant again while its
        visit is not over (fewer jobs than its weight), else the one after it."""
        at = self._at.get(queue)
        if at is None:
            return ""
        key, served = at
        return key if served < self.weight(queue, key) else key + _AFTER

    def resume_all(self, order: Sequence[str]) -> list[str]:
        """``resume`` for each queue of a claim, in ``order``: a pool of a thousand queues asks
        for all of them at every claim, and most have no tenant to resume at."""
        at = self._at
        return [self.resume(queue) if queue in at else "" for queue in order]

    def advance_all(self, order: Sequence[str], resume: Sequence[str], jobs: Sequence[Job]) -> None:
        """``advance`` for each queue a claim took jobs from, ``resume`` its start in ``order``:
        the jobs grouped once, not read again for each of the pool's queues."""
        by_queue: dict[str, list[Job]] = {}
        for job in jobs:
            by_queue.setdefault(job.queue, []).append(job)
        for queue, start in zip(order, resume, strict=True):
            taken = by_queue.get(queue)
            if taken:
                self.advance(queue, start, taken)

    def advance(self, queue: str, start: str, jobs: Iterable[Job]) -> None:
        """Record where a claim that started at ``start`` stopped: the last tenant it visited,
        in visiting order (from ``start`` to the end of the keys, then from the beginning)."""
        keys = [job.tenant or "" for job in jobs if job.queue == queue]
        if not keys:
            return
        last = max(keys, key=lambda k: (k < start, k))
        served = keys.count(last)
        previous = self._at.get(queue)
        if previous is not None and previous[0] == last and start == last:
            served += previous[1]
        self._at[queue] = (last, served)
