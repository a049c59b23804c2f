"""What a handler asks of its child (``job.lease_held()``, ``job.cancelled()``) is answered
truly, from real children against a real database: a cut session is "could not ask", never
"lost"; handler threads asking many times beside the main thread's claims and writes get no
wrong answer, no psycopg error and no crash; an attempt that stopped because its lease was lost
is never recorded completed."""

from __future__ import annotations

from collections.abc import Callable

import psycopg

from supervisor import NewJob, enqueue, enqueue_many
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

INLINE = """
handlers:
  ten_steps: tests.handlers:ten_steps
pools:
  main: {processes: 1, queues: {default: 1}}
shutdown_timeout: 10s
"""

THREADED = """
handlers:
  chatty: tests.handlers:chatty
pools:
  web: {processes: 2, threads: 6, batch: 6, queues: {default: 1}}
shutdown_timeout: 10s
"""


def _events(dsn: str, job_id: int) -> list[str]:
    rows = query(dsn, "SELECT event FROM test_ledger WHERE job_id = %s ORDER BY at", (job_id,))
    return [event for (event,) in rows]


def _gone(dsn: str, job_id: int) -> bool:
    """Completed: a completed job's row is deleted."""
    return scalar(dsn, "SELECT count(*) FROM pgq.jobs WHERE id = %s", (job_id,)) == 0


def _terminate_child_sessions(dsn: str) -> int:
    return len(
        query(
            dsn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE 'pgq-supervisor main#%%' AND datname = current_database()",
        )
    )


def test_a_cut_session_is_not_a_lost_lease(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """The child's session is terminated while its handler runs (a failover, a pooler
    restart). The lease was never lost: the handler keeps going, and the job is recorded
    completed only with all ten steps done."""
    sup = supervisor(INLINE).start()
    with psycopg.connect(ledger, autocommit=True) as conn:
        job_id = enqueue(conn, "ten_steps", {"step_seconds": 0.3})
    wait_for(lambda: "step 1" in _events(ledger, job_id), what="the handler's second step")
    assert _terminate_child_sessions(ledger) == 1
    wait_for(lambda: _gone(ledger, job_id), timeout=30, what="the job to be recorded")
    events = _events(ledger, job_id)
    assert events[-1] == "all steps", events
    assert not any(e.startswith("stopped") for e in events)
    assert sup.stop() == 0


def test_an_attempt_that_saw_its_lease_run_out_is_not_recorded_completed(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """The job's lease ran out while its handler ran (nobody else holds it yet: no rescue has
    come by). The handler sees lease_held() false and returns early, as the README says. That
    return is not a success: the fence alone would let the write through (the lease id is still
    this attempt's), yet the job is given back and runs again, to the end."""
    sup = supervisor(INLINE + "lease: {duration: 90s, renew_every: 30s}\n").start()
    with psycopg.connect(ledger, autocommit=True) as conn:
        job_id = enqueue(conn, "ten_steps", {"step_seconds": 0.3})
    wait_for(lambda: "step 0" in _events(ledger, job_id), what="the handler's first step")
    query(
        ledger,
        "UPDATE pgq.jobs SET lease_until = now() - interval '1 second' WHERE id = %s RETURNING id",
        (job_id,),
    )
    wait_for(lambda: _gone(ledger, job_id), timeout=30, what="the job to be recorded")
    rows = query(
        ledger, "SELECT attempt, event FROM test_ledger WHERE job_id = %s ORDER BY at", (job_id,)
    )
    events = [event for _, event in rows]
    stopped = next(i for i, e in enumerate(events) if e.startswith("stopped"))
    # Run again from the start after the attempt that stopped, and to the end.
    assert events[stopped + 1 :] == [f"step {i}" for i in range(10)] + ["all steps"], events
    # Given back without spending an attempt: the lease's end was not the job's failure.
    assert {attempt for attempt, _ in rows} == {1}
    assert sup.stop() == 0


def test_handler_threads_asking_beside_claims_and_writes_get_true_answers(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """Six handler threads per child ask lease_held() and cancelled() again and again while
    the main thread claims and writes batches with quick retries (outcomes and claims in one
    round trip). Nothing was cancelled or lost: every answer must say so, no psycopg object
    may be shared between threads, nothing crashes, and no job spends an extra attempt."""
    jobs = 240
    with psycopg.connect(ledger, autocommit=True) as conn:
        ids = enqueue_many(conn, [NewJob("chatty", {"asks": 200}) for _ in range(jobs)])
    sup = supervisor(THREADED).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0,
        timeout=90,
        what="every job to complete",
    )
    wrong = scalar(ledger, "SELECT count(*) FROM test_ledger WHERE event = 'wrong answer'")
    runs = query(
        ledger,
        "SELECT job_id, array_agg(attempt ORDER BY attempt) FROM test_ledger "
        "WHERE event = 'ran' GROUP BY job_id",
    )
    assert sup.stop() == 0
    log = sup.log()
    assert wrong == 0
    assert {job_id: attempts for job_id, attempts in runs} == {i: [1, 2, 3] for i in ids}
    for sign in ("crashed", "Traceback", "another command is already in progress", "requeued"):
        assert sign not in log, sign
