"""A queue no pool serves is refused, with the closest served name, on every path a person types
one (issue 35): `enqueue --queue` (before: a warning, and the job waited forever), `queues pause`
and the dashboard's pause (before: offered and done)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from supervisor import enqueue
from supervisor.config import load_config
from supervisor.web import create_app
from supervisor.web.security import Credentials
from tests.integration.operator_helpers import Cli


def test_enqueue_refuses_a_typo_and_suggests(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    refused = cli("enqueue", "render_pdf", "--queue", "pfd")
    assert refused.code == 2
    assert "serves queue 'pfd'; did you mean 'pdf'?" in refused.err
    assert "nothing enqueued" in refused.err and "--any-queue" in refused.err
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)
    forced = cli("enqueue", "render_pdf", "--queue", "pfd", "--any-queue")
    assert forced.code == 0 and "no pool in" in forced.err  # still warned
    # Now a job waits in it: another deploy's queue, not a typo.
    assert cli("enqueue", "render_pdf", "--queue", "pfd").code == 0
    assert cli("enqueue", "render_pdf", "--queue", "pdf").code == 0


def test_the_dashboard_refuses_to_pause_a_typo(
    cli: Cli, conn: psycopg.Connection[Any], dsn: str
) -> None:
    config = load_config(cli.path)
    enqueue(conn, "render_pdf", queue="stray")  # in use: may be paused

    async def steps() -> list[httpx.Response]:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), config=config)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                page = await c.get("/queues/pfd")
                confirm = await c.get("/queues/pfd/pause")
                await c.get("/")
                token = c.cookies["pgq_csrf"]
                posted = await c.post("/queues/pfd/pause", data={"csrf": token})
                stray = await c.post("/queues/stray/pause", data={"csrf": token})
                served = await c.get("/queues/pdf")
                return [page, confirm, posted, stray, served]

    page, confirm, posted, stray, served = asyncio.run(steps())
    assert 'id="pause"' not in page.text
    assert "did you mean &#39;pdf&#39;?" in page.text
    assert confirm.status_code == 400 and "did you mean &#39;pdf&#39;?" in confirm.text
    assert posted.status_code == 400
    assert stray.status_code == 303
    assert 'id="pause"' in served.text and 'id="unserved"' not in served.text
    paused = [r[0] for r in conn.execute("SELECT queue FROM pgq.queue_pauses")]
    assert paused == ["stray"]
