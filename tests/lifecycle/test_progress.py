"""A job's progress on a real supervisor: `job.progress()` from an inline and a threaded
handler, seen by `jobs show --json`, the dashboard's job page and its running-jobs list (the
Workers page) while the job runs, and kept after it finished."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from tests.commands import run_cli
from tests.integration.test_web_pages import with_client
from tests.lifecycle.harness import Supervisor, scalar, wait_for

CONFIG = """
handlers:
  paged: tests.handlers:paged
history: {enabled: true}
pools:
  inline:
    queues: {inline: 1}
  threaded:
    queues: {threaded: 1}
    threads: 2
"""


def show(sup: Supervisor, job_id: int) -> dict[str, Any]:
    env = {**os.environ, "PGQ_DSN": sup.dsn}
    done = run_cli(sup.config, "jobs", "show", str(job_id), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("queue", ["inline", "threaded"])
def test_progress_is_seen_while_the_job_runs_and_kept_after(
    supervisor: Callable[..., Supervisor], ledger: str, queue: str
) -> None:
    sup = supervisor(CONFIG).start()
    with psycopg.connect(ledger) as conn:
        (job_id,) = enqueue_many(conn, [NewJob("paged", {"pages": 16}, queue=queue)])

    def midway() -> dict[str, Any] | None:
        doc = show(sup, job_id)
        said = doc.get("progress")
        running = doc.get("state") == "running"
        return doc if running and said and 0.2 <= said["fraction"] < 1.0 else None

    doc = wait_for(midway, 30, interval=0.2, what="progress midway\n" + sup.log())
    assert doc["progress"]["message"].startswith("page ")
    assert doc["progress"]["attempt"] == 1

    async def pages(client: httpx.AsyncClient) -> tuple[str, str]:
        job = await client.get(f"/jobs/{job_id}")
        workers = await client.get("/workers")
        return job.text, workers.text

    def on_the_dashboard() -> bool:
        job, workers = with_client(ledger, pages)
        return 'id="progress"' in job and 'data-figure="progress"' in workers

    wait_for(on_the_dashboard, 15, interval=0.5, what="progress on the dashboard")
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.job_history") == 1, 30)
    after = show(sup, job_id)
    assert after["state"] == "completed"
    assert after["progress"]["fraction"] == 1.0 and after["progress"]["message"] == "done"
