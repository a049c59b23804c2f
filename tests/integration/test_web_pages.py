"""The dashboard's pages and actions with hostile names, through the real ASGI application."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from supervisor import NewJob, enqueue_many
from supervisor.web import create_app
from supervisor.web.security import Credentials

QUEUE = "wörk/📦 <b>bold</b> & 'quoted'"


def with_client(dsn: str, steps: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1"
            ) as client:
                return await steps(client)

    return asyncio.run(run())


def test_a_hostile_queue_name_is_shown_escaped_and_can_be_paused(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    enqueue_many(conn, [NewJob("k", {"html": "<script>alert(1)</script>"}, queue=QUEUE)])
    (job_id,) = conn.execute("SELECT id FROM pgq.jobs").fetchone() or ()

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        overview = await client.get("/")
        job = await client.get(f"/jobs/{job_id}")
        page = f"/queues/{quote(QUEUE, safe='')}"
        confirm = await client.get(page + "/pause")
        token = client.cookies["pgq_csrf"]
        done = await client.post(page + "/pause", data={"csrf": token})
        after = await client.get(done.headers["location"])
        return [overview, job, confirm, done, after]

    overview, job, confirm, done, after = with_client(dsn, steps)
    escaped = "wörk/📦 &lt;b&gt;bold&lt;/b&gt; &amp; &#39;quoted&#39;"
    assert escaped in overview.text and "<b>bold</b>" not in overview.text
    assert "&lt;script&gt;" in job.text and "<script>alert" not in job.text
    assert confirm.status_code == 200 and f"Pause queue {escaped}" in confirm.text
    assert done.status_code == 303
    assert conn.execute("SELECT queue FROM pgq.queue_pauses").fetchall() == [(QUEUE,)]
    assert f"paused queue {escaped}: no host claims from it" in after.text


def test_mounted_under_a_prefix_every_link_and_redirect_keeps_it(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    enqueue_many(conn, [NewJob("k", {}, queue="q", max_attempts=1)])
    conn.execute("UPDATE pgq.jobs SET state = 'discarded', finished_at = now()")
    (job_id,) = conn.execute("SELECT id FROM pgq.jobs").fetchone() or ()

    async def run() -> list[httpx.Response]:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            dashboard = create_app(pool=pool, credentials=Credentials())
            app = Starlette(routes=[Mount("/pgq", dashboard)])
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1"
            ) as client:
                overview = await client.get("/pgq/")
                htmx = await client.get("/pgq/static/htmx.min.js")
                confirm = await client.get(f"/pgq/jobs/{job_id}/replay")
                done = await client.post(
                    f"/pgq/jobs/{job_id}/replay", data={"csrf": client.cookies["pgq_csrf"]}
                )
                return [overview, htmx, confirm, done]

    overview, htmx, confirm, done = asyncio.run(run())
    assert overview.status_code == 200 and htmx.status_code == 200
    assert 'href="/pgq/queues/q"' in overview.text and 'href="/pgq/dead"' in overview.text
    assert 'href="/queues' not in overview.text
    assert f'href="/pgq/jobs/{job_id}"' in confirm.text
    assert (done.status_code, done.headers["location"]) == (303, f"/pgq/jobs/{job_id}")


def test_a_database_that_does_not_answer_gets_a_page_that_says_so_without_the_password() -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dsn = f"postgresql://pgq:s3cret-pw@127.0.0.1:{port}/nowhere?connect_timeout=1"
    app = create_app(dsn, credentials=Credentials())

    async def get() -> httpx.Response:
        # The app opens its own pool (dsn=...) in its lifespan, as a server would run it.
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1"
            ) as client:
                return await client.get("/")

    page = asyncio.run(get())
    assert page.status_code == 503
    assert f"pgq@127.0.0.1:{port}/nowhere does not answer" in page.text
    assert "s3cret-pw" not in page.text


def test_the_queue_page_shows_its_limits_and_their_use(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    from supervisor.queue import jobs as jobs_api
    from supervisor.queue.limits import Limits, write_limits

    write_limits(
        conn,
        [Limits(QUEUE, concurrency=2, rate=0.05, burst=3, tenant_concurrency=1)],
        [QUEUE],
        "host-a:1:ab",
    )
    enqueue_many(conn, [NewJob("k", queue=QUEUE, tenant=f"t{n}") for n in range(2)])
    enqueue_many(conn, [NewJob("k", queue=QUEUE, tenant="<i>acme</i>")] * 3)
    enqueue_many(conn, [NewJob("k", queue=QUEUE)] * 2)
    jobs_api.claim(conn, QUEUE, worker="w", limit=4)  # the cap lets two start

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        limited = await client.get(f"/queues/{quote(QUEUE, safe='')}")
        free = await client.get("/queues/other")
        return [limited, free]

    limited, free = with_client(dsn, steps)
    assert limited.status_code == 200
    assert "2 of 2 running" in limited.text and "full" in limited.text
    assert "3/min, burst 3: 1.0 tokens now" in limited.text
    assert "concurrency 1" in limited.text and "host-a:1:ab" in limited.text
    assert 'id="limits"' not in free.text and 'id="tenants"' not in free.text
    # The busiest tenants: acme's three jobs wait (escaped), then those without a tenant.
    rows = limited.text.split('id="tenants"')[1].split("</table>")[0]
    assert rows.index("&lt;i&gt;acme&lt;/i&gt;") < rows.index("(no tenant)")
    assert "<i>acme</i>" not in limited.text
