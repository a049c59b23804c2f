"""Jobs of a kind no handler serves are named in ATTENTION, in `status --json` and on the
dashboard's overview (issue 35): before, `status` said "Nothing needs attention" beside them."""

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
from tests.integration.operator_helpers import Cli, dead_letter


def _unhandled(conn: psycopg.Connection[Any]) -> None:
    for _ in range(3):
        enqueue(conn, "emial_send", queue="pdf")
    for _ in range(5):
        dead_letter(conn, "emial_send", "pdf", error="no handler for kind 'emial_send'")
    enqueue(conn, "render_pdf", queue="pdf")  # served: not named


def test_status_names_them_in_attention_and_json(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    _unhandled(conn)
    shown = cli("status")
    assert shown.code == 0, shown.err
    attention = shown.out.split("ATTENTION", 1)[1]
    assert (
        "queue pdf: 3 jobs waiting and 5 dead letters of kind emial_send, which no handler in"
        in attention
    ), attention
    assert "`jobs cancel --kind emial_send`" in attention
    assert "render_pdf," not in attention
    document = cli("status", "--json").json()
    assert document["unhandled_kinds"] == [
        {"queue": "pdf", "kind": "emial_send", "waiting": 3, "dead_letters": 5}
    ]
    assert any("emial_send" in w for w in document["warnings"])


def test_the_dashboard_names_them(cli: Cli, conn: psycopg.Connection[Any], dsn: str) -> None:
    _unhandled(conn)
    config = load_config(cli.path)

    async def overview() -> str:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), config=config)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return (await c.get("/")).text

    page = asyncio.run(overview())
    attention = page.split('id="attention"', 1)[1].split("</ul>", 1)[0]
    assert "3 jobs waiting and 5 dead letters of kind emial_send" in attention, attention
