"""Every error kept (pgq.jobs.errors, migration 0009): appended by each write that records
last_error, capped to the most recent 25, carried into the history, found there by id."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest

from supervisor import NewJob, cancel, claim, complete, enqueue_many, settle
from supervisor.queue import migrations, outcomes
from supervisor.queue.jobs import Job
from supervisor.queue.maintenance import ensure_history_partitions, requeue_worker, rescue_batch
from supervisor.web.jobpage import errors_of
from supervisor.web.reads import dashboard_query
from tests.integration.test_web_pages import with_client

KEPT = 25


def _errors(conn: psycopg.Connection[Any], job_id: int) -> list[dict[str, Any]] | None:
    row = conn.execute("SELECT errors FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    errors: list[dict[str, Any]] | None = row[0]
    return errors


def _history(conn: psycopg.Connection[Any], job_id: int) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT outcome, attempts, errors FROM pgq.job_history WHERE id = %s ORDER BY finished_at",
        (job_id,),
    ).fetchall()


def _one(conn: psycopg.Connection[Any], worker: str = "w:1:a") -> Job:
    (job,) = claim(conn, "default", worker=worker)
    return job


def _fail(conn: psycopg.Connection[Any], error: str) -> None:
    """Claim the job and record a failed attempt, due again at once."""
    assert settle(conn, [outcomes.retry(_one(conn), 0, error)]).kept


def test_each_failure_is_appended_and_a_healthy_job_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    ensure_history_partitions(conn)
    flaky, healthy = enqueue_many(conn, [NewJob("k", max_attempts=5), NewJob("k", queue="ok")])
    # Times are kept in UTC, six fractional digits, whatever the session's zone.
    conn.execute("SET TimeZone = 'Asia/Kolkata'")
    _fail(conn, "first")
    _fail(conn, "second")
    # A release (and a snooze) gives the attempt back and records no error: nothing appended.
    assert settle(conn, [outcomes.release(_one(conn))]).kept
    errors = _errors(conn, flaky)
    assert [(e["seq"], e["attempt"], e["error"]) for e in errors or []] == [
        (1, 1, "first"),
        (2, 2, "second"),
    ]
    assert errors and errors[0]["at"] <= errors[1]["at"]
    at = errors[0]["at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00", at), at
    assert datetime.fromisoformat(at).utcoffset() == timedelta(0)
    assert conn.execute("SELECT last_error FROM pgq.jobs WHERE id = %s", (flaky,)).fetchone() == (
        "second",
    )
    # Claimed and completed, the healthy job never had errors: NULL stays NULL.
    (ok,) = claim(conn, "ok", worker="w:1:a")
    assert _errors(conn, healthy) is None
    assert complete(conn, [ok], history=True).kept
    assert _history(conn, healthy) == [("completed", 1, None)]
    # The flaky one completes on its third attempt and carries both errors into the history.
    assert complete(conn, [_one(conn)], history=True).kept
    ((outcome, attempts, kept),) = _history(conn, flaky)
    assert (outcome, attempts) == ("completed", 3)
    assert [e["error"] for e in kept] == ["first", "second"]


def test_only_the_most_recent_25_are_kept_and_the_page_says_how_many_were_dropped(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    (job_id,) = enqueue_many(conn, [NewJob("k", max_attempts=100)])
    for n in range(1, 31):
        _fail(conn, f"failure {n}")
    errors = _errors(conn, job_id) or []
    assert len(errors) == KEPT
    assert [e["seq"] for e in errors] == list(range(6, 31))
    assert [e["error"] for e in errors] == [f"failure {n}" for n in range(6, 31)]
    assert errors_of(errors).dropped == 5

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.get(f"/jobs/{job_id}")

    page = with_client(dsn, steps)
    assert page.status_code == 200
    assert "25 kept, newest first; 5 older ones were dropped" in page.text
    # Newest first: failure 30 leads, failure 6 ends the list, failure 5 is gone.
    assert page.text.index("failure 30") < page.text.index("failure 6<")
    assert "failure 5<" not in page.text


def test_rescue_requeue_and_cancel_keep_the_errors_they_record(
    conn: psycopg.Connection[Any],
) -> None:
    ensure_history_partitions(conn)
    (job_id,) = enqueue_many(conn, [NewJob("k", max_attempts=10)])
    # A lease that ran out: the rescuer records it.
    _one(conn, worker="host:1:gone")
    conn.execute(
        "UPDATE pgq.jobs SET lease_until = now() - interval '1 s' WHERE id = %s", (job_id,)
    )
    assert [m.id for m in rescue_batch(conn)] == [job_id]
    # A worker that died running it (attempt spent): its reason is recorded.
    _one(conn, worker="host:2:dead")
    assert requeue_worker(conn, "host:2:dead", "worker host:2:dead died", spent=[job_id])
    # A worker that died holding it unstarted (attempt given back): no error, nothing appended.
    _one(conn, worker="host:3:dead")
    assert requeue_worker(conn, "host:3:dead", "worker host:3:dead died", spent=[])
    errors = _errors(conn, job_id) or []
    assert [(e["attempt"], e["error"]) for e in errors] == [
        (1, "lease expired: worker host:1:gone stopped renewing it"),
        (2, "worker host:2:dead died"),
    ]
    # Cancelled while it waits, it carries them into the history.
    cancel(conn, job_id, history=True)
    ((outcome, _, kept),) = _history(conn, job_id)
    assert outcome == "cancelled" and kept == errors


def test_history_is_found_by_id_on_partitions_made_before_and_after_the_migration(
    empty_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    every = migrations.available()
    before = [m for m in every if m.version < 9]
    monkeypatch.setattr(migrations, "available", lambda: before)
    migrations.migrate(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        ensure_history_partitions(conn, days_ahead=1)
        monkeypatch.setattr(migrations, "available", lambda: every)
        applied = [m.version for m in migrations.migrate(conn)]
        assert applied == [m.version for m in every if m.version >= 9]
        # Days the supervisor adds later: their partitions get the index when attached.
        conn.execute("SELECT pgq.ensure_history_partitions(now() + interval '1 day', 3)")
        unindexed = conn.execute(
            """
            SELECT p.inhrelid::regclass::text
            FROM pg_inherits AS p
            WHERE p.inhparent = 'pgq.job_history'::regclass
              AND NOT EXISTS (
                  SELECT 1
                  FROM pg_inherits AS i
                  JOIN pg_index AS x ON x.indexrelid = i.inhrelid
                  WHERE i.inhparent = 'pgq.job_history_id'::regclass
                    AND x.indrelid = p.inhrelid)
            """
        ).fetchall()
        partitions = conn.execute(
            "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgq.job_history'::regclass"
        ).fetchone()
        assert partitions is not None and partitions[0] >= 6  # default, 2 before, 3+ after
        assert unindexed == []
        # The job page's look-up reads the index of every partition, whatever their size.
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                "EXPLAIN " + dashboard_query("web_job_history"),
                {"id": 1, "since": None, "limit": 10},
            )
        )
        assert "Seq Scan" not in plan and "id_idx" in plan, plan
