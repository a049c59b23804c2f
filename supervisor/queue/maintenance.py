"""Recovery and cleanup: rescue expired leases, requeue a dead worker's jobs, purge, replay.

Each function does one bounded piece of work and returns what it did, so the supervisor's
periodic services can log counts and stay silent when nothing changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from supervisor.queue import locks
from supervisor.queue.queries import query

RESCUE_BATCH = 1000
PURGE_BATCH = 5000


@dataclass(frozen=True)
class Moved:
    """A job moved by the rescuer or a requeue: back to available, or discarded."""

    id: int
    queue: str
    kind: str
    state: str
    attempts: int


def _policy_params(max_attempts: Mapping[str, int] | None) -> dict[str, list[Any]]:
    policy = dict(max_attempts or {})
    return {
        "policy_kinds": list(policy),
        "policy_max_attempts": list(policy.values()),
    }


def requeue_worker(
    conn: psycopg.Connection[Any],
    worker: str,
    reason: str,
    *,
    spent: Sequence[int] | None = None,
    keep: Sequence[int] = (),
    started: Sequence[int] = (),
    max_attempts: Mapping[str, int] | None = None,
    external_kinds: Sequence[str] = (),
    history: bool = False,
) -> list[Moved]:
    """Give back every job held by ``worker`` except those in ``keep``: the worker is gone,
    or (a live worker after a reconnect) it holds the others on paper only.

    Jobs in ``spent`` were running when it died and keep their attempt spent (one of them may be
    what killed it); ``None`` means every job counts, when nobody knows which were running.
    The others were only claimed and get their attempt back. Jobs in ``started`` ran without
    spending (interrupted, or finished with the outcome unwritten). Of the jobs that ran, those
    of ``external_kinds`` (or of kinds any live supervisor declares external) end 'unknown'.
    """
    params = {
        "worker": worker,
        "reason": reason,
        "history": history,
        "spent": list(spent) if spent is not None else None,
        "started": list(started),
        "keep": list(keep),
        "external_kinds": list(external_kinds),
        **_policy_params(max_attempts),
    }
    rows = conn.execute(query("requeue_worker"), params).fetchall()
    return [Moved(*row) for row in rows]


def rescue_batch(
    conn: psycopg.Connection[Any],
    *,
    limit: int = RESCUE_BATCH,
    max_attempts: Mapping[str, int] | None = None,
    external_kinds: Sequence[str] = (),
    history: bool = False,
) -> list[Moved]:
    """Return up to ``limit`` jobs whose lease expired to available (or discarded)."""
    rows = conn.execute(
        query("rescue"),
        {
            "limit": limit,
            "history": history,
            "external_kinds": list(external_kinds),
            **_policy_params(max_attempts),
        },
    ).fetchall()
    return [Moved(*row) for row in rows]


def try_lock(conn: psycopg.Connection[Any], key: int) -> bool:
    """A session advisory lock, held until ``unlock`` or the session ends (direct sessions
    only: behind a transaction pooler use ``claim_turn``)."""
    row = conn.execute(query("try_advisory_lock"), {"key": key}).fetchone()
    return bool(row and row[0])


def unlock(conn: psycopg.Connection[Any], key: int) -> None:
    conn.execute(query("advisory_unlock"), {"key": key})


def _try_xact_lock(conn: psycopg.Connection[Any], key: int) -> bool:
    row = conn.execute(query("try_advisory_xact_lock"), {"key": key}).fetchone()
    return bool(row and row[0])


def claim_run(
    conn: psycopg.Connection[Any], task: str, run_by: str, interval: float
) -> datetime | None:
    """Record that ``run_by`` runs the singleton ``task`` now, unless some supervisor ran it
    within 90% of ``interval`` seconds; the run's start when the caller should run it, else
    None. Every run claimed is also logged in pgq.maintenance_runs, where a fleet's duties can
    be audited."""
    row = conn.execute(
        query("claim_maintenance_run"), {"task": task, "run_by": run_by, "interval": interval * 0.9}
    ).fetchone()
    return row[0] if row is not None else None


def claim_turn(
    conn: psycopg.Connection[Any], key: int, task: str, run_by: str, interval: float
) -> datetime | None:
    """Whether this supervisor runs ``task`` now (the run's start, or None): in one
    transaction, the task's advisory lock (transaction-scoped, so no session state: it works
    through a transaction pooler and is never left held) and ``claim_run``."""
    with conn.transaction():
        if not _try_xact_lock(conn, key):
            return None
        return claim_run(conn, task, run_by, interval)


def run_is_current(
    conn: psycopg.Connection[Any], task: str, run_by: str, started_at: datetime
) -> bool:
    """Whether the run of ``task`` that ``run_by`` claimed at ``started_at`` is still the
    latest one: False once another supervisor has claimed the next."""
    params = {"task": task, "run_by": run_by, "started_at": started_at}
    return conn.execute(query("maintenance_run_current"), params).fetchone() is not None


def forget_maintenance_runs(conn: psycopg.Connection[Any], older_than: datetime) -> int:
    """Trim the log of maintenance runs; returns how many rows went."""
    return conn.execute(query("purge_maintenance_runs"), {"older_than": older_than}).rowcount


def rescue(
    conn: psycopg.Connection[Any],
    *,
    batch: int = RESCUE_BATCH,
    max_attempts: Mapping[str, int] | None = None,
    external_kinds: Sequence[str] = (),
    history: bool = False,
) -> list[Moved] | None:
    """Rescue every expired lease in bounded batches, each its own transaction under the
    rescuer's transaction-scoped advisory lock (no session state: pooler-safe). Returns None
    when another rescuer holds the lock (it is doing this work right now). The supervisor's
    rescuer does the same one batch per turn of its loop (``rescue_slice``)."""
    moved: list[Moved] = []
    first = True
    while True:
        with conn.transaction():
            if not _try_xact_lock(conn, locks.RESCUE):
                return None if first else moved  # another rescuer took over between batches
            chunk = rescue_batch(
                conn,
                limit=batch,
                max_attempts=max_attempts,
                external_kinds=external_kinds,
                history=history,
            )
        first = False
        moved.extend(chunk)
        if len(chunk) < batch:
            return moved


@dataclass(frozen=True)
class RescueSlice:
    """One batch of a rescuer run: the jobs it moved, and whether the run is still current
    (False: another supervisor holds the rescuer's lock or has started the next run)."""

    moved: list[Moved]
    current: bool


def rescue_slice(
    conn: psycopg.Connection[Any],
    run_by: str,
    started_at: datetime,
    *,
    limit: int = RESCUE_BATCH,
    max_attempts: Mapping[str, int] | None = None,
    external_kinds: Sequence[str] = (),
    history: bool = False,
) -> RescueSlice:
    """One batch of the rescuer run that ``run_by`` claimed at ``started_at`` (``claim_turn``
    on "rescue"), in its own transaction under the rescuer's advisory lock, and only while that
    run is still the latest: a run spread over many turns never overlaps the next one."""
    with conn.transaction():
        if not _try_xact_lock(conn, locks.RESCUE) or not run_is_current(
            conn, "rescue", run_by, started_at
        ):
            return RescueSlice([], current=False)
        moved = rescue_batch(
            conn,
            limit=limit,
            max_attempts=max_attempts,
            external_kinds=external_kinds,
            history=history,
        )
    return RescueSlice(moved, current=True)


def purge_discarded_slice(
    conn: psycopg.Connection[Any],
    older_than: datetime,
    *,
    limit: int = PURGE_BATCH,
    kind: str | None = None,
    queue: str | None = None,
) -> int:
    """Delete up to ``limit`` dead letters and cancelled jobs that finished before
    ``older_than``; returns how many.

    ``kind`` and ``queue`` narrow the purge to one kind or queue; None means any. Fewer than
    ``limit`` deleted means none are left.
    """
    params = {"older_than": older_than, "limit": limit, "kind": kind, "queue": queue}
    return conn.execute(query("purge_discarded"), params).rowcount


def purge_discarded(
    conn: psycopg.Connection[Any],
    older_than: datetime,
    *,
    batch: int = PURGE_BATCH,
    kind: str | None = None,
    queue: str | None = None,
) -> int:
    """Delete dead letters and cancelled jobs that finished before ``older_than``, in slices
    of ``batch``; returns how many. ``kind`` and ``queue`` narrow it; None means any."""
    total = 0
    while True:
        deleted = purge_discarded_slice(conn, older_than, limit=batch, kind=kind, queue=queue)
        total += deleted
        if deleted < batch:
            return total


def purge_dead_letters_slice(
    conn: psycopg.Connection[Any],
    older_than: datetime,
    *,
    limit: int = PURGE_BATCH,
    kind: str | None = None,
    queue: str | None = None,
) -> int:
    """Delete up to ``limit`` dead letters (discarded jobs only, not cancelled ones) that
    finished before ``older_than``; returns how many. What an operator's purge deletes, while
    the nightly purge (purge_discarded_slice) also clears old cancelled jobs."""
    params = {"older_than": older_than, "limit": limit, "kind": kind, "queue": queue}
    return conn.execute(query("purge_dead_letters"), params).rowcount


def count_dead_letters(
    conn: psycopg.Connection[Any],
    older_than: datetime,
    *,
    kind: str | None = None,
    queue: str | None = None,
) -> int:
    """How many dead letters purge_dead_letters_slice would delete, in all (a dry run)."""
    params = {"kind": kind, "queue": queue, "finished_before": older_than, "finished_after": None}
    row = conn.execute(query("count_discarded"), params).fetchone()
    return int(row[0]) if row else 0


def ensure_history_partitions(conn: psycopg.Connection[Any], days_ahead: int = 2) -> int:
    row = conn.execute(query("history_partitions"), {"days_ahead": days_ahead}).fetchone()
    return int(row[0]) if row else 0


def purge_results_slice(
    conn: psycopg.Connection[Any], older_than: datetime, *, limit: int = PURGE_BATCH
) -> int:
    """Delete up to ``limit`` kept results (pgq.job_results) older than ``older_than``."""
    params = {"older_than": older_than, "limit": limit}
    return conn.execute(query("purge_results"), params).rowcount


def purge_batches_slice(
    conn: psycopg.Connection[Any], older_than: datetime, *, limit: int = PURGE_BATCH
) -> int:
    """Delete up to ``limit`` batches that finished before ``older_than`` (with counters)."""
    params = {"older_than": older_than, "limit": limit}
    return conn.execute(query("purge_batches"), params).rowcount


def drop_history_partition(conn: psycopg.Connection[Any], older_than: datetime) -> int:
    """Drop the oldest daily history partition that ended before ``older_than``; returns 1, or
    0 when none is left. Raises ``psycopg.errors.LockNotAvailable`` when completions kept the
    table busy for the function's lock timeout: try again later."""
    row = conn.execute(query("drop_history"), {"older_than": older_than}).fetchone()
    return int(row[0]) if row else 0


def purge_history_default_slice(
    conn: psycopg.Connection[Any], older_than: datetime, *, limit: int = PURGE_BATCH
) -> int:
    """Delete up to ``limit`` old rows of the default history partition; returns how many."""
    params = {"older_than": older_than, "limit": limit}
    return conn.execute(query("purge_history_default"), params).rowcount


def purge_history(
    conn: psycopg.Connection[Any], older_than: datetime, *, batch: int = PURGE_BATCH
) -> int:
    """Drop every daily partition older than ``older_than`` and trim the default partition, all
    at once; returns the partitions dropped. (The supervisor's purge does this in slices.)"""
    dropped = 0
    while drop_history_partition(conn, older_than):
        dropped += 1
    while purge_history_default_slice(conn, older_than, limit=batch) >= batch:
        pass
    return dropped


@dataclass(frozen=True)
class ReplayFilter:
    ids: Sequence[int] | None = None
    kind: str | None = None
    queue: str | None = None
    finished_before: datetime | None = None
    everything: bool = False

    def is_empty(self) -> bool:
        return (
            self.ids is None
            and self.kind is None
            and self.queue is None
            and self.finished_before is None
        )


@dataclass(frozen=True)
class Replayed:
    """What a replay did: the dead letters put back (id, queue), and the ones kept dead because
    their unique key is held again (id, key)."""

    jobs: list[tuple[int, str]]
    held: list[tuple[int, str]]

    @property
    def ids(self) -> list[int]:
        return [job_id for job_id, _ in self.jobs]


def replay(conn: psycopg.Connection[Any], which: ReplayFilter) -> Replayed:
    """Put matching dead letters back in their queues with attempts reset.

    An empty filter replays nothing unless ``everything`` is set: replaying the whole dead-letter
    queue must be asked for by name. A dead letter whose unique key is held again stays dead.
    """
    if which.is_empty() and not which.everything:
        raise ValueError("replay needs ids, a kind, a queue or an age; or say everything=True")
    rows = conn.execute(
        query("replay"),
        {
            "ids": list(which.ids) if which.ids is not None else None,
            "kind": which.kind,
            "queue": which.queue,
            "finished_before": which.finished_before,
        },
    ).fetchall()
    result = Replayed(
        jobs=[(int(job_id), queue) for job_id, queue, _, done in rows if done],
        held=[(int(job_id), key) for job_id, _, key, done in rows if not done],
    )
    queues = sorted({queue for _, queue in result.jobs})
    if queues:
        conn.execute(query("notify_queues"), {"queues": queues})
    return result


@dataclass(frozen=True)
class TableHealth:
    live_tuples: int
    dead_tuples: int
    last_autovacuum: datetime | None
    last_vacuum: datetime | None
    autovacuum_count: int
    oldest_available_age: float | None


def table_health(conn: psycopg.Connection[Any]) -> TableHealth | None:
    row = conn.execute(query("table_health")).fetchone()
    if row is None:
        return None
    live, dead, last_auto, last_manual, count, oldest = row
    return TableHealth(
        int(live),
        int(dead),
        last_auto,
        last_manual,
        int(count),
        float(oldest) if oldest is not None else None,
    )


@dataclass(frozen=True)
class QueueStats:
    queue: str
    available: int
    scheduled: int
    running: int
    discarded: int
    oldest_ready_age: float
    cancelled: int = 0
    paused: bool = False
    unknown: int = 0  # outcome unknown (effects: external), waiting for a hook or an operator
    waiting: int = 0  # workflow steps whose parents have not all ended (not due, not claimable)


def queue_stats(conn: psycopg.Connection[Any]) -> list[QueueStats]:
    """Per queue figures; a paused queue is listed even when it holds no jobs."""
    return queue_stats_from_rows(conn.execute(query("queue_stats")).fetchall())


def queue_stats_from_rows(rows: Sequence[Sequence[Any]]) -> list[QueueStats]:
    """The rows of the queue_stats query, typed or as text (read without waiting for them)."""
    return [
        QueueStats(
            str(q),
            int(a),
            int(s),
            int(r),
            int(d),
            float(age),
            int(c),
            _bool(paused),
            int(u),
            int(w),
        )
        for q, a, s, r, d, c, age, paused, u, w in rows
    ]


def _bool(value: Any) -> bool:
    """A boolean column, typed or as the server's text ('t' or 'f')."""
    return value in (True, "t") if isinstance(value, str | bool) else bool(value)
