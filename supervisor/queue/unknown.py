"""Results kept from handlers, and the jobs whose outcome is unknown.

A job of a kind declared ``effects: external`` whose attempt ended without a recorded outcome
waits in state 'unknown' (see sql/migrations/0015_outcome_unknown.sql). It leaves that state
only by a resolution: 'completed' (the effect happened), 'retry' (it did not: run it again) or
'discarded', answered by the kind's reconcile hook (supervisor/services/reconciler.py) or by an
operator (``jobs resolve``, the dashboard). Every resolution is fenced on the state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from supervisor.queue.queries import query

RESOLUTIONS = ("completed", "retry", "discarded")


def result(conn: psycopg.Connection[Any], job_id: int) -> Any:
    """What job ``job_id``'s handler returned (decoded JSON); LookupError when the job has
    not completed, returned nothing, or its result was purged."""
    row = conn.execute(query("job_result"), {"id": job_id}).fetchone()
    if row is None:
        raise LookupError(f"no result kept for job {job_id}")
    return row[0]


async def result_async(conn: psycopg.AsyncConnection[Any], job_id: int) -> Any:
    """``result`` for a ``psycopg.AsyncConnection``."""
    cursor = await conn.execute(query("job_result"), {"id": job_id})
    row = await cursor.fetchone()
    if row is None:
        raise LookupError(f"no result kept for job {job_id}")
    return row[0]


@dataclass(frozen=True)
class UnknownOutcome:
    """What a reconcile hook receives: enough to ask the outside system about the attempt."""

    id: int
    kind: str
    queue: str
    args: dict[str, Any]
    attempt: int
    max_attempts: int
    unique_key: str | None
    created_at: datetime
    last_error: str | None

    @property
    def idempotency_key(self) -> str:
        """The key the handler gave the outside system (JobContext.idempotency_key)."""
        return f"pgq-job-{self.id}"


@dataclass(frozen=True)
class Resolved:
    id: int
    queue: str
    kind: str
    # 'completed' (deleted), 'available' (retry) or 'discarded'; 'held': a retry not applied,
    # because job ``holder`` holds the job's unique key (the job stays unknown).
    state: str
    holder: int | None = None


def resolve(
    conn: psycopg.Connection[Any],
    ids: list[int],
    resolution: str,
    *,
    history: bool = False,
    token: datetime | None = None,
) -> list[Resolved]:
    """End the 'unknown' state of ``ids`` as ``resolution``; returns the jobs it resolved (a
    job no longer unknown, or, with ``token``, taken by another round since, is left alone).

    A ``retry`` of a job whose unique key another job holds is refused: the job stays unknown
    and is returned with state 'held' and that job's id as ``holder``. Since migration 0041 an
    unknown job keeps its key, so only a database whose duplicates predate it meets this."""
    if resolution not in RESOLUTIONS:
        raise ValueError(f"resolution must be one of {', '.join(RESOLUTIONS)}, not {resolution!r}")
    rows = conn.execute(
        query("resolve_unknown"),
        {"ids": list(ids), "resolution": resolution, "history": history, "token": token},
    ).fetchall()
    return [Resolved(*row) for row in rows]


@dataclass(frozen=True)
class UnknownJob:
    id: int
    queue: str
    kind: str
    attempts: int
    max_attempts: int
    run_at: datetime
    started_at: datetime | None
    last_error: str | None


def list_unknown(conn: psycopg.Connection[Any], limit: int = 100) -> list[UnknownJob]:
    return [UnknownJob(*r) for r in conn.execute(query("list_unknown"), {"limit": limit})]


def count_unknown(conn: psycopg.Connection[Any]) -> list[tuple[str, str, int]]:
    """(queue, kind, jobs) for every queue and kind with unknown jobs."""
    return [tuple(r) for r in conn.execute(query("count_unknown"))]  # type: ignore[misc]
