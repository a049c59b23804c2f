"""The dashboard's side of issue 23: unknown jobs on the overview and their resolution behind a
confirmation, a batch's progress, a job's kept result."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from supervisor import NewJob, claim, complete, enqueue, enqueue_batch
from supervisor.queue.maintenance import requeue_worker
from tests.integration.test_web_pages import with_client


def _unknown_job(conn: psycopg.Connection[Any]) -> int:
    job_id = enqueue(conn, "charge_card", {"order": 7})
    claim(conn, "default", worker="h:1:a")
    requeue_worker(
        conn,
        "h:1:a",
        "worker main#1 (pid 9) killed by SIGKILL",
        spent=None,
        external_kinds=["charge_card"],
    )
    return job_id


def test_an_unknown_job_is_listed_and_resolved_after_a_confirmation(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    job_id = _unknown_job(conn)

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        overview = await client.get("/")
        page = await client.get(f"/jobs/{job_id}")
        confirm = await client.get(f"/jobs/{job_id}/resolve?as=completed")
        refused = await client.post(f"/jobs/{job_id}/resolve", data={"as": "completed"})
        token = client.cookies["pgq_csrf"]
        done = await client.post(f"/jobs/{job_id}/resolve", data={"as": "completed", "csrf": token})
        after = await client.get(done.headers["location"])
        return [overview, page, confirm, refused, done, after]

    overview, page, confirm, refused, done, after = with_client(dsn, steps)
    assert 'id="unknown"' in overview.text and f'href="/jobs/{job_id}"' in overview.text
    assert "outcome unknown" in overview.text  # the attention line
    assert 'id="resolve-completed"' in page.text and 'id="resolve-retry"' in page.text
    assert confirm.status_code == 200 and "Check the outside system first" in confirm.text
    assert refused.status_code == 403
    assert done.status_code == 303
    assert conn.execute("SELECT 1 FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone() is None
    assert f"job {job_id} resolved: completed" in after.text


def test_a_batch_shows_its_progress_and_a_job_its_result(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    batch = enqueue_batch(
        conn, [NewJob("render", {"n": i}) for i in range(4)], then=NewJob("archive")
    )
    jobs = claim(conn, "default", worker="w", limit=4)
    complete(conn, [jobs[0]._replace(result='{"pages": 12}'), jobs[1]])

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        return [await client.get("/"), await client.get(f"/jobs/{jobs[0].id}")]

    overview, page = with_client(dsn, steps)
    assert f'data-batch="{batch.id}"' in overview.text
    assert "2 / 4" in overview.text and 'value="2"' in overview.text
    # Completed without history: the page says the job is gone, and shows what it returned.
    assert page.status_code == 200
    assert 'id="result"' in page.text
    assert "&#34;pages&#34;: 12" in page.text
