"""Job control against real supervisors: cancel a running job (killed, or told on a thread),
pause a queue on two supervisors at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from supervisor import NewJob, cancel, enqueue, enqueue_many
from tests.commands import run_cli
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

SINGLE = """
handlers:
  sleep: tests.handlers:sleep
  record: tests.handlers:record
pools:
  main: {processes: 1, queues: {default: 1}}
jobs:
  sleep: {max_attempts: 5}
shutdown_timeout: 10s
"""

THREADED = """
handlers:
  cooperative: tests.handlers:cooperative
pools:
  web: {processes: 1, threads: 2, queues: {default: 1}}
shutdown_timeout: 10s
"""


def _enqueue(dsn: str, kind: str, args: dict[str, Any], **options: Any) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue(conn, kind, args, **options)


def _events(dsn: str, job_id: int) -> list[tuple[str, int]]:
    return [
        (event, pid)
        for event, pid in query(
            dsn, "SELECT event, pid FROM test_ledger WHERE job_id = %s ORDER BY at", (job_id,)
        )
    ]


def _state(dsn: str, job_id: int) -> str | None:
    return scalar(dsn, "SELECT state FROM pgq.jobs WHERE id = %s", (job_id,))


def test_a_running_job_cancelled_from_the_command_line_stops_and_is_not_retried(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(SINGLE).start()
    job_id = _enqueue(ledger, "sleep", {"seconds": 120})
    wait_for(lambda: _events(ledger, job_id), what="the job to start")
    (_, child_pid), *_ = _events(ledger, job_id)

    done = run_cli(sup.config, "jobs", "cancel", str(job_id), env=sup.env)
    assert done.returncode == 0, done.stderr
    assert f"stopping {job_id}" in done.stdout

    # Within seconds: the master checks every second, then stops the child's process group.
    wait_for(lambda: _state(ledger, job_id) == "cancelled", timeout=10, what="cancelled")
    assert not _pid_alive(child_pid)
    attempts, finished = query(
        ledger, "SELECT attempts, finished_at IS NOT NULL FROM pgq.jobs WHERE id = %s", (job_id,)
    )[0]
    assert (attempts, finished) == (1, True)
    # The replacement child goes on with the queue; the cancelled job never runs again.
    marker = _enqueue(ledger, "record", {})
    wait_for(lambda: _events(ledger, marker), what="the next job to run")
    assert [event for event, _ in _events(ledger, job_id)] == ["started"]
    assert f"job {job_id} (sleep) on queue default was cancelled" in sup.log()
    # The child ended the job itself when the master's TERM came: no SIGKILL was needed.
    last_error = scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (job_id,))
    assert last_error == "cancelled while running; the worker stopped it"
    assert "did not stop within" not in sup.log()

    again = run_cli(sup.config, "jobs", "cancel", str(job_id), "999999", env=sup.env)
    assert again.returncode == 1
    assert f"already finished, left as they are: {job_id} (cancelled)" in again.stderr
    assert "no job 999999" in again.stderr
    assert sup.stop() == 0


BATCHED = """
handlers:
  sleep: tests.handlers:sleep
pools:
  main: {processes: 1, batch: 2, queues: {default: 1}}
shutdown_timeout: 10s
"""


def test_a_claimed_job_cancelled_before_its_turn_never_starts(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    with psycopg.connect(ledger, autocommit=True) as conn:
        first, second = enqueue_many(
            conn, [NewJob("sleep", {"seconds": 3}), NewJob("sleep", {"seconds": 60})]
        )
    sup = supervisor(BATCHED).start()
    wait_for(lambda: _events(ledger, first), what="the first job of the batch to start")
    assert _state(ledger, second) == "running"  # claimed with it, waiting for its turn
    with psycopg.connect(ledger, autocommit=True) as conn:
        assert cancel(conn, second).requested == [second]
    wait_for(lambda: _state(ledger, second) == "cancelled", timeout=15, what="cancelled")
    # It never ran, its attempt was given back, and the child was not stopped for it.
    assert _events(ledger, second) == []
    assert scalar(ledger, "SELECT attempts FROM pgq.jobs WHERE id = %s", (second,)) == 0
    assert [e for e, _ in _events(ledger, first)] == ["started", "finished"]
    assert sup.log().count("spawned main#1") == 1
    assert sup.stop() == 0


def test_a_threaded_handler_sees_the_cancel_and_its_child_keeps_running(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(THREADED).start()
    job_id = _enqueue(ledger, "cooperative", {"seconds": 120})
    wait_for(lambda: _events(ledger, job_id), what="the job to start")
    with psycopg.connect(ledger, autocommit=True) as conn:
        result = cancel(conn, [job_id])
    assert result.requested == [job_id]
    wait_for(lambda: _state(ledger, job_id) == "cancelled", timeout=10, what="cancelled")
    events = _events(ledger, job_id)
    assert [e for e, _ in events] == ["started", "saw_cancel"]
    # Stopped cooperatively: the child that ran it is still there, serving its other thread.
    assert _pid_alive(events[0][1])
    assert sup.stop() == 0


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


PAUSED = """
handlers:
  record: tests.handlers:record
pools:
  main: {{processes: 1, queues: {{reports: 1, {own}: 1}}}}
shutdown_timeout: 10s
"""


def test_a_paused_queue_is_claimed_by_no_supervisor_until_resumed(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sups = [supervisor(PAUSED.format(own=f"own{i}")).start() for i in range(2)]
    for sup in sups:
        sup.wait_children(1)
    paused = run_cli(sups[0].config, "queues", "pause", "reports", env=sups[0].env)
    assert paused.returncode == 0, paused.stderr
    assert "queue reports paused" in paused.stdout
    waiting = [_enqueue(ledger, "record", {}, queue="reports") for _ in range(5)]
    # Both supervisors keep claiming (their own queue's jobs run one after another, and each
    # claim round visits reports by weight), yet nothing of the paused queue is taken.
    for i in range(2):
        for _ in range(4):
            marker = _enqueue(ledger, "record", {}, queue=f"own{i}")
            wait_for(lambda m=marker: _events(ledger, m), what=f"a job of own{i}")
    states = query(ledger, "SELECT state, attempts FROM pgq.jobs WHERE queue = 'reports'")
    assert states == [("available", 0)] * 5
    status = run_cli(sups[0].config, "status", "--json", env=sups[0].env)
    reports = next(q for q in _json(status.stdout)["queues"] if q["queue"] == "reports")
    assert reports["paused"] is True

    resumed = run_cli(sups[1].config, "queues", "resume", "reports", env=sups[1].env)
    assert "queue reports resumed" in resumed.stdout
    wait_for(lambda: all(_events(ledger, j) for j in waiting), what="the paused jobs to run")
    for sup in sups:
        assert sup.stop() == 0


def _json(text: str) -> Any:
    import json

    return json.loads(text)
