"""Outcome unknown, results and batches with the real supervisor (issue 23): real children
killed, real timeouts, a lost lease, the reconciler's forked rounds, the CLI."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, enqueue, enqueue_batch, result
from tests.commands import run_cli
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

EXTERNAL = """
handlers:
  charge: tests.outcome_handlers:charge
pools:
  main: {processes: 1, queues: {default: 1}}
jobs:
  charge: {effects: external, timeout: %(timeout)s, backoff: {base: 100ms, cap: 200ms}}
"""

HOOKED = """
handlers:
  charge: tests.outcome_handlers:charge
pools:
  main: {processes: 1, queues: {default: 1}}
jobs:
  charge:
    effects: external
    reconcile: tests.outcome_handlers:ask_ledger
    timeout: 1s
reconcile: {interval: 200ms, timeout: 10s}
"""


def _state(dsn: str, job_id: int) -> str | None:
    rows = query(dsn, "SELECT state FROM pgq.jobs WHERE id = %s", (job_id,))
    return rows[0][0] if rows else None


def _events(dsn: str, job_id: int, event: str = "started") -> list[tuple[Any, ...]]:
    return query(
        dsn,
        "SELECT attempt, pid FROM test_ledger WHERE job_id = %s AND event = %s ORDER BY at",
        (job_id, event),
    )


def _enqueue(dsn: str, kind: str, args: dict[str, Any], **kwargs: Any) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue(conn, kind, args, **kwargs)


def _unknown(dsn: str, job_id: int, timeout: float = 30) -> None:
    wait_for(lambda: _state(dsn, job_id) == "unknown", timeout, what=f"job {job_id} unknown")


@pytest.mark.parametrize("resolution", ["completed", "retry", "discarded"])
def test_sigkill_mid_run_leaves_an_external_job_unknown_until_an_operator_resolves_it(
    supervisor: Callable[..., Supervisor], ledger: str, resolution: str
) -> None:
    sup = supervisor(EXTERNAL % {"timeout": "60s"}).start()
    job_id = _enqueue(ledger, "charge", {"seconds": 30})
    ((_, victim),) = wait_for(lambda: _events(ledger, job_id), what="charge started")
    os.kill(victim, signal.SIGKILL)
    _unknown(ledger, job_id)
    error = scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (job_id,))
    assert error.startswith("outcome unknown (effects: external): worker main#1")
    assert "killed by SIGKILL" in error
    # No second run: a new child is up and idle, and the job stays where it is.
    sup.wait_children(1)
    sup.wait_log(f"job {job_id} (charge)")
    assert len(_events(ledger, job_id)) == 1
    status = run_cli(sup.config, "status", env=sup.env)
    assert "outcome unknown" in status.stdout and "jobs resolve" in status.stdout
    done = run_cli(sup.config, "jobs", "resolve", str(job_id), "--as", resolution, env=sup.env)
    assert done.returncode == 0, done.stderr
    if resolution == "completed":
        assert _state(ledger, job_id) is None
    elif resolution == "discarded":
        assert _state(ledger, job_id) == "discarded"
    else:
        wait_for(lambda: _state(ledger, job_id) is None, what="the retry completed")
        assert [a for a, _ in _events(ledger, job_id)] == [1, 2]
    again = run_cli(sup.config, "jobs", "resolve", str(job_id), "--as", "retry", env=sup.env)
    assert again.returncode == 1 and "not unknown" in again.stderr
    assert sup.stop() == 0


@pytest.mark.parametrize("answer", ["completed", "retry", "discarded", "raise", "maybe"])
def test_the_reconcile_hook_answers_for_a_timed_out_external_job(
    supervisor: Callable[..., Supervisor], ledger: str, answer: str
) -> None:
    sup = supervisor(HOOKED).start()
    job_id = _enqueue(ledger, "charge", {"seconds": 30, "answer": answer})
    asked = f"asked:pgq-job-{job_id}"
    wait_for(lambda: _events(ledger, job_id, asked), timeout=30, what="the hook asked")
    if answer == "completed":
        wait_for(lambda: _state(ledger, job_id) is None, what="reconciled completed")
        assert len(_events(ledger, job_id)) == 1
    elif answer == "discarded":
        wait_for(lambda: _state(ledger, job_id) == "discarded", what="reconciled discarded")
    elif answer == "retry":
        wait_for(lambda: _state(ledger, job_id) is None, what="run again and completed")
        assert [a for a, _ in _events(ledger, job_id)] == [1, 2]
    else:
        # An error or no answer leaves it unknown; asked again later, with the failure kept.
        wait_for(lambda: len(_events(ledger, job_id, asked)) >= 2, what="asked again")
        assert _state(ledger, job_id) == "unknown"
        error = scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (job_id,))
        expected = "reconcile hook failed" if answer == "raise" else "reconcile hook gave no"
        assert error.startswith(expected)
        assert len(_events(ledger, job_id)) == 1
    assert sup.stop() == 0


def test_a_hard_timeout_of_an_external_job_in_native_code_leaves_it_unknown(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(EXTERNAL % {"timeout": "1s"}).start()
    job_id = _enqueue(ledger, "charge", {"seconds": 60, "native": True})
    _unknown(ledger, job_id, timeout=40)
    sup.wait_log(f"job {job_id} (charge) exceeded its timeout of 1s")
    assert len(_events(ledger, job_id)) == 1
    assert sup.stop() == 0


def test_a_lost_lease_of_an_external_job_is_rescued_to_unknown(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    job_id = _enqueue(ledger, "charge", {})
    # Claimed by a worker of a host that vanished: its lease runs out, nobody renews it.
    with psycopg.connect(ledger, autocommit=True) as conn:
        from supervisor import claim

        (job,) = claim(conn, "default", worker="gone:1:x", lease_seconds=0.5)
        assert job.id == job_id
    sup = supervisor((EXTERNAL % {"timeout": "60s"}) + "rescue: {interval: 1s}\n").start()
    _unknown(ledger, job_id)
    error = scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (job_id,))
    assert "lease expired: worker gone:1:x" in error
    assert _events(ledger, job_id) == []
    assert sup.stop() == 0


RESULTS = """
handlers:
  returns: tests.outcome_handlers:returns
  unserialisable: tests.outcome_handlers:returns_unserialisable
pools:
  main: {processes: 1, queues: {default: 1}}
jobs:
  returns: {max_attempts: 1}
  unserialisable: {max_attempts: 1}
results: {max_size: 1KiB}
"""


def test_results_round_trip_too_large_and_unserialisable(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    value = {"pages": 3, "names": ["é", "ø"], "ok": True}
    kept = _enqueue(ledger, "returns", {"value": value})
    nothing = _enqueue(ledger, "returns", {})
    large = _enqueue(ledger, "returns", {"value": "x" * 2000})
    odd = _enqueue(ledger, "unserialisable", {})
    sup = supervisor(RESULTS).start()
    wait_for(lambda: _state(ledger, kept) is None and _state(ledger, nothing) is None)
    wait_for(lambda: _state(ledger, large) == "discarded" and _state(ledger, odd) == "discarded")
    with psycopg.connect(ledger, autocommit=True) as conn:
        assert result(conn, kept) == value
        with pytest.raises(LookupError):
            result(conn, nothing)
        with pytest.raises(LookupError):
            result(conn, large)
    too_large = scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (large,))
    assert "over the limit of 1024 (results.max_size)" in too_large
    not_json = scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (odd,))
    assert "not JSON-serialisable" in not_json
    shown = run_cli(sup.config, "jobs", "show", str(kept), "--json", env=sup.env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["result"] == value
    assert sup.stop() == 0


BATCH = """
handlers:
  member: tests.outcome_handlers:member
  then: tests.outcome_handlers:then_record
pools:
  main: {processes: 2, queues: {default: 1, after: 1}}
jobs:
  member: {max_attempts: 2, backoff: {base: 100ms, cap: 200ms}}
"""


def test_a_batch_with_retries_failures_cancels_a_kill_and_two_supervisors_ends_once(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    members = [NewJob("member", {"n": i}) for i in range(40)]
    members += [NewJob("member", {"n": 100 + i, "fail_times": 1}) for i in range(5)]
    members += [NewJob("member", {"n": 200, "fail_times": 5})]  # out of attempts: discarded
    members += [NewJob("member", {"n": 300, "discard": True})]
    members += [NewJob("member", {"n": 400, "seconds": 30})]  # killed mid-run, then cancelled
    members += [NewJob("member", {"n": 500}, delay=3600)]  # cancelled while it waits
    with psycopg.connect(ledger, autocommit=True) as conn:
        batch = enqueue_batch(conn, members, then=NewJob("then", {}, queue="after"))
    slow, waiting = batch.job_ids[-2], batch.job_ids[-1]
    first = supervisor(BATCH).start()
    second = supervisor(BATCH).start()
    ((_, victim),) = wait_for(lambda: _events(ledger, slow), what="slow member started")
    cancel = run_cli(first.config, "jobs", "cancel", str(waiting), env=first.env)
    assert cancel.returncode == 0, cancel.stderr
    os.kill(victim, signal.SIGKILL)
    # Killed, its attempt spent, it runs again (attempt 2): cancel it while it runs.
    wait_for(lambda: len(_events(ledger, slow)) == 2, what="slow member running again")
    cancel = run_cli(first.config, "jobs", "cancel", str(slow), env=first.env)
    assert cancel.returncode == 0, cancel.stderr
    then = wait_for(
        lambda: query(
            ledger, "SELECT event, at FROM test_ledger WHERE event LIKE 'then:%%' ORDER BY at"
        ),
        timeout=60,
        what="the then job ran",
    )
    counts = json.loads(then[0][0].removeprefix("then:"))
    assert counts == {
        "id": batch.id,
        "total": 49,
        "completed": 45,
        "discarded": 2,
        "cancelled": 2,
    }
    # After the last member ended, and only once (both supervisors stay up a moment longer).
    last_member = scalar(
        ledger,
        "SELECT max(at) FROM test_ledger WHERE event IN ('started', 'finished') "
        "AND job_id = ANY(%s)",
        (batch.job_ids,),
    )
    assert then[0][1] > last_member
    assert first.stop() == 0 and second.stop() == 0
    assert len(query(ledger, "SELECT 1 FROM test_ledger WHERE event LIKE 'then:%%'")) == 1
    shown = run_cli(first.config, "batches", "show", str(batch.id), "--json", env=first.env)
    assert json.loads(shown.stdout)["remaining"] == 0
