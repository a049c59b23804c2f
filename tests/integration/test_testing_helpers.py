"""supervisor.testing: a handler run inline gets the supervisor's verdict; drain runs a
database's due jobs with the supervisor's outcome rules."""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor import Discard, JobContext, NewJob, Retry, Snooze, cancel, enqueue, enqueue_many
from supervisor.testing import drain, run_inline


def test_run_inline_reports_each_outcome() -> None:
    seen: list[JobContext] = []

    def handler(n: int, *, job: JobContext) -> None:
        seen.append(job)
        if n == 1:
            raise Retry(delay=30, reason="later")
        if n == 2:
            raise Discard("gone")
        if n == 3:
            raise Snooze(5)
        if n == 4:
            raise ValueError("boom")

    assert run_inline(handler, {"n": 0}).completed
    retry = run_inline(handler, {"n": 1})
    assert (retry.status, retry.delay) == ("retry", 30.0)
    assert run_inline(handler, {"n": 2}).status == "discard"
    assert (run_inline(handler, {"n": 3}).status, run_inline(handler, {"n": 3}).delay) == (
        "snooze",
        5.0,
    )
    failed = run_inline(handler, {"n": 4}, attempt=2)
    assert failed.status == "retry" and isinstance(failed.exception, ValueError)
    assert failed.delay is not None and 2.0 <= failed.delay <= 4.0  # backoff for attempt 2
    last = run_inline(handler, {"n": 4}, attempt=3, max_attempts=3)
    assert last.status == "discard" and "no attempts left" in (last.error or "")
    assert seen[0].attempt == 1 and seen[0].lease_held()

    def polite(*, job: JobContext) -> None:
        if job.cancelled():
            return

    assert run_inline(polite, cancelled=True).status == "cancelled"


def test_drain_runs_due_jobs_with_the_supervisors_rules(conn: psycopg.Connection[Any]) -> None:
    ran: list[int] = []

    def ok(n: int) -> None:
        ran.append(n)

    def flaky(*, job: JobContext) -> None:
        raise RuntimeError(f"attempt {job.attempt} failed")

    for n in range(3):
        enqueue(conn, "ok", {"n": n})
    flaky_id = enqueue(conn, "flaky", max_attempts=1)
    enqueue(conn, "later", delay=3600)
    enqueue(conn, "unknown")
    gone = enqueue(conn, "ok", {"n": 99})
    cancel(conn, gone)

    report = drain(conn, {"ok": ok, "flaky": flaky})
    assert sorted(ran) == [0, 1, 2]
    assert report.by_status == {"completed": 3, "discard": 1, "retry": 1}
    states = dict(conn.execute("SELECT kind, state FROM pgq.jobs WHERE kind <> 'ok'").fetchall())
    # A job due later, and an unknown kind's retry after its backoff, wait as scheduled.
    assert states == {"flaky": "discarded", "later": "scheduled", "unknown": "scheduled"}
    last_error = conn.execute("SELECT last_error FROM pgq.jobs WHERE id = %s", (flaky_id,))
    assert "attempt 1 failed" in last_error.fetchone()[0]
    assert drain(conn, {"ok": ok}).runs == []  # nothing due any more
    # A scheduled job whose time has come is staged and run, as a supervisor's stager would.
    conn.execute("UPDATE pgq.jobs SET run_at = now() WHERE kind = 'later'")
    assert drain(conn, {"later": ok_later}).by_status == {"completed": 1}


def ok_later() -> None:
    pass


def test_drain_rotates_between_a_queues_tenants_as_a_child_does(
    conn: psycopg.Connection[Any],
) -> None:
    """One tenant's backlog enqueued first does not run before another's few jobs: the drain's
    claims take turns between tenants, as a supervisor's child would."""
    order: list[str] = []

    def record(tenant: str) -> None:
        order.append(tenant)

    enqueue_many(conn, [NewJob("record", {"tenant": "flood"}, tenant="flood") for _ in range(4)])
    enqueue_many(conn, [NewJob("record", {"tenant": "quiet"}, tenant="quiet") for _ in range(2)])
    enqueue(conn, "record", {"tenant": "none"})
    drain(conn, {"record": record})
    # Tenant keys in order ('' for none), one job a turn, each tenant's own jobs in order.
    assert order == ["none", "flood", "quiet", "flood", "quiet", "flood", "flood"]
