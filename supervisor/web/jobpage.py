"""What a job's page shows: the job as pgq.jobs holds it, every error kept, and its outcomes in
pgq.job_history, which is all that remains of a completed job (its row is deleted at once).

One read-only snapshot: the job by primary key, then its history rows by the job_history_id
index (sql/dashboard.sql, web_job_history).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from supervisor.crypto import mask
from supervisor.queue.control import Errors, JobDetail, errors_of
from supervisor.queue.costs import cost_query
from supervisor.queue.progress import progress_query
from supervisor.queue.queries import query
from supervisor.shared.redact import redact, shown
from supervisor.views.aging import AGING_QUERY, aging_of
from supervisor.views.order import ORDER_QUERY, order_of
from supervisor.web.reads import dashboard_query, fetch, server_now, snapshot

# History rows shown for one job: one per time it finished (a replayed dead letter finishes
# again), so a handful at most in practice.
HISTORY_ROWS = 10


@dataclass(frozen=True)
class Finished:
    """One row of pgq.job_history for this job."""

    outcome: str
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime
    errors: Errors
    queue: str
    kind: str


@dataclass(frozen=True)
class Kept:
    """What the handler returned (pgq.job_results)."""

    value: Any
    finished_at: datetime | None


@dataclass(frozen=True)
class JobView:
    now: datetime
    job: JobDetail | None  # None: not in pgq.jobs (completed, or purged)
    history: list[Finished]  # newest first
    result: Kept | None = None
    progress: dict[str, Any] | None = None  # what its handler last said (pgq.job_progress)
    costs: list[dict[str, Any]] = field(default_factory=list)  # each attempt's, in order
    # Its order key and what it holds the job to, as `jobs show` reads it (views/order.py).
    order: dict[str, Any] | None = None
    # Its aging level while it waits to be claimed in a queue that ages (views/aging.py).
    aging: dict[str, Any] | None = None

    @property
    def errors(self) -> Errors:
        """The errors to show: the job's own, or, once it is gone, its last history row's."""
        if self.job is not None:
            return errors_of(self.job.errors)
        return self.history[0].errors if self.history else Errors([])


async def read(
    pool: AsyncConnectionPool[Any],
    job_id: int,
    *,
    redacted: Collection[str] = (),
    aging_period: Callable[[str], float] | None = None,
) -> JobView:
    """The job's view, its arguments' ``redacted`` keys already replaced (web.redact), and
    their values out of its error texts. ``aging_period``: the config's seconds per level of a
    queue (none: no aging shown)."""
    async with snapshot(pool) as conn:
        now = await server_now(conn)
        async with conn.cursor() as cur:
            await cur.execute(query("job_detail"), {"id": job_id})
            row = await cur.fetchone()
        job = JobDetail(*row) if row is not None else None
        if job is not None:  # envelopes as [encrypted: key ID] (supervisor/crypto)
            job = replace(job, args=mask(job.args))
        if job is not None and redacted:
            job = shown(job, redacted)
        params = {
            "id": job_id,
            "since": job.created_at if job is not None else None,
            "limit": HISTORY_ROWS,
        }
        rows = await fetch(conn, dashboard_query("web_job_history"), params)
        kept = await fetch(conn, query("job_result"), {"id": job_id})
        said = await fetch(conn, progress_query("read_progress"), {"ids": [job_id]})
        spent = await fetch(conn, cost_query("job_costs"), {"id": job_id})
        order, aging = None, None
        if job is not None:
            order = order_of(job_id, await _one(conn, query(ORDER_QUERY), job_id))
            every = aging_period(job.queue) if aging_period is not None else 0.0
            if every > 0:
                aging = aging_of(await _one(conn, query(AGING_QUERY), job_id), every, now)
    history = [Finished(**{**r, "errors": errors_of(r["errors"])}) for r in rows]
    # What a handler returned may carry a redacted key's value too (a card echoed back).
    result = Kept(redact(kept[0]["result"], redacted), kept[0]["finished_at"]) if kept else None
    return JobView(now, job, history, result, said[0] if said else None, spent, order, aging)


async def _one(conn: Any, sql: str, job_id: int) -> Any:
    """The row (a tuple, as the sync readers get it) of a statement about job ``job_id``."""
    async with conn.cursor() as cur:
        await cur.execute(sql, {"id": job_id})
        return await cur.fetchone()
