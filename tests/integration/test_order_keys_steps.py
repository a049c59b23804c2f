"""Order keys on workflow steps and on a batch's `then` job (issue 33, migration 0068), on a real
database. Each joins its key when it becomes ready: a step without parents at enqueue, one with
parents when they have ended, a `then` job when its batch has. Until then it does not hold the
key; once joined it is the key's head when the key was free, or waits behind it and goes in id
(enqueue) order among the key's followers."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from supervisor import (
    EnqueueError,
    NewJob,
    Workflow,
    cancel,
    cancel_workflow,
    claim,
    complete,
    enqueue,
    enqueue_batch,
    enqueue_workflow,
    settle,
)
from supervisor.queue.maintenance import ReplayFilter, replay
from supervisor.queue.outcomes import Settlement
from supervisor.views.order import job_order, order_lines

WORKER = "host:1:a"


def _state(conn: psycopg.Connection[Any], job_id: int) -> tuple[str, str | None]:
    row = conn.execute("SELECT state, order_key FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row is not None
    return row[0], row[1]


def _key_row(conn: psycopg.Connection[Any], key: str) -> tuple[int, int] | None:
    return conn.execute(
        "SELECT unfinished, head_id FROM pgq.order_keys WHERE key = %s", (key,)
    ).fetchone()


def _take(conn: psycopg.Connection[Any], job_id: int) -> Any:
    """Claims everything claimable and gives back all but ``job_id`` (asserting it was there)."""
    jobs = claim(conn, "default", worker=WORKER, limit=50)
    mine = [j for j in jobs if j.id == job_id]
    assert mine, f"job {job_id} was not claimable; claimed {[j.id for j in jobs]}"
    others = [j for j in jobs if j.id != job_id]
    if others:
        settle(conn, [Settlement(j, "available", 0.0, 1, None) for j in others])
    return mine[0]


def test_a_step_with_parents_joins_its_key_only_once_they_have_ended(
    conn: psycopg.Connection[Any],
) -> None:
    running = enqueue(conn, "hook", order_key="cust-7")
    wf = Workflow("w")
    fetch = wf.add(NewJob("fetch"))
    wf.add(NewJob("apply", order_key="cust-7"), after=[fetch])
    handle = enqueue_workflow(conn, wf)
    step = handle.job_ids[1]
    # Waiting for its parent, not in the key: the key counts the running job alone.
    assert _state(conn, step) == ("waiting", None)
    assert _key_row(conn, "cust-7") == (1, running)
    order = job_order(conn, step)
    assert order is not None and order["waits_for_parents"] and order["waits_for"] is None
    assert order_lines(order) == ["  order key   cust-7: joins its key once its parents have ended"]
    later = enqueue(conn, "hook", order_key="cust-7")  # a plain job of the key, after the step
    head = _take(conn, running)
    complete(conn, [_take(conn, fetch_id := handle.job_ids[0])])
    # Released while the key is held: it joins as a follower, ahead of `later` (a lower id).
    assert fetch_id < step < later
    assert _state(conn, step) == ("waiting", "cust-7")
    assert _key_row(conn, "cust-7") == (3, running)
    order = job_order(conn, step)
    assert order is not None and order["waits_for"] == running and not order["waits_for_parents"]
    complete(conn, [head])
    assert _state(conn, step) == ("available", "cust-7")
    assert _state(conn, later)[0] == "waiting"
    complete(conn, [_take(conn, step)])
    assert _state(conn, later)[0] == "available"


def test_a_chain_on_one_key_runs_back_to_back_before_later_jobs_of_the_key(
    conn: psycopg.Connection[Any],
) -> None:
    wf = Workflow()
    first = wf.add(NewJob("a", order_key="k"))
    wf.add(NewJob("b", order_key="k"), after=[first])
    a, b = enqueue_workflow(conn, wf).job_ids
    # A step without parents joins at once: the key was free, it is its head.
    assert _state(conn, a) == ("available", "k")
    assert _key_row(conn, "k") == (1, a)
    x = enqueue(conn, "hook", order_key="k")
    assert _state(conn, x)[0] == "waiting"
    complete(conn, [_take(conn, a)])
    # a's ending released b (joined behind a) and then let the key's lowest id go: b, not x.
    assert _state(conn, b) == ("available", "k")
    assert _state(conn, x)[0] == "waiting"
    assert _key_row(conn, "k") == (2, b)


def test_a_step_released_while_its_key_is_free_starts_at_once(
    conn: psycopg.Connection[Any],
) -> None:
    wf = Workflow()
    parent = wf.add(NewJob("p"))
    wf.add(NewJob("c", order_key="free"), after=[parent])
    p, c = enqueue_workflow(conn, wf).job_ids
    complete(conn, [_take(conn, p)])
    assert _state(conn, c) == ("available", "free")
    assert _key_row(conn, "free") == (1, c)
    complete(conn, [_take(conn, c)])
    assert _key_row(conn, "free") is None


def test_two_steps_without_parents_on_one_key_are_head_and_follower(
    conn: psycopg.Connection[Any],
) -> None:
    wf = Workflow()
    wf.add(NewJob("a", order_key="k"))
    wf.add(NewJob("other"))
    wf.add(NewJob("b", order_key="k"))
    a, other, b = enqueue_workflow(conn, wf).job_ids
    assert [_state(conn, i) for i in (a, other, b)] == [
        ("available", "k"),
        ("available", None),
        ("waiting", "k"),
    ]
    assert _key_row(conn, "k") == (2, a)
    claimed = {j.id for j in claim(conn, "default", worker=WORKER, limit=10)}
    assert claimed == {a, other}


def test_a_step_cancelled_by_its_parent_never_joined_its_key(
    conn: psycopg.Connection[Any],
) -> None:
    wf = Workflow()
    bad = wf.add(NewJob("bad"))
    wf.add(NewJob("c", order_key="k"), after=[bad])
    p, c = enqueue_workflow(conn, wf).job_ids
    settle(conn, [Settlement(_take(conn, p), "discarded", None, 0, "no")])
    conn.commit()
    assert _state(conn, c) == ("cancelled", None)
    assert _key_row(conn, "k") is None


def test_a_replayed_parent_ending_again_does_not_release_a_joined_follower(
    conn: psycopg.Connection[Any],
) -> None:
    holder = enqueue(conn, "hook", order_key="k")
    wf = Workflow()
    p1 = wf.add(NewJob("p1"))
    p2 = wf.add(NewJob("p2"))
    wf.add(NewJob("c", order_key="k"), after=[p1, p2], on_parent_failure="run")
    one, two, c = enqueue_workflow(conn, wf).job_ids
    head = _take(conn, holder)
    settle(conn, [Settlement(_take(conn, one), "discarded", None, 0, "no")])
    conn.commit()
    complete(conn, [_take(conn, two)])
    assert _state(conn, c) == ("waiting", "k")  # released ("run"), behind the running holder
    replay(conn, ReplayFilter(ids=[one]))
    conn.commit()
    settle(conn, [Settlement(_take(conn, one), "discarded", None, 0, "again")])
    conn.commit()
    # Still a follower: the key's head is still running.
    assert _state(conn, c) == ("waiting", "k")
    assert _key_row(conn, "k") == (2, holder)
    complete(conn, [head])
    assert _state(conn, c) == ("available", "k")


def test_cancelling_a_workflow_lets_the_key_go_on(conn: psycopg.Connection[Any]) -> None:
    wf = Workflow()
    wf.add(NewJob("a", order_key="k"))
    wf.add(NewJob("b", order_key="k"))
    a, b = enqueue_workflow(conn, wf).job_ids
    x = enqueue(conn, "hook", order_key="k")
    assert _key_row(conn, "k") == (3, a)
    assert cancel_workflow(conn, handle_id := _workflow_of(conn, a)) == 2
    assert handle_id > 0
    assert [_state(conn, i)[0] for i in (a, b)] == ["cancelled", "cancelled"]
    assert _state(conn, x)[0] == "available"
    assert _key_row(conn, "k") == (1, x)


def test_cancelling_a_joined_follower_step_leaves_its_key(conn: psycopg.Connection[Any]) -> None:
    holder = enqueue(conn, "hook", order_key="k")
    wf = Workflow()
    parent = wf.add(NewJob("p"))
    wf.add(NewJob("c", order_key="k"), after=[parent])
    p, c = enqueue_workflow(conn, wf).job_ids
    complete(conn, [_take(conn, p)])
    assert _key_row(conn, "k") == (2, holder)
    cancel(conn, c)
    conn.commit()
    assert _key_row(conn, "k") == (1, holder)


def _workflow_of(conn: psycopg.Connection[Any], job_id: int) -> int:
    row = conn.execute(
        "SELECT workflow_id FROM pgq.workflow_steps WHERE job_id = %s", (job_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_batch_then_job_joins_its_key_when_the_batch_ends(
    conn: psycopg.Connection[Any],
) -> None:
    holder = enqueue(conn, "hook", order_key="k")
    batch = enqueue_batch(conn, [NewJob("m")], then=NewJob("done", order_key="k"))
    head = _take(conn, holder)
    complete(conn, [_take(conn, batch.job_ids[0])])
    (then_id,) = conn.execute(
        "SELECT then_job_id FROM pgq.batches WHERE id = %s", (batch.id,)
    ).fetchone()
    assert _state(conn, then_id) == ("waiting", "k")
    assert _key_row(conn, "k") == (2, holder)
    complete(conn, [head])
    assert _state(conn, then_id) == ("available", "k")
    # The key free when the batch ends: it is due at once, the key's head.
    empty = enqueue_batch(conn, [], then=NewJob("done", order_key="k2"))
    (then_id,) = conn.execute(
        "SELECT then_job_id FROM pgq.batches WHERE id = %s", (empty.id,)
    ).fetchone()
    assert _state(conn, then_id) == ("available", "k2")
    assert _key_row(conn, "k2") == (1, then_id)


def test_a_bad_order_key_on_a_step_or_a_then_job_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    wf = Workflow("w")
    first = wf.add(NewJob("a", order_key="k"))
    wf.add(NewJob("b", order_key=" "), after=[first])
    with pytest.raises(EnqueueError, match="job 'b': order_key must not be empty"):
        enqueue_workflow(conn, wf)
    with pytest.raises(EnqueueError, match="job 'done': order_key is 201 characters long"):
        enqueue_batch(conn, [NewJob("m")], then=NewJob("done", order_key="k" * 201))
    for table in ("jobs", "order_keys", "batches"):
        assert conn.execute(f"SELECT count(*) FROM pgq.{table}").fetchone() == (0,), table
