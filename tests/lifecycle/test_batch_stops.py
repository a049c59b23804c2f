"""The unstarted rest of a claimed batch hears a pause and each cancel before it starts: a
single-threaded child with ``batch: 4`` holds three jobs while the first runs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import psycopg

from supervisor import NewJob, cancel, enqueue_many, pause_queue, resume_queue
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

BATCHED = """
handlers:
  wait_for_file: tests.handlers:wait_for_file
  record: tests.handlers:record
pools:
  main: {processes: 1, batch: 4, queues: {default: 1}}
shutdown_timeout: 10s
"""


def _events(dsn: str, job_id: int) -> list[str]:
    rows = query(dsn, "SELECT event FROM test_ledger WHERE job_id = %s ORDER BY at", (job_id,))
    return [event for (event,) in rows]


def _row(dsn: str, job_id: int) -> tuple[str, int] | None:
    rows = query(dsn, "SELECT state, attempts FROM pgq.jobs WHERE id = %s", (job_id,))
    return rows[0] if rows else None  # type: ignore[return-value]


def _batch(
    supervisor: Callable[..., Supervisor], dsn: str, marker: Path
) -> tuple[Supervisor, int, list[int]]:
    """A batch of four claimed together: the first runs until ``marker`` exists."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        first, *rest = enqueue_many(
            conn,
            [NewJob("wait_for_file", {"path": str(marker)})] + [NewJob("record", {})] * 3,
        )
    sup = supervisor(BATCHED).start()
    wait_for(lambda: _events(dsn, first), what="the batch's first job to start")
    assert all(_row(dsn, j) == ("running", 1) for j in rest)  # claimed with it, waiting
    return sup, first, rest


def test_a_pause_gives_back_the_unstarted_rest_of_a_batch(
    supervisor: Callable[..., Supervisor], ledger: str, tmp_path: Path
) -> None:
    marker = tmp_path / "go"
    sup, first, rest = _batch(supervisor, ledger, marker)
    with psycopg.connect(ledger, autocommit=True) as conn:
        assert pause_queue(conn, "default")
    marker.touch()
    # The running job finishes; the other three go back to the queue without spending their
    # attempt, and none of them starts while the queue is paused.
    wait_for(
        lambda: all(_row(ledger, j) == ("available", 0) for j in rest),
        timeout=15,
        what="the unstarted jobs to be given back",
    )
    assert _events(ledger, first) == ["started", "finished"]
    assert scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = %s", (first,)) == 0
    assert all(_events(ledger, j) == [] for j in rest)
    with psycopg.connect(ledger, autocommit=True) as conn:
        assert resume_queue(conn, "default")
    wait_for(lambda: all(_events(ledger, j) == ["ran"] for j in rest), what="them to run")
    assert sup.stop() == 0


def test_two_unstarted_jobs_cancelled_in_the_same_second_both_never_start(
    supervisor: Callable[..., Supervisor], ledger: str, tmp_path: Path
) -> None:
    marker = tmp_path / "go"
    sup, _, (second, third, fourth) = _batch(supervisor, ledger, marker)
    with psycopg.connect(ledger, autocommit=True) as conn:
        assert cancel(conn, [second, third]).requested == [second, third]
    marker.touch()
    wait_for(lambda: _events(ledger, fourth) == ["ran"], what="the batch's last job to run")
    wait_for(
        lambda: all(_row(ledger, j) == ("cancelled", 0) for j in (second, third)),
        timeout=15,
        what="both cancelled",
    )
    # Neither ran; both got their attempt back; the child was not stopped for them.
    assert _events(ledger, second) == _events(ledger, third) == []
    assert sup.log().count("spawned main#1") == 1
    assert sup.stop() == 0
