"""The doctor's horizon check where operators already look: `status`'s ATTENTION and the
dashboard's /doctor page, each naming the session that holds the horizon, and clear once the
session is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from supervisor.web import create_app
from supervisor.web.security import Credentials
from tests.integration.operator_helpers import Cli, Restore
from tests.integration.test_doctor import CONFIG, config, held_by, session
from tests.lifecycle.harness import wait_for


@pytest.fixture
def holder(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A session idle in a transaction that holds the horizon longer than doctor.horizon_age."""
    with session(dsn, "forgotten-tx") as conn:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_current_xact_id()")
        wait_for(held_by(dsn, conn.info.backend_pid), 20, what="the horizon held")
        yield conn


def test_status_attention_names_the_holder(
    dsn: str,
    holder: psycopg.Connection[Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGQ_DSN", dsn)
    restore = Restore()
    cli = Cli(tmp_path, capsys, config=CONFIG, name="status")
    try:
        pid = holder.info.backend_pid
        text = cli("status")
        assert text.code == 0, text.err
        attention = text.out.split("ATTENTION", 1)[1]
        assert f"horizon.backends: the xmin horizon is held by pid {pid} " in attention
        assert "'forgotten-tx'" in attention and f"pg_terminate_backend({pid})" in attention
        warnings = cli("status", "--json").json()["warnings"]
        assert any(f"pid {pid} " in w for w in warnings), warnings
        holder.execute("ROLLBACK")
        after = cli("status")
        assert "horizon.backends" not in after.out
    finally:
        restore()


def _page(dsn: str) -> httpx.Response:
    async def run() -> httpx.Response:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), config=config())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
                return await c.get("/doctor")

    return asyncio.run(run())


def test_the_dashboard_doctor_page_names_the_holder(
    dsn: str, holder: psycopg.Connection[Any]
) -> None:
    pid = holder.info.backend_pid
    page = _page(dsn)
    assert page.status_code == 200, page.text
    assert 'href="/doctor" class="here"' in page.text  # in the nav, and the page we are on
    attention = page.text.split('id="attention"', 1)[1].split("</ul>", 1)[0]
    assert 'data-check="horizon.backends"' in attention
    assert f"pid {pid} " in attention and "forgotten-tx" in attention
    assert f"pg_terminate_backend({pid})" in attention
    assert 'data-check="pressure.notify"' in page.text
    holder.execute("ROLLBACK")
    after = _page(dsn)
    assert f"pid {pid} " not in after.text
    assert 'data-check="horizon.backends"' in after.text
