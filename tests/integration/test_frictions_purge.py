"""`dlq purge` deletes dead letters only, never a cancelled job (which is not a dead letter),
and `--dry-run` counts what it would delete without deleting (issue 35); the dashboard's purge
is as exact."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from supervisor import cancel, enqueue
from supervisor.config import load_config
from supervisor.web import create_app
from supervisor.web.security import Credentials
from tests.integration.operator_helpers import Cli, dead_letter, states


def _cancelled_long_ago(conn: psycopg.Connection[Any]) -> int:
    job_id = enqueue(conn, "render_pdf", queue="pdf")
    cancel(conn, job_id)
    conn.execute(
        "UPDATE pgq.jobs SET finished_at = now() - interval '3 days' WHERE id = %s", (job_id,)
    )
    return job_id


def test_purge_is_exact_and_has_a_dry_run(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    dead = [dead_letter(conn, finished_ago="2 days") for _ in range(3)]
    cancelled = _cancelled_long_ago(conn)
    dry = cli("dlq", "purge", "--older-than", "1d", "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.startswith("would purge 3 dead letters (")
    assert "nothing deleted" in dry.out
    assert set(states(conn)) == {*dead, cancelled}
    assert cli("dlq", "purge", "--older-than", "1d", "--dry-run", "--json").json() == {
        "would_purge": 3,
        "dry_run": True,
    }
    done = cli("dlq", "purge", "--older-than", "1d")
    assert done.out.startswith("purged 3 dead letters ("), done.out
    assert set(states(conn)) == {cancelled}  # a cancelled job is not a dead letter


def test_the_dashboards_purge_keeps_cancelled_jobs(
    cli: Cli, conn: psycopg.Connection[Any], dsn: str
) -> None:
    dead = dead_letter(conn, finished_ago="2 days")
    cancelled = _cancelled_long_ago(conn)
    config = load_config(cli.path)

    async def steps() -> httpx.Response:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), config=config)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                await c.get("/dead")
                data = {"csrf": c.cookies["pgq_csrf"], "older_than": "1d"}
                done = await c.post("/dead/purge", data=data)
                return await c.get(done.headers["location"])

    after = asyncio.run(steps())
    assert "purged 1 dead letter " in after.text
    assert dead not in states(conn) and cancelled in states(conn)
