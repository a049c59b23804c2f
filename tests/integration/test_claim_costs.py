"""What attempts cost rides in the claim that writes their outcomes (sql/claim/completions.sql,
``spent``), and a child without history sends the claims without the history's steps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.child import completer as completer_module
from supervisor.queue.claim_builder import UNRECORDED, VARIANTS
from tests.child_worker import in_process_worker, spy_on_claim_variants

CONFIG = """
handlers:
  noop: tests.handlers:noop
  fail: tests.handlers:fail
pools:
  main: {processes: 1, batch: %d, queues: {default: 1}}
history: {enabled: %s}
"""


def _run(dsn: str, tmp_path: Path, history: bool, rounds: int, batch: int = 1) -> Any:
    """A child's inline loop in this process: claim a batch, run it, ``rounds`` times."""
    config = CONFIG % (batch, str(history).lower())
    worker = in_process_worker(dsn, tmp_path, config, handlers=True)
    parts = worker.parts
    parts.process.after_fork = lambda: None
    assert parts.session.connect()
    try:
        for _ in range(rounds):
            jobs = parts.claimer.claim(batch)
            for job in jobs:
                parts.completer.add(job, parts.executor.run(job))
        parts.completer.flush()
    finally:
        parts.session.discard()
    return parts


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The variant of every claim the child sends; a cost written beside a claim fails."""

    def refuse(*_: Any) -> None:
        raise AssertionError("costs written in a statement of their own beside a claim")

    monkeypatch.setattr(completer_module.costs, "record", refuse)
    return spy_on_claim_variants(monkeypatch)


def test_a_child_keeping_history_writes_each_attempts_cost_in_its_next_claim(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, sent: list[str]
) -> None:
    ids = enqueue_many(conn, [NewJob("noop") for _ in range(3)])
    _run(dsn, tmp_path, history=True, rounds=4)
    rows = conn.execute(
        "SELECT job_id, attempt, queue, kind, tenant, outcome, cpu_seconds >= 0,"
        " peak_memory > 0 FROM pgq.attempt_costs ORDER BY job_id"
    ).fetchall()
    assert rows == [(i, 1, "default", "noop", None, "completed", True, True) for i in ids]
    assert conn.execute("SELECT count(*) FROM pgq.job_history").fetchone() == (3,)
    # Every claim that carried an outcome records history and costs (no _unrecorded).
    assert sent and not [v for v in sent if v.endswith(UNRECORDED)]


def test_a_failed_attempts_cost_rides_beside_its_settle_in_the_claim(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, sent: list[str]
) -> None:
    (job,) = enqueue_many(conn, [NewJob("fail", {"times": 5}, max_attempts=1)])
    _run(dsn, tmp_path, history=True, rounds=2)
    assert conn.execute("SELECT job_id, outcome FROM pgq.attempt_costs").fetchall() == [
        (job, "discarded")
    ]


def test_a_child_without_history_sends_the_claims_without_its_steps(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, sent: list[str]
) -> None:
    enqueue_many(conn, [NewJob("noop") for _ in range(3)])
    _run(dsn, tmp_path, history=False, rounds=4)
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgq.attempt_costs").fetchone() == (0,)
    carried = [v for v in sent if VARIANTS[v][4]]
    assert carried and all(v.endswith(UNRECORDED) and not VARIANTS[v][5] for v in carried)


def test_an_attempt_written_on_its_own_keeps_its_cost_and_the_child_forgets_it(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """A batch whose write the database refuses is written job by job (Completer's
    _write_one_by_one): each outcome written so keeps its cost beside it, and the child's map
    of costs keeps only the refused job's, for when its outcome is written."""
    conn.execute(
        """
        CREATE FUNCTION public.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.args ? 'refuse' THEN RAISE EXCEPTION 'refused by a trigger'; END IF;
            RETURN OLD;
        END $$;
        CREATE TRIGGER refuse BEFORE DELETE ON pgq.jobs
        FOR EACH ROW EXECUTE FUNCTION public.refuse();
        """
    )
    good, bad = enqueue_many(conn, [NewJob("noop"), NewJob("noop", {"refuse": True})])
    parts = _run(dsn, tmp_path, history=True, rounds=1, batch=2)
    assert conn.execute("SELECT job_id, outcome FROM pgq.attempt_costs").fetchall() == [
        (good, "completed")
    ]
    assert list(parts.executor.costs) == [bad]
    assert [j.id for j in parts.completer.done] == [bad]
