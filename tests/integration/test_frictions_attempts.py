"""One attempts figure everywhere (issue 35): the kind's jobs.KIND.max_attempts rules when set,
and every list, --json and dashboard page shows it instead of the row's enqueue-time limit."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from supervisor import claim, enqueue, settle
from supervisor.config import load_config
from supervisor.queue.outcomes import retry
from supervisor.web import create_app
from supervisor.web.security import Credentials
from tests.integration.operator_helpers import Cli


def _dead_after_policy(conn: psycopg.Connection[Any]) -> int:
    # The row keeps enqueue's 10; jobs.render_pdf.max_attempts (5) decides, as a worker does.
    job_id = enqueue(conn, "render_pdf", queue="pdf", max_attempts=10)
    for _ in range(5):
        conn.execute(
            "UPDATE pgq.jobs SET run_at = now(), state = 'available' WHERE id = %s", (job_id,)
        )
        (job,) = claim(conn, "pdf", worker="w")
        settle(conn, [retry(job, 0, "flaky", max_attempts=5)])
    assert conn.execute("SELECT state, attempts FROM pgq.jobs").fetchone() == ("discarded", 5)
    return job_id


def test_the_cli_shows_the_limit_that_rules(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    job_id = _dead_after_policy(conn)
    error = conn.execute("SELECT last_error FROM pgq.jobs").fetchone()[0]  # type: ignore[index]
    assert "attempt 5 of 5: no attempts left" in error
    listed = cli("jobs", "list")
    assert re.search(rf"{job_id} .*\b5/5\b", listed.out), listed.out
    assert "5/10" not in listed.out
    assert cli("jobs", "list", "--json").json()["jobs"][0]["max_attempts"] == 5
    dead = cli("dlq", "list")
    assert "5/5" in dead.out and "5/10" not in dead.out
    assert cli("dlq", "list", "--json").json()["jobs"][0]["max_attempts"] == 5
    assert "attempts    5 of 5" in cli("dlq", "show", str(job_id)).out
    assert cli("dlq", "show", str(job_id), "--json").json()["max_attempts"] == 5


def test_the_dashboard_shows_the_limit_that_rules(
    cli: Cli, conn: psycopg.Connection[Any], dsn: str
) -> None:
    job_id = _dead_after_policy(conn)
    config = load_config(cli.path)

    async def pages() -> list[str]:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), config=config)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                paths = ["/", "/dead", f"/jobs/{job_id}", "/jobs?state=discarded"]
                return [(await c.get(p)).text for p in paths]

    _, dead, job, jobs = asyncio.run(pages())
    for page in (dead, jobs):
        assert re.search(r"5 ?/ ?5<", page), page[-3000:]
        assert not re.search(r"5 ?/ ?10<", page)
    assert "5 of 5" in job and "5 of 10" not in job
