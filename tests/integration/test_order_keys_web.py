"""The dashboard's job page shows a job's order key and what it waits for, and its aging level
when its queue ages, in the words `jobs show` prints (supervisor/views: one reader for both)."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from supervisor import NewJob, Workflow, claim, enqueue, enqueue_workflow
from supervisor.config import load_config
from supervisor.web import create_app
from supervisor.web.security import Credentials
from tests.integration.operator_helpers import CONFIG, Cli
from tests.integration.test_web_pages import with_client


def _pages(dsn: str, paths: list[str], config_path: Path | None = None) -> list[str]:
    async def run() -> list[str]:
        config = load_config(config_path) if config_path is not None else None
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, config=config, credentials=Credentials())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                pages = [await c.get(p) for p in paths]
        assert all(p.status_code == 200 for p in pages), [p.status_code for p in pages]
        return [p.text for p in pages]

    return asyncio.run(run())


def test_the_job_page_says_what_a_follower_waits_for(
    cli: Cli, conn: psycopg.Connection[Any], dsn: str
) -> None:
    conn.autocommit = True
    head = enqueue(conn, "hook", order_key="cust-7")
    follower = enqueue(conn, "hook", order_key="cust-7")
    wf = Workflow()
    wf.add(NewJob("hook", order_key="cust-7"), after=[wf.add(NewJob("hook"))])
    step = enqueue_workflow(conn, wf).job_ids[1]
    claim(conn, "default", worker="w", limit=1)
    page_head, page_follower, page_step = _pages(
        dsn, [f"/jobs/{head}", f"/jobs/{follower}", f"/jobs/{step}"]
    )
    # The same words as `jobs show`, after their label.
    shown = cli("jobs", "show", str(follower)).out
    words = f"cust-7: waits for job {head} (running) to end; 2 unfinished in the key"
    assert f"order key   {words}" in shown
    assert f'<dd id="order">{words}' in page_follower
    assert f'href="/jobs/{head}">open job {head}</a>' in page_follower
    assert '<dd id="order">cust-7: holds its key; 1 waiting behind it</dd>' in page_head
    assert '<dd id="order">cust-7: joins its key once its parents have ended</dd>' in page_step
    # A waiting job can be cancelled from its page.
    assert 'id="cancel"' in page_follower
    assert 'id="order"' not in _pages(dsn, [f"/jobs/{enqueue(conn, 'hook')}"])[0]


def test_the_job_page_shows_the_aging_level(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path
) -> None:
    conn.autocommit = True
    path = tmp_path / "aged.yaml"
    path.write_text(textwrap.dedent(CONFIG) + "aging: {every: 10s, queues: {webhooks: 0s}}\n")
    low = enqueue(conn, "render_pdf", queue="pdf", priority=0)
    enqueue(conn, "render_pdf", queue="pdf", priority=5)
    hook = enqueue(conn, "deliver_webhook", queue="webhooks")
    conn.execute("UPDATE pgq.jobs SET run_at = now() - interval '25 seconds'")
    aged, still = _pages(dsn, [f"/jobs/{low}", f"/jobs/{hook}"], path)
    assert (
        '<dd id="aging">+2 level(s) (one per 10s waited): effective priority 2, capped at 5</dd>'
        in aged
    )
    assert 'id="aging"' not in still
    # Without a config (the dashboard on a DSN alone), no aging is shown.
    assert 'id="aging"' not in with_client(dsn, lambda c: c.get(f"/jobs/{low}")).text
