"""Batches: many jobs enqueued together, and one `then` job enqueued once they have all ended.

``enqueue_batch`` runs in the caller's transaction like every enqueue: the members, the batch
and its counters exist if and only if the caller commits. The `then` job is written by the
statement that records the last member's outcome (see sql/migrations/0018_batches.sql for how
the count avoids one hot row), and its handler sees the batch's counts in ``job.batch``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from supervisor.queue import enqueue as enqueue_mod
from supervisor.queue import tracecontext as tracing
from supervisor.queue.enqueue import EnqueueError, NewJob, _run, _run_async, _Step, _Steps
from supervisor.queue.queries import query

# Members per counter row, and the most counter rows a batch gets. A member's shard is id %
# shards, and claims take members in id order, so the jobs in flight at once (every worker's
# claimed batch) are consecutive ids: with at least as many shards as jobs in flight, no two
# completions wait for the same row. 128 rows cover, say, 4 processes claiming 32 at a time;
# reading a batch's progress sums them, which costs nothing at that size.
MEMBERS_PER_SHARD = 32
MAX_SHARDS = 128


@dataclass(frozen=True)
class Batch:
    id: int
    job_ids: list[int]


@dataclass(frozen=True)
class BatchStatus:
    id: int
    total: int
    remaining: int
    completed: int
    discarded: int
    cancelled: int
    then_kind: str | None
    then_queue: str | None
    then_job_id: int | None
    created_at: datetime
    finished_at: datetime | None
    shards: int

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "total": self.total,
            "remaining": self.remaining,
            "completed": self.completed,
            "discarded": self.discarded,
            "cancelled": self.cancelled,
            "then": {"kind": self.then_kind, "queue": self.then_queue, "job_id": self.then_job_id}
            if self.then_kind is not None
            else None,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }


def shards_for(total: int) -> int:
    return max(1, min(MAX_SHARDS, -(-total // MEMBERS_PER_SHARD)))


def _batch_steps(jobs: Iterable[NewJob], then: NewJob | None) -> _Steps:
    # Members and the `then` job continue the enqueuer's trace, as enqueue_many's jobs do.
    current = tracing.current_traceparent()
    rows = enqueue_mod._rows(jobs, current)
    then_row = enqueue_mod._validate(then, current) if then is not None else None
    for row in rows:
        if row.unique_key is not None:
            # A duplicate would be another job's id: counting it would end the batch early.
            raise EnqueueError(
                f"job {row.kind!r}: a batch member cannot have a unique_key "
                f"({row.unique_key!r}); enqueue it on its own"
            )
    if then_row is not None and then_row.unique_key is not None:
        raise EnqueueError(
            f"then job {then_row.kind!r}: cannot have a unique_key ({then_row.unique_key!r}); "
            "it is enqueued once per batch anyway"
        )
    if then_row is not None and then_row.run_at is not None:
        raise EnqueueError(
            f"then job {then_row.kind!r}: run_at cannot be known in advance; give a delay "
            "(counted from the moment the batch ends)"
        )
    # The members wake their queues once this enqueue commits (enqueue_many's notify).
    ids = yield from enqueue_mod._enqueue_many_steps(rows, True)
    created = yield _Step(
        "create_batch",
        {
            "ids": list(ids),
            "shards": shards_for(len(ids)),
            "then_kind": then_row.kind if then_row else None,
            "then_queue": then_row.queue if then_row else None,
            "then_args": then_row.args if then_row else None,
            "then_priority": then_row.priority if then_row else None,
            "then_max_attempts": then_row.max_attempts if then_row else None,
            "then_delay": then_row.delay if then_row else None,
            "then_tenant": then_row.tenant if then_row else None,
            "then_traceparent": then_row.traceparent if then_row else None,
            # It joins its key when the batch ends, as an enqueue then would (0068).
            "then_order_key": then_row.order_key if then_row else None,
        },
        "one",
    )
    batch_id, shards_left = int(created[0]), int(created[1])
    if shards_left == 0:
        yield _Step("finish_batch", {"id": batch_id}, "one")
    return Batch(batch_id, list(ids))


def enqueue_batch(
    conn: psycopg.Connection[Any], jobs: Iterable[NewJob], *, then: NewJob | None = None
) -> Batch:
    """Enqueue ``jobs`` as one batch on ``conn`` (inside its current transaction). Once every
    member has ended (completed, discarded or cancelled), ``then`` is enqueued exactly once,
    and its handler's ``job.batch`` holds the counts. Members may not carry a unique_key."""
    return _run(conn, _batch_steps(jobs, then))  # type: ignore[no-any-return]


async def enqueue_batch_async(
    conn: psycopg.AsyncConnection[Any], jobs: Iterable[NewJob], *, then: NewJob | None = None
) -> Batch:
    """``enqueue_batch`` for a ``psycopg.AsyncConnection``."""
    return await _run_async(conn, _batch_steps(jobs, then))  # type: ignore[no-any-return]


def batch_status(conn: psycopg.Connection[Any], batch_id: int) -> BatchStatus:
    """A batch's progress; LookupError when there is no such batch."""
    row = conn.execute(query("batch_status"), {"id": batch_id}).fetchone()
    if row is None:
        raise LookupError(f"no batch {batch_id}")
    return BatchStatus(*row)


async def batch_status_async(conn: psycopg.AsyncConnection[Any], batch_id: int) -> BatchStatus:
    cursor = await conn.execute(query("batch_status"), {"id": batch_id})
    row = await cursor.fetchone()
    if row is None:
        raise LookupError(f"no batch {batch_id}")
    return BatchStatus(*row)


def recent_batches(conn: psycopg.Connection[Any], limit: int = 20) -> list[BatchStatus]:
    return [BatchStatus(*r) for r in conn.execute(query("recent_batches"), {"limit": limit})]
