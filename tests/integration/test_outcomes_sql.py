"""Outcome unknown, results and batches at the SQL layer (issue 23), on a real database: the
fenced writes that end a claim know the external kinds, completions keep results, and batch
members count down their batch, whose `then` job appears once, with the last outcome."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from supervisor import (
    EnqueueError,
    NewJob,
    batch_status,
    cancel,
    claim,
    complete,
    enqueue,
    enqueue_batch,
    resolve,
    result,
    settle,
)
from supervisor.queue import outcomes
from supervisor.queue.jobs import Job
from supervisor.queue.maintenance import requeue_worker, rescue_batch
from supervisor.queue.unknown import list_unknown


def _state(conn: psycopg.Connection[Any], job_id: int) -> str | None:
    row = conn.execute("SELECT state FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
    return row[0] if row else None


def _claim_one(conn: psycopg.Connection[Any], worker: str = "h:1:a", queue: str = "default") -> Job:
    (job,) = claim(conn, queue, worker=worker)
    return job


def test_requeue_of_a_dead_child_makes_a_started_external_job_unknown(
    conn: psycopg.Connection[Any],
) -> None:
    charge = enqueue(conn, "charge_card", {"order": 1})
    mail = enqueue(conn, "send_report", {})
    claimed = claim(conn, "default", worker="h:1:a", limit=2)
    assert {j.id for j in claimed} == {charge, mail}
    moved = requeue_worker(
        conn,
        "h:1:a",
        "worker pdf#0 (pid 1) killed by SIGKILL",
        spent=[charge, mail],
        external_kinds=["charge_card"],
    )
    assert {m.id: m.state for m in moved} == {charge: "unknown", mail: "available"}
    error, attempts, finished = conn.execute(
        "SELECT last_error, attempts, finished_at FROM pgq.jobs WHERE id = %s", (charge,)
    ).fetchone()
    assert error == "outcome unknown (effects: external): worker pdf#0 (pid 1) killed by SIGKILL"
    assert attempts == 1 and finished is None
    # Nobody claims it again.
    assert claim(conn, "default", worker="h:2:b", limit=5)[0].id == mail
    assert claim(conn, "default", worker="h:2:b", limit=5) == []


def test_an_external_job_only_claimed_is_given_back_not_unknown(
    conn: psycopg.Connection[Any],
) -> None:
    ran, unstarted, unrecorded = (enqueue(conn, "charge_card", {"n": i}) for i in range(3))
    claim(conn, "default", worker="h:1:a", limit=3)
    moved = requeue_worker(
        conn,
        "h:1:a",
        "worker died",
        spent=[ran],
        started=[unrecorded],
        external_kinds=["charge_card"],
    )
    states = {m.id: m.state for m in moved}
    assert states == {ran: "unknown", unstarted: "available", unrecorded: "unknown"}


def test_the_rescuer_honours_another_live_supervisors_declaration(
    conn: psycopg.Connection[Any],
) -> None:
    conn.execute(
        "INSERT INTO pgq.supervisors (id, host, pid, config, external_kinds) "
        "VALUES ('other', 'h2', 1, 'q.yaml', ARRAY['charge_card'])"
    )
    charge = enqueue(conn, "charge_card", {})
    plain = enqueue(conn, "plain", {})
    claim(conn, "default", worker="h2:1:a", limit=2, lease_seconds=0.001)
    conn.execute("SELECT pg_sleep(0.01)")
    # This rescuer's own YAML declares nothing external: the other supervisor's row decides.
    moved = rescue_batch(conn, external_kinds=[])
    assert {m.id: m.state for m in moved} == {charge: "unknown", plain: "available"}
    (error,) = conn.execute("SELECT last_error FROM pgq.jobs WHERE id = %s", (charge,)).fetchone()
    assert error.startswith("outcome unknown (effects: external): lease expired")
    # Once that supervisor is gone (pruned), its declaration no longer applies.
    conn.execute("DELETE FROM pgq.supervisors WHERE id = 'other'")
    claim(conn, "default", worker="h2:1:b", limit=1, lease_seconds=0.001)
    conn.execute("SELECT pg_sleep(0.01)")
    assert [m.state for m in rescue_batch(conn)] == ["available"]


def test_a_timed_out_external_attempt_settles_unknown(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "charge_card", {})
    job = _claim_one(conn)
    kept = settle(conn, [outcomes.unknown(job, "timed out after 1s")])
    assert [j.id for j in kept.kept] == [job_id]
    assert _state(conn, job_id) == "unknown"
    assert [u.id for u in list_unknown(conn)] == [job_id]


@pytest.mark.parametrize("resolution", ["completed", "retry", "discarded"])
def test_each_resolution_of_an_unknown_job(conn: psycopg.Connection[Any], resolution: str) -> None:
    job_id = enqueue(conn, "charge_card", {}, max_attempts=1)
    _claim_one(conn)
    requeue_worker(conn, "h:1:a", "killed", spent=None, external_kinds=["charge_card"])
    assert _state(conn, job_id) == "unknown"
    (done,) = resolve(conn, [job_id], resolution, history=True)
    assert done.id == job_id
    expected = {"completed": None, "retry": "available", "discarded": "discarded"}[resolution]
    assert _state(conn, job_id) == expected
    if resolution == "retry":
        # Its one attempt was spent; a retry the operator asked for gets another.
        assert _claim_one(conn).attempts == 2
    else:
        (outcome,) = conn.execute(
            "SELECT outcome FROM pgq.job_history WHERE id = %s", (job_id,)
        ).fetchone()
        assert outcome == resolution
    # Fenced: a second resolution finds nothing unknown.
    assert resolve(conn, [job_id], "completed") == []


def test_results_round_trip_and_a_lost_lease_keeps_none(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "render", {})
    job = _claim_one(conn)
    with pytest.raises(LookupError):
        result(conn, job_id)
    complete(conn, [job._replace(result='{"pages": 3, "name": "é"}')])
    assert result(conn, job_id) == {"pages": 3, "name": "é"}
    # A completion that lost its lease writes no result.
    other = enqueue(conn, "render", {})
    stale = _claim_one(conn)
    conn.execute("UPDATE pgq.jobs SET lease_id = lease_id + 1000 WHERE id = %s", (other,))
    assert complete(conn, [stale._replace(result="[1]")]).lost
    with pytest.raises(LookupError):
        result(conn, other)


def _batch(conn: psycopg.Connection[Any], n: int) -> Any:
    return enqueue_batch(
        conn,
        [NewJob("render", {"n": i}) for i in range(n)],
        then=NewJob("archive", {"to": "ops"}, queue="after"),
    )


def test_a_batch_ends_once_with_its_counts(conn: psycopg.Connection[Any]) -> None:
    batch = _batch(conn, 5)
    assert len(batch.job_ids) == 5
    jobs = claim(conn, "default", worker="h:1:a", limit=5)
    complete(conn, jobs[:2])
    settle(conn, [outcomes.discard(jobs[2], "bad input")])
    assert batch_status(conn, batch.id).remaining == 2
    # A retry is not an end.
    settle(conn, [outcomes.retry(jobs[3], 0, "flaky")])
    cancel(conn, [jobs[3].id])
    assert claim(conn, "after", worker="h:1:a") == []
    complete(conn, [jobs[4]])
    status = batch_status(conn, batch.id)
    assert (status.remaining, status.completed, status.discarded, status.cancelled) == (0, 3, 1, 1)
    assert status.finished and status.then_job_id is not None
    (then,) = claim(conn, "after", worker="h:1:a")
    assert then.id == status.then_job_id and then.kind == "archive"
    assert then.batch == {
        "id": batch.id,
        "total": 5,
        "completed": 3,
        "discarded": 1,
        "cancelled": 1,
    }


def test_an_empty_batch_enqueues_its_then_job_at_once(conn: psycopg.Connection[Any]) -> None:
    batch = enqueue_batch(conn, [], then=NewJob("archive", {}))
    assert batch.job_ids == []
    (then,) = claim(conn, "default", worker="w")
    assert then.batch == {
        "id": batch.id,
        "total": 0,
        "completed": 0,
        "discarded": 0,
        "cancelled": 0,
    }


def test_the_then_job_keeps_its_tenant_and_trace_context(conn: psycopg.Connection[Any]) -> None:
    trace = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    batch = enqueue_batch(
        conn,
        [NewJob("render", {}, tenant="acme")],
        then=NewJob("archive", {}, queue="after", tenant="acme", traceparent=trace),
    )
    complete(conn, claim(conn, "default", worker="w"))
    (then,) = claim(conn, "after", worker="w")
    assert then.batch is not None and then.batch["id"] == batch.id
    assert (then.tenant, then.traceparent) == ("acme", trace)


def test_a_batch_member_with_a_unique_key_is_refused(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(EnqueueError, match="unique_key"):
        enqueue_batch(conn, [NewJob("render", unique_key="k")])


def test_unknown_members_and_a_discarded_resolution_end_the_batch(
    conn: psycopg.Connection[Any],
) -> None:
    batch = _batch(conn, 2)
    jobs = claim(conn, "default", worker="h:1:a", limit=2)
    complete(conn, jobs[:1])
    requeue_worker(conn, "h:1:a", "killed", spent=None, external_kinds=["render"])
    assert batch_status(conn, batch.id).remaining == 1
    resolve(conn, [jobs[1].id], "discarded")
    assert batch_status(conn, batch.id).then_job_id is not None


@pytest.mark.parametrize("members", [2, 300], ids=["one shard", "two shards"])
def test_concurrent_last_completions_enqueue_the_then_job_once(dsn: str, members: int) -> None:
    """The last two members complete in two sessions at once: the first holds its transaction
    open until the second is seen waiting for a lock (the shard's row with one shard, the
    batch's row with two), then commits. Exactly one then job, after both."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        batch = _batch(setup, members)
        jobs = claim(setup, "default", worker="h:1:a", limit=members)
        complete(setup, jobs[:-2])
        assert batch_status(setup, batch.id).remaining == 2
        first, second = jobs[-2:]
        assert (first.id % 2 != second.id % 2) or members == 2
        holder = psycopg.connect(dsn)
        complete(holder, [first])
        (holder_pid,) = holder.execute("SELECT pg_backend_pid()").fetchone()
        errors: list[BaseException] = []

        def finish() -> None:
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    complete(conn, [second])
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=finish)
        thread.start()
        for _ in range(200):
            (waiting,) = setup.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND %s = ANY(pg_blocking_pids(pid))",
                (holder_pid,),
            ).fetchone()
            if waiting:
                break
            setup.execute("SELECT pg_sleep(0.05)")
        assert waiting, "the second completion never waited for the first"
        assert (
            setup.execute("SELECT count(*) FROM pgq.jobs WHERE kind = 'archive'").fetchone()[0] == 0
        )
        holder.commit()
        holder.close()
        thread.join(20)
        assert not errors
        (count,) = setup.execute("SELECT count(*) FROM pgq.jobs WHERE kind = 'archive'").fetchone()
        assert count == 1
        status = batch_status(setup, batch.id)
        assert status.finished and status.completed == members


def test_drain_keeps_results_and_run_inline_shows_them(conn: psycopg.Connection[Any]) -> None:
    from supervisor.testing import drain, run_inline

    job_id = enqueue(conn, "render", {"pages": 2})
    report = drain(conn, {"render": lambda pages: {"pages": pages}})
    assert report.completed == 1
    assert result(conn, job_id) == {"pages": 2}
    assert run_inline(lambda: [1, "two"]).result == [1, "two"]
    refused = run_inline(lambda: {"when": object()})
    assert refused.status == "retry" and "not JSON-serialisable" in (refused.error or "")


def test_the_purge_slices_drop_old_results_and_finished_batches(
    conn: psycopg.Connection[Any],
) -> None:
    from supervisor.queue.maintenance import purge_batches_slice, purge_results_slice

    job_id = enqueue(conn, "render", {})
    complete(conn, [_claim_one(conn)._replace(result="1")])
    finished = enqueue_batch(conn, [], then=NewJob("archive"))
    waiting = _batch(conn, 1)
    (later,) = conn.execute("SELECT now() + interval '1 hour'").fetchone()
    assert purge_results_slice(conn, later) == 1
    with pytest.raises(LookupError):
        result(conn, job_id)
    assert purge_batches_slice(conn, later) == 1
    with pytest.raises(LookupError):
        batch_status(conn, finished.id)
    assert batch_status(conn, waiting.id).remaining == 1


def test_a_then_job_with_a_unique_key_is_refused_before_anything_is_written(
    conn: psycopg.Connection[Any],
) -> None:
    with pytest.raises(EnqueueError, match="then job 'archive': cannot have a unique_key"):
        enqueue_batch(conn, [NewJob("render")], then=NewJob("archive", unique_key="k"))
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)
