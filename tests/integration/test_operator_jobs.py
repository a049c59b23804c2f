"""`jobs list|show|cancel|retry` and `queues pause|resume|paused` against real PostgreSQL, run
in-process as the operator runs them: what each prints, its exit code, what it changed."""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor import claim, enqueue, settle
from supervisor.queue.outcomes import retry
from tests.integration.operator_helpers import Cli, dead_letter


def test_jobs_list_shows_every_state_with_filters(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    waiting = enqueue(conn, "render_pdf", queue="pdf")
    later = enqueue(conn, "render_pdf", queue="pdf", delay=3600)
    running = enqueue(conn, "deliver_webhook", queue="webhooks")
    claim(conn, "webhooks", worker="w")
    dead = dead_letter(conn, error="Traceback...\nValueError: no such invoice")

    listed = cli("jobs", "list")
    assert listed.code == 0
    lines = listed.out.splitlines()
    assert lines[0].split() == ["ID", "KIND", "QUEUE", "STATE", "ATTEMPTS", "WHEN", "LAST", "ERROR"]
    assert [int(line.split()[0]) for line in lines[1:5]] == [dead, running, later, waiting]
    assert "ValueError: no such invoice" in lines[1]
    assert "due in 59m" in lines[3] or "due in 1h" in lines[3]

    document = cli("jobs", "list", "--state", "running", "--json").json()
    assert [(j["id"], j["state"], j["locked_by"]) for j in document["jobs"]] == [
        (running, "running", "w")
    ]
    assert [j["id"] for j in cli("jobs", "list", "--kind", "render_pdf", "--json").json()["jobs"]][
        -2:
    ] == [later, waiting]
    assert cli("jobs", "list", "--state", "scheduled", "--json").json()["jobs"][0]["id"] == later
    bad = cli("jobs", "list", "--state", "done")
    assert bad.code == 2 and "invalid choice: 'done'" in bad.err


def test_jobs_show_names_the_worker_running_it(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "render_pdf", {"invoice": 7}, queue="pdf")
    conn.execute(
        "INSERT INTO pgq.supervisors (id, host, pid, config) VALUES ('s', 'web-1', 1, 'x.yaml')"
    )
    claim(conn, "pdf", worker="web-1:77:abc")
    conn.execute(
        "INSERT INTO pgq.workers (supervisor_id, worker_id, pool, slot, pid, state, spawned_at)"
        " VALUES ('s', 'web-1:77:abc', 'pdf', 2, 77, 'running', now())"
    )
    shown = cli("jobs", "show", str(job_id))
    assert shown.code == 0
    assert shown.out.startswith(f"job {job_id}: render_pdf on queue pdf, running")
    assert "runs on     web-1: pdf#2 (pid 77), worker web-1:77:abc" in shown.out
    assert '"invoice": 7' in shown.out
    assert cli("jobs", "show", str(job_id), "--json").json()["pid"] == 77
    missing = cli("jobs", "show", "999999")
    assert missing.code == 1 and "no job 999999" in missing.err


def test_jobs_show_lists_the_earlier_errors_newest_first(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    job_id = enqueue(conn, "render_pdf", queue="pdf")
    for n in (1, 2, 3):
        (job,) = claim(conn, "pdf", worker="w")
        settle(conn, [retry(job, 0, f"Traceback ...\nValueError: failure {n}")])
    shown = cli("jobs", "show", str(job_id))
    assert shown.code == 0
    last, earlier = shown.out.split("earlier errors (2 kept):\n")
    assert "ValueError: failure 3" in last
    lines = earlier.splitlines()
    assert lines[0].startswith("  #2 attempt 2 at ") and lines[0].endswith("ValueError: failure 2")
    assert lines[1].startswith("  #1 attempt 1 at ") and lines[1].endswith("ValueError: failure 1")
    once = enqueue(conn, "render_pdf", queue="mail")
    (job,) = claim(conn, "mail", worker="w")
    settle(conn, [retry(job, 3600, "boom")])
    assert "earlier errors" not in cli("jobs", "show", str(once)).out
    assert [e["error"] for e in cli("jobs", "show", str(job_id), "--json").json()["errors"]] == [
        f"Traceback ...\nValueError: failure {n}" for n in (1, 2, 3)
    ]


def test_jobs_retry_runs_a_waiting_retry_now_and_refuses_the_rest(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    job_id = enqueue(conn, "render_pdf", queue="pdf")
    (job,) = claim(conn, "pdf", worker="w")
    settle(conn, [retry(job, 3600, "boom")])
    done = cli("jobs", "retry", str(job_id))
    assert (done.code, done.out) == (0, f"job {job_id} on queue pdf is due now (attempts kept)\n")
    (again,) = claim(conn, "pdf", worker="w")
    assert again.attempts == 2
    running = cli("jobs", "retry", str(job_id))
    assert running.code == 1 and "is running, not waiting" in running.err
    dead = dead_letter(conn)
    refused = cli("jobs", "retry", str(dead))
    assert refused.code == 1 and f"jobs replay {dead}" in refused.err


def test_queues_pause_resume_and_paused(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    assert cli("queues", "paused").out == "no queue is paused\n"
    paused = cli("queues", "pause", "pdf", "reports")
    assert paused.out.splitlines() == [
        "queue pdf paused: no new claims on any host; running jobs finish",
        "queue reports paused: no new claims on any host; running jobs finish",
    ]
    assert cli("queues", "pause", "pdf").out == "queue pdf was already paused\n"
    assert [line.split()[0] for line in cli("queues", "paused").out.splitlines()] == [
        "pdf",
        "reports",
    ]
    enqueue(conn, "render_pdf", queue="pdf")
    assert claim(conn, "pdf", worker="w") == []
    assert cli("queues", "resume", "pdf", "nope").out.splitlines() == [
        "queue pdf resumed",
        "queue nope was not paused",
    ]
    assert len(claim(conn, "pdf", worker="w")) == 1
    assert cli("queues", "pause").code == 2  # a queue is required
