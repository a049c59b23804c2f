"""What `status` and the dashboard show of an elastic pool: the size its master's scaling
published with the heartbeat (pgq.supervisors.scaling, migration 0055), desired and actual,
and why."""

from __future__ import annotations

import json
from typing import Any

import httpx
import psycopg

from supervisor.services import registry
from supervisor.views import status as status_view
from tests.integration.test_web_pages import with_client

SCALING = {
    "work": {
        "min": 1,
        "max": 6,
        "desired": 4,
        "actual": 2,
        "elastic": True,
        "need": 3.6,
        "backlog_seconds": 14.5,
        "service_seconds": 2.0,
        "reason": "grow: 7 due jobs (14.5s of work), 2 running fleet-wide, share 1.00",
    },
    "fixed": {"min": 2, "max": 2, "desired": 2, "actual": 2, "elastic": False, "reason": "fixed"},
}


def beat(conn: psycopg.Connection[Any]) -> None:
    registry.heartbeat(conn, "h1:1:ab", "h1", "x.yaml", [], None, json.dumps(SCALING))


def test_status_shows_each_elastic_pool_desired_actual_and_why(
    conn: psycopg.Connection[Any],
) -> None:
    beat(conn)
    (supervisor,) = status_view._supervisors(conn)
    assert supervisor.scaling == SCALING
    doc = status_view._supervisor_json(supervisor)
    work = next(p for p in doc["pools"] if p["pool"] == "work")
    assert (work["desired"], work["actual"], work["backlog_seconds"]) == (4, 2, 14.5)
    (line,) = status_view._scaling_lines(supervisor)  # the fixed pool adds no line
    assert "pool work: 2 children, desired 4 of 1-6, backlog 14.5s: grow: 7 due jobs" in line


def test_the_dashboard_shows_each_elastic_pool_desired_actual_and_why(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    beat(conn)
    conn.commit()

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.get("/workers")

    page = with_client(dsn, steps)
    assert page.status_code == 200
    assert 'data-pool="work"' in page.text and 'data-pool="fixed"' not in page.text
    assert '<strong data-figure="desired">4</strong>' in page.text
    assert "grow: 7 due jobs (14.5s of work)" in page.text
