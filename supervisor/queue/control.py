"""Job control: cancel jobs, pause and resume queues, retry a waiting job now, inspect jobs.

Every function takes a sync psycopg connection and runs in its current transaction (the
command line and the web dashboard call them through their own connections or a pool), and
returns a value that says what happened, so a caller can tell a cancelled job from one that had
already finished.

A waiting job is cancelled at once. A running job belongs to its worker's fence, so it only
gets a cancel request; the master that runs it stops it within about a second (its child's
process group, as a timeout would, or cooperatively in a threaded pool where the handler's
``job.cancelled()`` turns true), and the write that ends the claim makes it ``cancelled``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from supervisor.queue.queries import query

# Every state a job row can hold; 'scheduled' has rows once the scheduling migration is in;
# 'waiting': a workflow step waiting for its parents (0050) or a follower behind its order key's
# earlier job (0066).
STATES = ("available", "scheduled", "waiting", "running", "discarded", "cancelled", "unknown")
WAITING_STATES = ("available", "scheduled")


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did, id by id."""

    cancelled: list[int] = field(default_factory=list)  # were waiting: cancelled now
    requested: list[int] = field(default_factory=list)  # running: their masters stop them
    finished: dict[int, str] = field(default_factory=dict)  # already over: id -> its state
    missing: list[int] = field(default_factory=list)  # no such job (completed, purged, never)


def _job_ids(job_id_or_ids: int | Iterable[int]) -> list[int]:
    ids = [job_id_or_ids] if isinstance(job_id_or_ids, int) else list(job_id_or_ids)
    for job_id in ids:
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
            raise ValueError(f"a job id must be a positive integer, not {job_id!r}")
    return ids


def cancel(
    conn: psycopg.Connection[Any], job_id_or_ids: int | Iterable[int], *, history: bool = False
) -> Cancelled:
    """Cancel one job or many; see the module docstring for what happens to a running one.

    With ``history``, a waiting job's cancellation is written to pgq.job_history like the
    supervisor's own outcomes (running ones are recorded when their claim ends).
    """
    ids = _job_ids(job_id_or_ids)
    if not ids:
        return Cancelled()
    rows = conn.execute(query("cancel_jobs"), {"ids": ids, "history": history}).fetchall()
    result = Cancelled()
    for job_id, what in rows:
        if what == "cancelled now":
            result.cancelled.append(job_id)
        elif what == "cancel requested":
            result.requested.append(job_id)
        else:
            result.finished[job_id] = what
    found = {row[0] for row in rows}
    result.missing.extend(i for i in dict.fromkeys(ids) if i not in found)
    return result


def cancel_requested(conn: psycopg.Connection[Any], job_id: int, lease_id: int) -> bool:
    """Whether a claim (id, lease_id) still ours has been asked to stop."""
    row = conn.execute(query("cancel_requested"), {"id": job_id, "lease_id": lease_id}).fetchone()
    return bool(row and row[0])


@dataclass(frozen=True)
class Stops:
    """Claimed jobs not started yet that must not start."""

    cancelled: frozenset[int] = frozenset()
    paused: frozenset[int] = frozenset()  # their queue was paused (a cancel wins over a pause)


def unstarted_stops(conn: psycopg.Connection[Any], claims: Iterable[tuple[int, int]]) -> Stops:
    """Of these claims (id, lease_id), still ours, the ones cancelled or on a paused queue."""
    pairs = list(claims)
    if not pairs:
        return Stops()
    rows = conn.execute(
        query("unstarted_stops"),
        {"ids": [i for i, _ in pairs], "lease_ids": [lease for _, lease in pairs]},
    ).fetchall()
    return Stops(
        cancelled=frozenset(job_id for job_id, cancelled, _ in rows if cancelled),
        paused=frozenset(job_id for job_id, cancelled, paused in rows if paused and not cancelled),
    )


@dataclass(frozen=True)
class CancelRequest:
    id: int
    worker: str
    kind: str
    queue: str


def cancel_requests(conn: psycopg.Connection[Any], workers: list[str]) -> list[CancelRequest]:
    """The running jobs of these workers that someone asked to cancel."""
    if not workers:
        return []
    rows = conn.execute(query("cancel_requests"), {"workers": workers}).fetchall()
    return [CancelRequest(*row) for row in rows]


def _check_queue(queue: object) -> str:
    if not isinstance(queue, str) or not queue.strip():
        raise ValueError(f"a queue name must be a non-empty string, not {queue!r}")
    return queue


def pause_queue(conn: psycopg.Connection[Any], queue: str) -> bool:
    """Pause ``queue`` on every host from the next claim on; running jobs finish.

    Returns False when it was paused already. A queue may be paused before it has any jobs.
    """
    row = conn.execute(query("pause_queue"), {"queue": _check_queue(queue)}).fetchone()
    return row is not None


def resume_queue(conn: psycopg.Connection[Any], queue: str) -> bool:
    """Resume a paused queue and wake its workers; False when it was not paused."""
    row = conn.execute(query("resume_queue"), {"queue": _check_queue(queue)}).fetchone()
    return row is not None


@dataclass(frozen=True)
class Pause:
    queue: str
    paused_at: datetime
    paused_by: str


def paused_queues(conn: psycopg.Connection[Any]) -> list[Pause]:
    return [Pause(*row) for row in conn.execute(query("paused_queues")).fetchall()]


@dataclass(frozen=True)
class RetriedNow:
    id: int
    queue: str
    previous_state: str
    previous_run_at: datetime


def retry_now(conn: psycopg.Connection[Any], job_id: int) -> RetriedNow | None:
    """Make a waiting job (in its retry backoff, or scheduled) due now, attempts kept.

    Returns None when the job is not waiting: running, finished, or gone (``show_job`` says
    which). A dead letter goes back with ``dlq replay``.
    """
    (job_id,) = _job_ids(job_id)
    row = conn.execute(query("retry_now"), {"id": job_id}).fetchone()
    if row is None:
        return None
    queue, state, run_at, _ = row
    return RetriedNow(job_id, queue, state, run_at)


@dataclass(frozen=True)
class JobRow:
    """A job as `jobs list` shows it."""

    id: int
    queue: str
    kind: str
    state: str
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    locked_by: str | None
    cancel_requested_at: datetime | None
    last_error: str | None


def list_jobs(
    conn: psycopg.Connection[Any],
    *,
    state: str | None = None,
    queue: str | None = None,
    kind: str | None = None,
    args: Mapping[str, Any] | None = None,
    limit: int = 50,
) -> list[JobRow]:
    """Jobs in any state, newest first; each filter is optional (``args``: a JSON object the
    job's arguments contain)."""
    if state is not None and state not in STATES:
        raise ValueError(f"unknown job state {state!r}; states are {', '.join(STATES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, not {limit!r}")
    rows = conn.execute(
        query("list_jobs"),
        {
            "state": state,
            "queue": queue,
            "kind": kind,
            "args": Jsonb(args) if args is not None else None,
            "limit": limit,
        },
    ).fetchall()
    return [JobRow(*row) for row in rows]


@dataclass(frozen=True)
class JobDetail:
    """Everything about one job, and where it runs when it runs."""

    id: int
    queue: str
    kind: str
    state: str
    args: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    unique_key: str | None
    last_error: str | None
    created_at: datetime
    run_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    locked_by: str | None
    lease_until: datetime | None
    cancel_requested_at: datetime | None
    host: str | None
    pool: str | None
    slot: int | None
    pid: int | None
    # Every error kept, oldest first (see sql/migrations/0009_error_history.sql); None when the
    # job never failed.
    errors: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class KeptError:
    """One entry of a job's errors (sql/migrations/0009_error_history.sql)."""

    seq: int  # the job's nth error, counted from 1 and never restarted
    attempt: int
    at: datetime
    error: str


@dataclass(frozen=True)
class Errors:
    """A job's errors as kept, oldest first, and how many older ones the cap dropped."""

    kept: list[KeptError]

    @property
    def dropped(self) -> int:
        return self.kept[0].seq - 1 if self.kept else 0

    @property
    def newest_first(self) -> list[KeptError]:
        return self.kept[::-1]


def errors_of(raw: list[dict[str, Any]] | None) -> Errors:
    return Errors(
        [
            KeptError(int(e["seq"]), int(e["attempt"]), datetime.fromisoformat(e["at"]), e["error"])
            for e in raw or []
        ]
    )


def show_job(conn: psycopg.Connection[Any], job_id: int) -> JobDetail | None:
    """One job whatever its state, or None when there is no such job (a completed job is
    deleted: only pgq.job_history remembers it)."""
    (job_id,) = _job_ids(job_id)
    row = conn.execute(query("job_detail"), {"id": job_id}).fetchone()
    return JobDetail(*row) if row is not None else None
