"""The dashboard's schedules page (issue 35): next ticks, last tick and job, run now, pause and
resume; a paused schedule's tick passes without a job on the supervisor's scheduler."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg_pool import AsyncConnectionPool

from supervisor.config import parse_config
from supervisor.services.scheduler import Scheduler
from supervisor.web import create_app
from supervisor.web.security import Credentials
from tests.integration.test_scheduled import EVERY_TWO_SECONDS, _Host

YAML = """
handlers: {sync_accounts: tests.handlers:noop}
pools: {main: {queues: {sync: 1}}}
schedules:
  nightly: {cron: "0 3 * * *", kind: sync_accounts, args: {full: true}, queue: sync}
"""


def _steps(dsn: str, yaml_text: str, paths: list[tuple[str, str]]) -> list[httpx.Response]:
    config = parse_config(yaml_text, source="q.yaml")

    async def run() -> list[httpx.Response]:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), config=config)
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                await c.get("/")
                token = c.cookies["pgq_csrf"]
                found = []
                for method, path in paths:
                    if method == "POST":
                        found.append(await c.post(path, data={"csrf": token}))
                    else:
                        found.append(await c.get(path))
                return found

    return asyncio.run(run())


def test_the_page_runs_pauses_and_resumes(conn: psycopg.Connection[Any], dsn: str) -> None:
    page, confirm, ran, paused, after, resumed = _steps(
        dsn,
        YAML,
        [
            ("GET", "/schedules"),
            ("GET", "/schedules/nightly/run-now"),
            ("POST", "/schedules/nightly/run-now"),
            ("POST", "/schedules/nightly/pause"),
            ("GET", "/schedules"),
            ("POST", "/schedules/nightly/resume"),
        ],
    )
    row = page.text.split('data-schedule="nightly"', 1)[1].split("</tr>", 1)[0]
    assert "sync_accounts" in row and "cron 0 3 * * *" in row and "never" in row
    assert row.count("03:00:00") == 3  # the next three ticks
    assert "Enqueue one sync_accounts job on queue sync now" in confirm.text
    assert ran.status_code == 303
    jobs = conn.execute("SELECT kind, queue, args FROM pgq.jobs").fetchall()
    assert jobs == [("sync_accounts", "sync", {"full": True})]
    assert paused.status_code == 303
    assert 'data-figure="paused"' in after.text and 'data-action="resume"' in after.text
    assert resumed.status_code == 303
    assert conn.execute("SELECT count(*) FROM pgq.schedule_pauses").fetchone() == (0,)


def test_an_empty_configuration_says_what_to_do(dsn: str) -> None:
    (page,) = _steps(
        dsn,
        "handlers: {k: tests.handlers:noop}\npools: {p: {queues: {q: 1}}}\n",
        [("GET", "/schedules")],
    )
    assert 'id="schedules-empty"' in page.text and "schedules:" in page.text


def test_a_paused_schedules_tick_passes_without_a_job(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    host = _Host(dsn, EVERY_TWO_SECONDS % "skip")
    start = datetime(2026, 12, 1, 3, 0, 1, tzinfo=timezone.utc)
    scheduler = Scheduler(host)  # type: ignore[arg-type]
    scheduler.run_at(start)  # first seen
    conn.execute("INSERT INTO pgq.schedule_pauses (name) VALUES ('often')")
    scheduler.run_at(start + timedelta(seconds=2))  # the 03:00:02 tick: paused
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)
    conn.execute("DELETE FROM pgq.schedule_pauses")
    scheduler.run_at(start + timedelta(seconds=4))  # resumed: 03:00:04 runs, :02 is not owed
    run_at = [r[0] for r in conn.execute("SELECT run_at FROM pgq.jobs").fetchall()]
    assert run_at == [start + timedelta(seconds=3)]
    host.db.close()


def test_empty_pages_say_what_to_do_and_filters_suggest_names(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    overview, jobs, dead, workers, charts = _steps(
        dsn, YAML, [("GET", p) for p in ("/", "/jobs", "/dead", "/workers", "/charts")]
    )
    assert 'id="overview-empty"' in overview.text and "enqueue KIND" in overview.text
    assert 'id="jobs-empty"' in jobs.text
    assert 'id="dead-empty"' in dead.text
    assert 'id="supervisors-empty"' in workers.text and "pgq-supervisor -c FILE" in workers.text
    assert 'id="history-off"' in charts.text  # this YAML keeps no history: it says how
    for page in (jobs, charts):  # the config's queue and kind, suggested
        assert '<option value="sync">' in page.text
        assert '<option value="sync_accounts">' in page.text
    went = _steps(dsn, YAML, [("GET", "/jobs/go?id=%234711"), ("GET", "/jobs/go?id=abc")])
    assert went[0].status_code == 303 and went[0].headers["location"] == "/jobs/4711"
    assert went[1].status_code == 400
