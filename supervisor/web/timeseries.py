"""/charts: throughput, failures, wait p50/p95 and running jobs over the last hour or day, per
queue and kind, drawn in the browser by uPlot (vendored in static/, MIT licence beside it).

The page carries its first figures as JSON (so it draws at once, and a script-less reader still
gets them); it then asks /charts/data for new ones at the page's refresh interval and redraws in
place. One grouped read per request (sql/charts.sql) under the /jobs pages' statement timeout.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg_pool import AsyncConnectionPool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from supervisor.queue.queries import query
from supervisor.web.finder import web_query
from supervisor.web.reads import fetch, server_now, snapshot

# range -> (buckets, seconds per bucket): the hour by the minute, the day by the quarter hour.
RANGES = {"hour": (60, 60), "day": (96, 900)}
# Seconds a read is kept per (range, queue, kind): a day's read costs what the day wrote (1.2-1.7 s
# for 200,000 history rows on this 2-core machine, against 20-60 ms for the hour), and a
# quarter-hour bucket barely moves in a minute; the hour's is read at each refresh.
KEEP = {"hour": 0.0, "day": 60.0}
SUGGESTIONS = 400


chart_query = query  # the statements of sql/charts.sql, by name


@dataclass(frozen=True)
class Series:
    range: str
    step: int
    t: list[int]  # each bucket's start, seconds since the epoch
    completed: list[int]
    failed: list[int]
    wait_p50: list[float | None]
    wait_p95: list[float | None]
    running: list[int]  # jobs running at each bucket's end (the last: now)

    def to_json(self) -> dict[str, Any]:
        return {
            "range": self.range,
            "step": self.step,
            "t": self.t,
            "completed": self.completed,
            "failed": self.failed,
            "wait_p50": self.wait_p50,
            "wait_p95": self.wait_p95,
            "running": self.running,
        }


def window(now: datetime, range_: str) -> tuple[datetime, int, int]:
    """The window's first bucket start, the bucket count and seconds: the last bucket holds
    now, so the newest figures are always on the right edge."""
    count, step = RANGES[range_]
    epoch = int(now.timestamp())
    last = epoch - epoch % step
    return datetime.fromtimestamp(last - (count - 1) * step, timezone.utc), count, step


def series_of(
    rows: list[dict[str, Any]], since: datetime, count: int, step: int, name: str
) -> Series:
    by_bucket = {int(r["bucket"]): r for r in rows if 0 <= int(r["bucket"]) < count}
    start = int(since.timestamp())
    completed, failed, p50, p95, running = [], [], [], [], []
    now_running = sum(int(r["base"] or 0) for r in rows)
    for k in range(count):
        row = by_bucket.get(k, {})
        completed.append(int(row.get("completed") or 0))
        failed.append(int(row.get("failed") or 0))
        p50.append(_seconds(row.get("wait_p50")))
        p95.append(_seconds(row.get("wait_p95")))
        now_running += int(row.get("started") or 0) - int(row.get("finished") or 0)
        running.append(max(now_running, 0))
    t = [start + k * step for k in range(count)]
    return Series(name, step, t, completed, failed, p50, p95, running)


def _seconds(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


Kept = dict[tuple[str, str | None, str | None], tuple[float, datetime, Series]]


async def read(
    pool: AsyncConnectionPool[Any],
    range_: str,
    queue: str | None,
    kind: str | None,
    _kept: Kept,
) -> tuple[datetime, Series]:
    """The series, from ``_kept`` (the dashboard's own, per app) while it is fresh enough."""
    key = (range_, queue, kind)
    hit = _kept.get(key)
    if hit is not None and time.monotonic() - hit[0] < KEEP[range_]:
        return hit[1], hit[2]
    now, series = await _read(pool, range_, queue, kind)
    if KEEP[range_]:
        if len(_kept) > 100:  # queue and kind names come from the URL: keep it small
            _kept.clear()
        _kept[key] = (time.monotonic(), now, series)
    return now, series


async def _read(
    pool: AsyncConnectionPool[Any], range_: str, queue: str | None, kind: str | None
) -> tuple[datetime, Series]:
    async with snapshot(pool) as conn:
        await conn.execute(web_query("web_bound"))
        now = await server_now(conn)
        since, count, step = window(now, range_)
        params = {"since": since, "step": step, "queue": queue, "kind": kind}
        rows = await fetch(conn, chart_query("chart_buckets"), params)
    return now, series_of(rows, since, count, step, range_)


async def suggestions(site: Any) -> dict[str, list[str]]:
    """Queues and kinds to suggest in a page's filters: those the database names, and the
    config's queues (its pools') and kinds (its handlers)."""
    found = await names(site.pool)
    if site.config is not None:
        served = {q for p in site.config.pools.values() for q in p.queues}
        found["queue"] = sorted({*found["queue"], *served})
        found["kind"] = sorted({*found["kind"], *site.config.handlers})
    return found


async def names(pool: AsyncConnectionPool[Any]) -> dict[str, list[str]]:
    """Queues and kinds the database names (the last day's history, the jobs table)."""
    async with snapshot(pool) as conn:
        await conn.execute(web_query("web_bound"))
        rows = await fetch(conn, chart_query("chart_names"), {"limit": SUGGESTIONS})
    found: dict[str, list[str]] = {"queue": [], "kind": []}
    for r in rows:
        found[r["what"]].append(r["name"])
    return found


def _filters(request: Request) -> tuple[str, str | None, str | None]:
    range_ = request.query_params.get("range", "hour")
    if range_ not in RANGES:
        raise HTTPException(400, f"range must be one of {', '.join(RANGES)}")

    def text(name: str) -> str | None:
        value = request.query_params.get(name, "").strip()
        if "\0" in value:
            raise HTTPException(400, f"{name} must not contain a NUL character")
        return value or None

    return range_, text("queue"), text("kind")


def routes(site: Any) -> list[Route]:
    kept: Kept = {}

    async def page(request: Request) -> Response:
        range_, queue, kind = _filters(request)
        now, series = await read(site.pool, range_, queue, kind, kept)
        suggested = await suggestions(site)
        enabled = site.config.history.enabled if site.config else True
        return site.render(
            request,
            "charts.html",
            now=now,
            series_json=json.dumps(series.to_json()),
            series=series,
            range=range_,
            ranges=list(RANGES),
            queue=queue,
            kind=kind,
            suggested=suggested,
            history=enabled,
        )

    async def data(request: Request) -> Response:
        range_, queue, kind = _filters(request)
        _, series = await read(site.pool, range_, queue, kind, kept)
        return JSONResponse(series.to_json(), headers={"Cache-Control": "no-store"})

    async def history(request: Request) -> Response:
        # The old "Last 24 h" page: the day's charts now.
        query = request.url.query
        target = "/charts?range=day" + (f"&{query}" if query else "")
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return RedirectResponse(root + target, status_code=303)

    return [
        Route("/charts", page),
        Route("/charts/data", data),
        Route("/history", history),
    ]


def overview_series(per_minute: dict[str, list[int]], now: datetime) -> str:
    """The overview's sparkline of one queue as JSON for uPlot: minute starts, completed,
    discarded (the incrementally counted hour of supervisor.web.throughput)."""
    completed = per_minute.get("completed", [])
    first = now.replace(second=0, microsecond=0) - timedelta(minutes=len(completed) - 1)
    t = [int(first.timestamp()) + 60 * i for i in range(len(completed))]
    return json.dumps({"t": t, **per_minute})
