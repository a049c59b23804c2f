"""/history: throughput, failures and wait over the last 24 hours, by hour, from pgq.job_history.

One grouped read of the day's history (sql/dashboard_jobs.sql, web_history_hours) under the /jobs
pages' statement timeout, cached for ``KEEP`` seconds per queue filter: the page refreshes
itself, and an hour's bar barely moves in a minute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from supervisor.web.finder import web_query
from supervisor.web.reads import fetch, server_now, snapshot

KEEP = 60.0
HOURS = 24


@dataclass
class Day:
    now: datetime
    hours: list[datetime]
    completed: list[int]
    failed: list[int]
    wait_p50: list[float]
    wait_p95: list[float]

    @property
    def labels(self) -> list[str]:
        return [h.strftime("%H:00") for h in self.hours]

    @property
    def totals(self) -> dict[str, int]:
        return {"completed": sum(self.completed), "failed": sum(self.failed)}


@dataclass
class DayCache:
    kept: dict[str | None, tuple[float, Day]] = field(default_factory=dict)

    async def read(self, pool: AsyncConnectionPool[Any], queue: str | None) -> Day:
        hit = self.kept.get(queue)
        if hit and time.monotonic() - hit[0] < KEEP:
            return hit[1]
        async with snapshot(pool) as conn:
            await conn.execute(web_query("web_bound"))
            now = await server_now(conn)
            rows = await fetch(conn, web_query("web_history_hours"), {"queue": queue})
        day = _day(now, rows)
        if len(self.kept) > 100:  # queue names come from the URL: keep the cache small
            self.kept.clear()
        self.kept[queue] = (time.monotonic(), day)
        return day


def _day(now: datetime, rows: list[dict[str, Any]]) -> Day:
    first = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=HOURS - 1)
    hours = [first + timedelta(hours=i) for i in range(HOURS)]
    by_hour = {r["hour"]: r for r in rows}
    empty: dict[str, Any] = {}

    def series(name: str) -> list[Any]:
        return [by_hour.get(h, empty).get(name) or 0 for h in hours]

    return Day(
        now,
        hours,
        [int(v) for v in series("completed")],
        [int(v) for v in series("failed")],
        [float(v) for v in series("wait_p50")],
        [float(v) for v in series("wait_p95")],
    )


def routes(site: Any) -> list[Route]:
    cache = DayCache()

    async def history(request: Request) -> Response:
        queue = request.query_params.get("queue", "").strip() or None
        day = await cache.read(site.pool, queue)
        enabled = site.config.history.enabled if site.config else True
        return site.render(request, "history_day.html", day=day, queue=queue, history=enabled)

    return [Route("/history", history)]
