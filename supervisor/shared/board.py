"""A child's status board: shared memory the child writes and the master reads.

Created by the master just before it forks the child (an anonymous MAP_SHARED mapping is shared
across fork), so a child reports its state, its current jobs and its counters with plain memory
writes: no pipe message or system call per job, which matters at thousands of jobs a second.
The master reads the boards on its tick for job timeouts, process titles, status and metrics.

Layout: 8-byte words, viewed both as unsigned integers and as doubles. Words 0-63 hold the
state, counters and histograms; then one 8-word record per handler thread, each guarded by a
sequence number (odd while the child is writing) so the master never reads half a record; then
the list of jobs that ran here but whose outcome is not written yet (a sequence number, a count,
the ids), so that a child killed before writing them is not said to have held them unstarted;
then the claims the child holds (a sequence number, a count, (id, lease id) pairs), which the
master renews and watches for cancels by primary key (services/leases.py): claimed, running, or
finished and not yet written.
"""

from __future__ import annotations

import mmap
import time
from array import array
from bisect import bisect_left
from dataclasses import dataclass
from enum import IntEnum

WORD = 8
HEADER_WORDS = 64
THREAD_WORDS = 8


class State(IntEnum):
    BOOTING = 0
    CONNECTING = 1
    IDLE = 2
    CLAIMING = 3
    RUNNING = 4
    DRAINING = 5


class Counter(IntEnum):
    """Monotonic counters, by word index."""

    JOBS_RUN = 2
    CLAIMS = 3
    CLAIMS_EMPTY = 4
    COMPLETED = 5
    RETRIED = 6
    DISCARDED = 7
    SNOOZED = 8
    RELEASED = 9
    LOST = 10
    UNKNOWN_KIND = 11
    CANCELLED = 15


_READY = 1
_STATE = 0
_CLAIM_SECONDS = 12  # double: sum of claim round-trip seconds
_JOB_SECONDS = 13  # double: sum of handler seconds
_MEMORY = 14  # bytes, last measured by the child
_CLAIM_BUCKETS_AT = 16
_JOB_BUCKETS_AT = 36
# The words the master writes: the ids of this child's jobs someone cancelled (running: read
# when the master's TERM arrives, so the child ends that job cancelled instead of draining it;
# claimed, not started: read before the job would start). One word per job, so two cancels in
# the same second both count; the oldest is overwritten only when all are taken.
_CANCELS_AT = 56
CANCEL_SLOTS = HEADER_WORDS - _CANCELS_AT
_NO_CANCELS = bytes(WORD * CANCEL_SLOTS)

# Histogram upper bounds in seconds (Prometheus "le"), +Inf implied.
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
JOB_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
assert _CLAIM_BUCKETS_AT + len(CLAIM_BUCKETS) + 1 <= _JOB_BUCKETS_AT
assert _JOB_BUCKETS_AT + len(JOB_BUCKETS) + 1 <= _CANCELS_AT < HEADER_WORDS


@dataclass(frozen=True)
class RunningJob:
    thread: int
    job_id: int
    lease_id: int
    kind_index: int
    started: float  # monotonic
    deadline: float | None  # monotonic
    started_wall: float


class Board:
    def __init__(
        self, threads: int = 1, unrecorded: int = 0, queues: int = 0, held: int = 0
    ) -> None:
        self.threads = threads
        # Room for the ids of jobs run but not yet recorded; more than this are not listed.
        self.unrecorded_room = unrecorded
        self._unrecorded_at = HEADER_WORDS + THREAD_WORDS * threads
        # Then the pool's queue weights as a reload set them (a generation, then one word per
        # queue in the pool's order): a weight-only reload reaches running children here.
        self.queues = queues
        self._weights_at = self._unrecorded_at + 2 + unrecorded
        # Room for the claims held; a child holding more says so (count past the room), and
        # the master then renews its jobs by worker identity instead.
        self.held_room = held
        self._held_at = self._weights_at + 1 + queues
        self._map = mmap.mmap(-1, (self._held_at + 2 + 2 * held) * WORD)
        self._u = memoryview(self._map).cast("Q")
        self._d = memoryview(self._map).cast("d")
        self._cancel_bytes = memoryview(self._map)[_CANCELS_AT * WORD : HEADER_WORDS * WORD]
        self._next_cancel = 0  # the master's: which cancel word to overwrite when all are taken

    # -- the weights: written by the master, read by the child ------------------------------

    def set_weights(self, weights: list[int]) -> None:
        """The master's: new weights for the pool's queues, in its order; the generation moves
        after them, so a child that sees the new generation reads the new weights."""
        if len(weights) != self.queues:
            raise ValueError(f"{len(weights)} weights for a board of {self.queues} queues")
        for i, weight in enumerate(weights):
            self._u[self._weights_at + 1 + i] = weight
        self._u[self._weights_at] += 1

    def weights_generation(self) -> int:
        """0 until a reload changed the weights; then how many times it did."""
        return int(self._u[self._weights_at]) if self.queues else 0

    def weights(self) -> list[int]:
        while True:  # the master may be writing: read until the generation held still
            before = self._u[self._weights_at]
            found = [
                int(w) for w in self._u[self._weights_at + 1 : self._weights_at + 1 + self.queues]
            ]
            if self._u[self._weights_at] == before:
                return found

    # -- written by the child --------------------------------------------------------------

    def set_state(self, state: State) -> None:
        self._u[_STATE] = state

    def set_ready(self) -> None:
        self._u[_READY] = 1

    def count(self, counter: Counter, n: int = 1) -> None:
        self._u[counter] += n

    def observe_claim(self, seconds: float) -> None:
        self._d[_CLAIM_SECONDS] += seconds
        self._u[_CLAIM_BUCKETS_AT + bisect_left(CLAIM_BUCKETS, seconds)] += 1

    def observe_job(self, seconds: float) -> None:
        self._d[_JOB_SECONDS] += seconds
        self._u[_JOB_BUCKETS_AT + bisect_left(JOB_BUCKETS, seconds)] += 1

    def set_memory(self, nbytes: int) -> None:
        self._u[_MEMORY] = nbytes

    def job_started(
        self, thread: int, job_id: int, lease_id: int, kind_index: int, timeout: float | None
    ) -> float:
        base = HEADER_WORDS + thread * THREAD_WORDS
        now = time.monotonic()
        u, d = self._u, self._d
        u[base] += 1  # odd: writing
        u[base + 1] = job_id
        u[base + 2] = lease_id
        u[base + 3] = kind_index + 1
        d[base + 4] = now
        d[base + 5] = now + timeout if timeout else 0.0
        d[base + 6] = time.time()
        u[base] += 1  # even: consistent
        return now

    def set_unrecorded(self, job_ids: list[int]) -> None:
        """The jobs that ran here whose outcome is not written yet (as many as there is room
        for)."""
        base, ids = self._unrecorded_at, job_ids[: self.unrecorded_room]
        u = self._u
        u[base] += 1  # odd: writing
        u[base + 1] = len(ids)
        u[base + 2 : base + 2 + len(ids)] = array("Q", ids)
        u[base] += 1  # even: consistent

    def add_unrecorded(self, job_id: int) -> None:
        """One more job that ran here and waits to be written: set_unrecorded's list grown by
        one id, in constant time (rewriting the whole list at every job cost a batch of 100
        about 5 us a job; the list is rewritten whole when outcomes are written)."""
        base, u = self._unrecorded_at, self._u
        count = u[base + 1]
        if count >= self.unrecorded_room:
            return
        u[base] += 1  # odd: writing
        u[base + 2 + count] = job_id
        u[base + 1] = count + 1
        u[base] += 1  # even: consistent

    def set_held(self, claims: list[tuple[int, int]]) -> None:
        """The claims (job id, lease id) this child holds; past the room, only how many."""
        base, u = self._held_at, self._u
        u[base] += 1  # odd: writing
        u[base + 1] = len(claims)
        if len(claims) <= self.held_room:
            u[base + 2 : base + 2 + 2 * len(claims)] = array(
                "Q", [word for claim in claims for word in claim]
            )
        u[base] += 1  # even: consistent

    def job_finished(self, thread: int) -> None:
        base = HEADER_WORDS + thread * THREAD_WORDS
        self._u[base] += 1
        self._u[base + 1] = 0
        self._u[base] += 1

    def cancelled_jobs(self) -> set[int]:
        """The jobs the master was asked to cancel."""
        return {int(i) for i in self._u[_CANCELS_AT:HEADER_WORDS] if i}

    def is_cancelled(self, job_id: int) -> bool:
        """Whether the master was asked to cancel ``job_id``: one look per job started, with no
        set built (cancelled_jobs' set cost about 1 us a job), and while no slot holds a cancel
        (nearly always) only the slots' bytes compared with zeros: 0.06 against 0.21 us."""
        if self._cancel_bytes.tobytes() == _NO_CANCELS:
            return False
        return job_id in self._u[_CANCELS_AT:HEADER_WORDS].tolist()

    # -- read by the master ----------------------------------------------------------------

    def cancel_job(self, job_id: int) -> None:
        """Written by the master when it was asked to cancel ``job_id`` (before it stops the
        child, for a running job). Each word is written whole, so the child never reads half."""
        words = self._u[_CANCELS_AT:HEADER_WORDS]
        if job_id in words:
            return
        free = [i for i, word in enumerate(words) if not word]
        slot = free[0] if free else self._next_cancel % CANCEL_SLOTS
        self._next_cancel = slot + 1
        self._u[_CANCELS_AT + slot] = job_id

    @property
    def state(self) -> State:
        return State(self._u[_STATE])

    @property
    def ready(self) -> bool:
        return bool(self._u[_READY])

    @property
    def memory(self) -> int:
        return int(self._u[_MEMORY])

    def counter(self, counter: Counter) -> int:
        return int(self._u[counter])

    def counters(self) -> dict[Counter, int]:
        return {c: int(self._u[c]) for c in Counter}

    def claim_histogram(self) -> tuple[list[int], float]:
        n = len(CLAIM_BUCKETS) + 1
        return list(self._u[_CLAIM_BUCKETS_AT : _CLAIM_BUCKETS_AT + n]), self._d[_CLAIM_SECONDS]

    def job_histogram(self) -> tuple[list[int], float]:
        n = len(JOB_BUCKETS) + 1
        return list(self._u[_JOB_BUCKETS_AT : _JOB_BUCKETS_AT + n]), self._d[_JOB_SECONDS]

    def running_jobs(self) -> list[RunningJob]:
        jobs = []
        for thread in range(self.threads):
            base = HEADER_WORDS + thread * THREAD_WORDS
            for _ in range(100):
                before = self._u[base]
                if before % 2:
                    continue
                job_id, lease_id, kind = self._u[base + 1], self._u[base + 2], self._u[base + 3]
                started, deadline, wall = self._d[base + 4], self._d[base + 5], self._d[base + 6]
                if self._u[base] == before:
                    break
            else:
                continue  # the child is writing this record right now; read it next tick
            if job_id:
                jobs.append(
                    RunningJob(thread, job_id, lease_id, kind - 1, started, deadline or None, wall)
                )
        return jobs

    def unrecorded(self) -> list[int]:
        """The child's list of jobs run but not recorded; empty if it never settled while
        read (a child killed mid-write leaves it odd for good)."""
        base = self._unrecorded_at
        for _ in range(100):
            before = self._u[base]
            if before % 2:
                continue
            count = min(int(self._u[base + 1]), self.unrecorded_room)
            ids = list(self._u[base + 2 : base + 2 + count])
            if self._u[base] == before:
                return ids
        return []

    def held(self) -> list[tuple[int, int]] | None:
        """The claims the child holds, or None when they are not known: more than the room,
        or the list never settled while read."""
        base = self._held_at
        for _ in range(100):
            before = self._u[base]
            if before % 2:
                continue
            count = int(self._u[base + 1])
            if count > self.held_room:
                return None
            words = list(self._u[base + 2 : base + 2 + 2 * count])
            if self._u[base] == before:
                return list(zip(words[0::2], words[1::2], strict=True))
        return None

    def close(self) -> None:
        self._u.release()
        self._d.release()
        self._cancel_bytes.release()
        self._map.close()
