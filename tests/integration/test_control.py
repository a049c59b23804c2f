"""The control API on real PostgreSQL: what cancel, pause, retry_now and the read functions do
and say, and how a cancel request ends each way a claim can end."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from supervisor import (
    cancel,
    claim,
    enqueue,
    list_jobs,
    pause_queue,
    paused_queues,
    resume_queue,
    retry_now,
    settle,
    show_job,
)
from supervisor.queue import control, maintenance, outcomes


def _row(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT state, attempts, finished_at IS NOT NULL FROM pgq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return row


def test_cancel_says_what_happened_to_each_job(conn: psycopg.Connection[Any]) -> None:
    waiting = enqueue(conn, "k")
    later = enqueue(conn, "k", delay=3600)
    running = enqueue(conn, "k", queue="busy")
    (job,) = claim(conn, "busy", worker="w")
    dead = enqueue(conn, "k", queue="dead", max_attempts=1)
    (doomed,) = claim(conn, "dead", worker="w")
    settle(conn, [outcomes.discard(doomed, "bad")])

    result = cancel(conn, [waiting, later, running, dead, 424242], history=True)
    assert result.cancelled == [waiting, later]
    assert result.requested == [running]
    assert result.finished == {dead: "discarded"}
    assert result.missing == [424242]
    assert _row(conn, waiting) == ("cancelled", 0, True)
    # The running job is untouched under its fence until its claim ends.
    assert _row(conn, running) == ("running", 1, False)
    assert control.cancel_requested(conn, job.id, job.lease_id)
    assert [r.id for r in control.cancel_requests(conn, ["w"])] == [running]
    # Cancelling again says it is over.
    assert cancel(conn, waiting).finished == {waiting: "cancelled"}
    outcome = conn.execute(
        "SELECT outcome FROM pgq.job_history WHERE id = %s", (waiting,)
    ).fetchone()
    assert outcome == ("cancelled",)


@pytest.mark.parametrize(
    "ending",
    ["retry", "snooze", "release", "requeue", "rescue", "handler saw it"],
)
def test_a_cancel_request_ends_the_claim_cancelled_however_it_ends(
    conn: psycopg.Connection[Any], ending: str
) -> None:
    job_id = enqueue(conn, "k", max_attempts=5)
    (job,) = claim(conn, "default", worker="w", lease_seconds=60)
    cancel(conn, job_id)
    if ending == "requeue":
        maintenance.requeue_worker(conn, "w", "worker stopped: job cancelled", spent=[job_id])
    elif ending == "rescue":
        conn.execute(
            "UPDATE pgq.jobs SET lease_until = now() - interval '1s' WHERE id = %s", (job_id,)
        )
        maintenance.rescue(conn)
    else:
        settlement = {
            "retry": outcomes.retry(job, 1.0, "boom"),
            "snooze": outcomes.snooze(job, 1.0),
            "release": outcomes.release(job),
            "handler saw it": outcomes.cancelled(job, "stopped"),
        }[ending]
        assert settle(conn, [settlement]).kept == [job]
    state, _, finished = _row(conn, job_id)
    assert (state, finished) == ("cancelled", True)
    assert control.cancel_requests(conn, ["w"]) == []


def test_a_paused_queue_yields_no_claim_until_resumed(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "k", queue="q")
    assert pause_queue(conn, "q") is True
    assert pause_queue(conn, "q") is False
    assert claim(conn, "q", worker="w") == []
    assert [p.queue for p in paused_queues(conn)] == ["q"]
    stats = {s.queue: s for s in maintenance.queue_stats(conn)}
    assert stats["q"].paused and stats["q"].available == 1
    assert resume_queue(conn, "q") is True
    assert resume_queue(conn, "q") is False
    assert len(claim(conn, "q", worker="w")) == 1
    # A queue may be paused before it has jobs, and shows in the figures.
    pause_queue(conn, "empty")
    assert {s.queue: s for s in maintenance.queue_stats(conn)}["empty"].paused
    with pytest.raises(ValueError, match="queue name"):
        pause_queue(conn, " ")


def test_retry_now_makes_a_waiting_job_due_and_refuses_others(
    conn: psycopg.Connection[Any],
) -> None:
    job_id = enqueue(conn, "k", max_attempts=3)
    (job,) = claim(conn, "default", worker="w")
    settle(conn, [outcomes.retry(job, 3600, "boom")])
    assert claim(conn, "default", worker="w") == []
    moved = retry_now(conn, job_id)
    assert moved is not None and moved.previous_state == "scheduled"  # a retry for later waits so
    assert moved.previous_run_at > datetime.now(timezone.utc) + timedelta(minutes=50)
    (again,) = claim(conn, "default", worker="w")
    assert again.attempts == 2  # attempts kept
    assert retry_now(conn, job_id) is None  # running now


def test_list_and_show_jobs(conn: psycopg.Connection[Any]) -> None:
    a = enqueue(conn, "alpha", {"n": 1}, queue="q1")
    b = enqueue(conn, "beta", queue="q2")
    cancel(conn, b)
    assert [j.id for j in list_jobs(conn)] == [b, a]
    assert [j.id for j in list_jobs(conn, state="cancelled")] == [b]
    assert [j.id for j in list_jobs(conn, queue="q1", kind="alpha")] == [a]
    assert list_jobs(conn, state="scheduled") == []
    with pytest.raises(ValueError, match="unknown job state 'done'"):
        list_jobs(conn, state="done")
    conn.execute(
        "INSERT INTO pgq.supervisors (id, host, pid, config) VALUES ('s', 'web-1', 1, 'x.yaml')"
    )
    (job,) = claim(conn, "q1", worker="web-1:77:abc")
    conn.execute(
        "INSERT INTO pgq.workers (supervisor_id, worker_id, pool, slot, pid, state, spawned_at)"
        " VALUES ('s', 'web-1:77:abc', 'main', 2, 77, 'running', now())"
    )
    detail = show_job(conn, job.id)
    assert detail is not None
    assert (detail.state, detail.args, detail.host, detail.pool, detail.slot, detail.pid) == (
        "running",
        {"n": 1},
        "web-1",
        "main",
        2,
        77,
    )
    assert show_job(conn, 999999) is None


def test_purge_deletes_old_cancelled_jobs_with_the_dead_letters(
    conn: psycopg.Connection[Any],
) -> None:
    old = enqueue(conn, "k")
    cancel(conn, old)
    fresh = enqueue(conn, "k")
    cancel(conn, fresh)
    conn.execute(
        "UPDATE pgq.jobs SET finished_at = now() - interval '30 days' WHERE id = %s", (old,)
    )
    purged = maintenance.purge_discarded(conn, datetime.now(timezone.utc) - timedelta(days=14))
    assert purged == 1
    assert [j.id for j in list_jobs(conn)] == [fresh]
