"""The dashboard's bounded reads give the figures `status` gives, on real PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from supervisor import NewJob, enqueue_many
from supervisor.web import reads
from supervisor.web.throughput import Throughput


def overview(dsn: str, throughput: Throughput | None = None) -> reads.Overview:
    async def read() -> reads.Overview:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            counter = throughput or Throughput(reads.dashboard_query("web_throughput_since"))
            return await reads.overview(pool, None, "test", counter)

    return asyncio.run(read())


def queue(view: reads.Overview, name: str) -> reads.QueueFigures:
    (found,) = [q for q in view.queues if q.name == name]
    return found


def test_the_oldest_wait_is_the_oldest_due_job_whatever_its_priority(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    now = datetime.now(timezone.utc)
    enqueue_many(
        conn,
        [
            # Claim order puts the priority-5 job first; the oldest wait is the priority-0 one's.
            NewJob("k", {}, queue="a", priority=5, run_at=now - timedelta(seconds=10)),
            NewJob("k", {}, queue="a", priority=0, run_at=now - timedelta(seconds=100)),
            NewJob("k", {}, queue="a", priority=-3, run_at=now - timedelta(seconds=50)),
            NewJob("k", {}, queue="a", delay=3600),
        ],
    )
    a = queue(overview(dsn), "a")
    assert (a.row.available, a.row.scheduled) == (3, 1)
    assert a.row.oldest_ready_age is not None and 100 <= a.row.oldest_ready_age < 160
    assert a.capped == set()


def test_counts_stop_at_the_cap_and_say_so(
    conn: psycopg.Connection[Any], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "CAP", 3)
    enqueue_many(conn, [NewJob("k", {}, queue="big") for _ in range(5)])
    enqueue_many(conn, [NewJob("k", {}, queue="small") for _ in range(2)])
    view = overview(dsn)
    big, small = queue(view, "big"), queue(view, "small")
    assert big.capped == {"available"} and big.row.available == 3
    assert small.capped == set() and small.shown("available") == "2"
    # No statistics yet (never analyzed): a lower bound, not a guess.
    assert big.shown("available") == "3+"
    conn.execute("ANALYZE pgq.jobs")
    assert queue(overview(dsn), "big").shown("available") == "~5"


def test_the_chart_counts_the_hour_once_then_only_new_minutes(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    record = (
        "INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, "
        "finished_at) VALUES (1, 'a', 'k', %s, 1, now(), now() - make_interval(mins => %s))"
    )
    conn.execute("SELECT pgq.ensure_history_partitions(now() - interval '1 day', 1)")
    for outcome, minutes_ago in [("completed", 30), ("completed", 30), ("discarded", 0)]:
        conn.execute(record, (outcome, minutes_ago))
    conn.execute(record, ("completed", 90))  # over an hour ago: not shown
    throughput = Throughput(reads.dashboard_query("web_throughput_since"))
    a = queue(overview(dsn, throughput), "a")
    assert a.finished_last_hour == {"completed": 2, "discarded": 1}
    assert a.per_minute["completed"][29] == 2 and a.per_minute["discarded"][-1] == 1
    conn.execute(record, ("completed", 0))
    a = queue(overview(dsn, throughput), "a")
    assert a.finished_last_hour == {"completed": 3, "discarded": 1}


def test_a_database_without_the_schema_gets_a_page_that_says_what_to_do(empty_dsn: str) -> None:
    import httpx

    from supervisor.web import create_app
    from supervisor.web.security import Credentials

    async def get() -> httpx.Response:
        async with AsyncConnectionPool(empty_dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1"
            ) as client:
                return await client.get("/")

    page = asyncio.run(get())
    assert page.status_code == 503
    assert "has no pgq schema (or an old one): run" in page.text
    assert "migrate" in page.text
