"""What the dashboard's pages show, read on async connections with bounded, index-served queries.

Nothing here counts a whole table: queues are found by a loose index scan, waiting jobs are
counted up to ``CAP`` (past it a figure is a lower bound, flagged ``capped``), running jobs come
from the small jobs_lease index, dead letters from the newest ``CAP`` of jobs_discarded. The
queries live in sql/dashboard.sql. Each page reads in one read-only REPEATABLE READ transaction,
so its figures agree with each other and every age is measured on the server's clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from supervisor.config import Config, PoolConfig
from supervisor.queue import limits
from supervisor.queue.batches import BatchStatus
from supervisor.queue.costs import cost_query
from supervisor.queue.limits import LimitUse
from supervisor.queue.progress import progress_query
from supervisor.queue.queries import parse, query, sql_text
from supervisor.queue.scaling import scaling_query
from supervisor.queue.scheduled import ScheduleRecord
from supervisor.queue.unknown import UnknownJob
from supervisor.views import schedules
from supervisor.views.schedules import ScheduleRow
from supervisor.views.status import (
    COST_WINDOW,
    UNHANDLED_SAMPLE,
    QueueRow,
    Status,
    SupervisorView,
    add_progress,
    running_job_ids,
    supervisors_from,
    unhandled_kinds,
)
from supervisor.web.throughput import MINUTES, OUTCOMES, Throughput

# Counting stops here, so a page's cost stays flat whatever the table holds; past it the
# overview shows the planner's estimate ("~ 83,000") or "1,000+".
CAP = 1_000
# At most this many queues on the overview (found by a loose index scan, one probe each).
MAX_QUEUES = 500
# A queue page or dead-letter page reads at most this many index entries before filtering, so a
# filter that matches little cannot turn into a scan of the whole backlog.
SCAN = 10_000
PAGE_SIZE = 50
# Unknown jobs and batches listed on the overview (each a link to its page).
UNKNOWN_ROWS = 20
BATCH_ROWS = 10


@cache
def dashboard_query(name: str) -> str:
    queries = parse(sql_text("dashboard.sql"))
    try:
        return queries[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/dashboard.sql") from None


@asynccontextmanager
async def snapshot(pool: AsyncConnectionPool[Any]) -> AsyncIterator[AsyncConnection[Any]]:
    """A pooled connection inside one read-only REPEATABLE READ transaction."""
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield conn


async def fetch(conn: AsyncConnection[Any], sql: str, params: Any = None) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(sql, params)
        return await cur.fetchall()


async def server_now(conn: AsyncConnection[Any]) -> datetime:
    rows = await fetch(conn, query("clock"))
    moment: datetime = rows[0]["now"]
    return moment


@dataclass
class QueueFigures:
    """One overview row: the same figures as `status`, with which of them are lower bounds."""

    row: QueueRow
    # The states whose count stopped at CAP ("available", "scheduled", ...).
    capped: set[str] = field(default_factory=set)
    # The planner's estimate per state, from the statistics ANALYZE sampled.
    estimates: dict[str, int] = field(default_factory=dict)
    # Jobs finished per minute, oldest minute first: {"completed": [...], "discarded": [...]}.
    per_minute: dict[str, list[int]] = field(
        default_factory=lambda: {outcome: [0] * MINUTES for outcome in OUTCOMES}
    )

    @property
    def name(self) -> str:
        return self.row.queue

    def shown(self, state: str) -> str:
        """A count for people: exact, or past the cap the estimate (when it is larger)."""
        count: int = getattr(self.row, state)
        if state not in self.capped:
            return f"{count:,}"
        estimate = self.estimates.get(state, 0)
        return f"~{estimate:,}" if estimate > CAP else f"{CAP:,}+"

    @property
    def finished_last_hour(self) -> dict[str, int]:
        return {outcome: sum(counts) for outcome, counts in self.per_minute.items()}


@dataclass
class Overview:
    now: datetime
    queues: list[QueueFigures]
    pools: list[PoolConfig] | None
    supervisors: list[SupervisorView]
    schedules: list[ScheduleRow]
    attention: list[str]
    history: bool
    unknown: list[UnknownJob] = field(default_factory=list)
    batches: list[BatchStatus] = field(default_factory=list)
    top_kinds: list[dict[str, Any]] = field(default_factory=list)  # by CPU, the last hour


async def overview(
    pool: AsyncConnectionPool[Any], config: Config | None, database: str, throughput: Throughput
) -> Overview:
    async with snapshot(pool) as conn:
        now = await server_now(conn)
        figures: dict[str, QueueFigures] = {}

        def queue(name: str) -> QueueFigures:
            return figures.setdefault(name, QueueFigures(QueueRow(name)))

        if config is not None:
            for p in config.pools.values():
                for name in p.queues:
                    queue(name).row.pools.append(p.name)
        for r in await fetch(conn, query("paused_queues")):
            queue(r["queue"]).row.paused = True
        for r in await fetch(conn, dashboard_query("web_queues_waiting"), {"limit": MAX_QUEUES}):
            queue(r["queue"])
        for r in await fetch(conn, dashboard_query("web_sampled_counts"), {"cap": CAP}):
            q = queue(r["queue"])
            setattr(q.row, r["state"], int(r["jobs"]))
            if int(r["seen"]) > CAP:
                q.capped.add(r["state"])
        params = {"queues": sorted(figures), "cap": CAP}
        for r in await fetch(conn, dashboard_query("web_waiting"), params):
            q = queue(r["queue"])
            q.row.available = int(r["due"])
            if r["capped"]:
                q.capped.add("available")
            q.row.oldest_ready_age = r["oldest_wait"]
        if any(q.capped for q in figures.values()):
            for r in await fetch(conn, dashboard_query("web_estimates")):
                if r["queue"] in figures:
                    figures[r["queue"]].estimates[r["state"]] = int(r["estimate"])
        await throughput.refresh(conn, now)
        for name, series in throughput.per_minute(now).items():
            queue(name).per_minute = series
        supervisors = await read_supervisors(conn)
        records = {
            r["name"]: ScheduleRecord(r["name"], r["last_tick"], r["last_job_id"])
            for r in await fetch(conn, query("list_schedules"))
        }
        unknown_counts = [
            (r["queue"], r["kind"], int(r["count"]))
            for r in await fetch(conn, query("count_unknown"))
        ]
        unknown = [
            UnknownJob(**r)
            for r in await fetch(conn, query("list_unknown"), {"limit": UNKNOWN_ROWS})
        ]
        unhandled: list[tuple[str, str, int, int]] = []
        if config is not None:  # without the YAML nobody here knows which kinds are served
            params = {"kinds": sorted(config.handlers), "cap": UNHANDLED_SAMPLE}
            rows = await fetch(conn, query("unhandled_kinds"), params)
            unhandled = unhandled_kinds(
                (r["queue"], r["kind"], r["waiting"], r["dead"]) for r in rows
            )
        batches = [
            BatchStatus(**r)
            for r in await fetch(conn, query("recent_batches"), {"limit": BATCH_ROWS})
        ]
        top_kinds = await fetch(
            conn, cost_query("cost_by_kind"), {"seconds": COST_WINDOW, "limit": 10}
        )
    queues = [figures[name] for name in sorted(figures)]
    status = Status(
        generated_at=now,
        database=database,
        config_path=config.path if config else "",
        history=config.history.enabled if config else True,
        queues=[q.row for q in queues],
        pools=list(config.pools.values()) if config else [],
        supervisors=supervisors,
        schedules=schedules.rows(config, records, now) if config else [],
        unknown=unknown_counts,
        unhandled=unhandled,
        hooked=frozenset(k for k, p in config.jobs.items() if p.reconcile)
        if config
        else frozenset(),
    )
    attention = status.warnings()
    if config is None:
        # Without the YAML nobody here knows which queues the pools serve.
        attention = [w for w in attention if "no pool in" not in w]
    return Overview(
        now=now,
        queues=queues,
        pools=status.pools if config else None,
        supervisors=supervisors,
        schedules=status.schedules,
        attention=attention,
        history=status.history,
        unknown=unknown,
        batches=batches,
        top_kinds=top_kinds,
    )


async def read_supervisors(conn: AsyncConnection[Any]) -> list[SupervisorView]:
    async with conn.cursor() as cur:
        await cur.execute(query("list_supervisors"))
        supervisor_rows = await cur.fetchall()
        await cur.execute(query("list_workers"))
        worker_rows = await cur.fetchall()
        await cur.execute(scaling_query("list_scaling"))
        scaling_rows = await cur.fetchall()
        found = supervisors_from(supervisor_rows, worker_rows, scaling_rows)
        ids = running_job_ids(found)
        if ids:
            await cur.execute(progress_query("read_progress"), {"ids": ids})
            add_progress(found, await cur.fetchall())
    return found


async def supervisors(pool: AsyncConnectionPool[Any]) -> tuple[datetime, list[SupervisorView]]:
    async with snapshot(pool) as conn:
        return await server_now(conn), await read_supervisors(conn)


@dataclass
class JobPage:
    now: datetime
    queue: str
    state: str
    kind: str | None
    page: int
    jobs: list[dict[str, Any]]
    more: bool
    paused: bool
    # The queue's limits in force (every supervisor's claims together) and their use, or None.
    limits: LimitUse | None = None
    # The queue's busiest tenants among its first SCAN due jobs (tenant, available, oldest_wait,
    # running); empty when none of them has a tenant.
    tenants: list[dict[str, Any]] = field(default_factory=list)


async def queue_jobs(
    pool: AsyncConnectionPool[Any], queue: str, state: str, kind: str | None, page: int
) -> JobPage:
    """One page of a queue's jobs in one state; ``page`` counts from 1."""
    params = {
        "queue": queue,
        "kind": kind,
        "scan": SCAN,
        "limit": PAGE_SIZE + 1,
        "offset": (page - 1) * PAGE_SIZE,
    }
    async with snapshot(pool) as conn:
        now = await server_now(conn)
        rows = await fetch(conn, dashboard_query(f"web_queue_{state}"), params)
        paused = any(r["queue"] == queue for r in await fetch(conn, query("paused_queues")))
        uses = await fetch(conn, limits.use_statement())
        tenants = await fetch(conn, dashboard_query("web_queue_tenants"), params)
    more = len(rows) > PAGE_SIZE
    limit = next((LimitUse(**u) for u in uses if u["queue"] == queue), None)
    if not any(t["tenant"] is not None for t in tenants):
        tenants = []
    return JobPage(now, queue, state, kind, page, rows[:PAGE_SIZE], more, paused, limit, tenants)


@dataclass(frozen=True)
class DeadLetterFilter:
    kind: str | None = None
    queue: str | None = None
    older_than: float | None = None
    after: tuple[datetime, int] | None = None


async def dead_letters(
    pool: AsyncConnectionPool[Any], which: DeadLetterFilter
) -> tuple[datetime, list[dict[str, Any]], bool]:
    """A page of dead letters, newest first, and whether there are more after it."""
    params = {
        "kind": which.kind,
        "queue": which.queue,
        "older_than": which.older_than,
        "after_finished": which.after[0] if which.after else None,
        "after_id": which.after[1] if which.after else None,
        "scan": SCAN,
        "limit": PAGE_SIZE + 1,
    }
    async with snapshot(pool) as conn:
        now = await server_now(conn)
        rows = await fetch(conn, dashboard_query("web_dead_letters"), params)
    return now, rows[:PAGE_SIZE], len(rows) > PAGE_SIZE
