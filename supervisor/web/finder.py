"""/jobs: jobs across queues and states, filtered by state, queue, kind, tenant and arguments.

Reads are bounded (sql/dashboard_jobs.sql): each walks the primary key newest first through at most
``SCAN`` jobs, inside a transaction whose statements may take ``web_bound``'s timeout. A search
by arguments uses the optional GIN index jobs_args when the operator built it (then no scan
limit applies, only the timeout). The page says when a read stopped at the limit.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException

from supervisor.queue.bulk import JobFilter, bulk_query
from supervisor.queue.control import STATES
from supervisor.shared.redact import row_shown
from supervisor.web.reads import fetch, server_now, snapshot

SCAN = 200_000  # jobs a read looks at, newest first, before it stops
PAGE_SIZE = 50
MAX_ARGS_TEXT = 2_000  # characters of the args filter: a search, not a payload


# One loader and one filter for the dashboard and the command line (supervisor.queue.bulk).
web_query = bulk_query


def filter_from(params: QueryParams | dict[str, str]) -> JobFilter:
    """The filter typed in the page's form; a bad value is a 400 that names the field (a
    search naming a protected key is refused by the page: web/bulk.py)."""

    def text(name: str) -> str | None:
        value = str(params.get(name, "") or "").strip()
        if "\0" in value:
            raise HTTPException(400, f"{name} must not contain a NUL character")
        return value or None

    state = text("state")
    if state is not None and state not in STATES:
        raise HTTPException(400, f"state must be one of {', '.join(STATES)}")
    return JobFilter(state, text("queue"), text("kind"), text("tenant"), _args(text("args")))


def _args(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    if len(text) > MAX_ARGS_TEXT:
        raise HTTPException(400, f"args: at most {MAX_ARGS_TEXT} characters")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HTTPException(
            400,
            f'args must be a JSON object such as {{"invoice_id": 42}}: {exc.msg} at '
            f"character {exc.pos}",
        ) from None
    if not isinstance(value, dict):
        raise HTTPException(400, 'args must be a JSON object such as {"invoice_id": 42}')
    return value


@dataclass(frozen=True)
class Schema:
    """What this database offers the page: the optional args index."""

    args_index: bool


@dataclass
class JobsPage:
    now: datetime
    jobs: list[dict[str, Any]]
    more: bool  # another page below the last row
    indexed: bool  # the search read the args index
    schema: Schema


async def schema(conn: Any) -> Schema:
    (row,) = await fetch(conn, web_query("web_has_args_index"))
    return Schema(bool(row["args_index"]))


async def find(
    pool: AsyncConnectionPool[Any],
    which: JobFilter,
    before: int | None,
    redacted: Collection[str] = (),
) -> JobsPage:
    """One page of matching jobs, newest first, below id ``before``, shown with their
    ``redacted`` keys' values (web.redact) replaced."""
    async with snapshot(pool) as conn:
        await conn.execute(web_query("web_bound"))
        now = await server_now(conn)
        offered = await schema(conn)
        indexed = which.args is not None and offered.args_index
        name = "web_find_jobs_by_args" if indexed else "web_find_jobs"
        params = {**which.params(), "before": before, "scan": SCAN, "limit": PAGE_SIZE + 1}
        rows = await fetch(conn, web_query(name), params)
    jobs = [row_shown(r, redacted) for r in rows[:PAGE_SIZE]]
    return JobsPage(now, jobs, len(rows) > PAGE_SIZE, indexed, offered)


@dataclass(frozen=True)
class DryRun:
    """How many jobs an action on everything a filter matches will touch: the jobs between
    ``floor`` and ``top`` (ids), counted once; the slices act on that range only."""

    jobs: int
    top: int
    floor: int
    capped: bool  # SCAN jobs looked at: older ones are left out of the count and the action


async def dry_run(pool: AsyncConnectionPool[Any], which: JobFilter, states: list[str]) -> DryRun:
    async with snapshot(pool) as conn:
        await conn.execute(web_query("web_bound"))
        (top,) = await fetch(conn, web_query("web_top_id"))
        (floor,) = await fetch(conn, web_query("web_scan_floor"), {"top": top["top"], "scan": SCAN})
        params = {**which.params(), "states": states, "top": top["top"], "floor": floor["floor"]}
        (count,) = await fetch(conn, web_query("web_count_jobs"), params)
    return DryRun(int(count["jobs"]), int(top["top"]), int(floor["floor"]), floor["seen"] >= SCAN)
