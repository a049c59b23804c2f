"""Workflows on a real database (issue 32): steps wait outside the claim, the last parent's
ending releases a step once with its parents' results, failures cancel or run on, a cancelled
workflow stops, a replayed dead step releases its descendants again, outcome-unknown steps hold
theirs, and a bad graph is refused before anything is written."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from supervisor import (
    Discard,
    EnqueueError,
    JobContext,
    NewJob,
    Workflow,
    cancel,
    cancel_workflow,
    claim,
    complete,
    enqueue_workflow,
    enqueue_workflow_async,
    resolve,
    workflow_status,
)
from supervisor.queue import workflows as wf_mod
from supervisor.queue.maintenance import (
    ReplayFilter,
    purge_batches_slice,
    replay,
    requeue_worker,
)
from supervisor.queue.workflows import workflow_steps
from supervisor.testing import drain


def _recorder(seen: dict[str, list[Any]], fail: frozenset[str] = frozenset()) -> Any:
    """A handler that notes, per run, the parents its step saw, and fails the named steps."""

    def handler(*, job: JobContext, **args: Any) -> Any:
        name = args.get("name", job.kind)
        seen.setdefault(name, []).append([(p.kind, p.state, p.result) for p in job.parents])
        if name in fail:
            raise Discard(f"{name} fails")
        return {"from": name}

    return handler


def test_a_diamond_whose_last_step_sees_both_middle_results(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow("diamond")
    top = wf.add(NewJob("step", {"name": "top"}))
    left = wf.add(NewJob("step", {"name": "left"}), after=[top])
    right = wf.add(NewJob("step", {"name": "right"}), after=[top])
    wf.add(NewJob("step", {"name": "bottom"}), after=[left, right])
    handle = enqueue_workflow(conn, wf)
    assert len(handle.job_ids) == 4
    # Only the top is due: the others wait, outside the claim.
    states = conn.execute(
        "SELECT state, count(*) FROM pgq.jobs GROUP BY state ORDER BY state"
    ).fetchall()
    assert states == [("available", 1), ("waiting", 3)]
    seen: dict[str, list[Any]] = {}
    report = drain(conn, {"step": _recorder(seen)})
    assert report.completed == 4
    assert seen["top"] == [[]]
    assert seen["left"] == [[("step", "completed", {"from": "top"})]]
    # In the order the parents were added.
    assert seen["bottom"][0] == [
        ("step", "completed", {"from": "left"}),
        ("step", "completed", {"from": "right"}),
    ]
    status = workflow_status(conn, handle.id)
    assert status.finished and status.completed == 4 and status.name == "diamond"


def test_a_fan_out_of_hundreds_then_a_fan_in_that_runs_once(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow()
    root = wf.add(NewJob("step", {"name": "root"}))
    leaves = [wf.add(NewJob("step", {"name": f"leaf{i}"}), after=[root]) for i in range(300)]
    wf.add(NewJob("step", {"name": "join"}), after=leaves)
    handle = enqueue_workflow(conn, wf)
    # A fan-in of 300 parents counts down 10 gate rows, not one.
    (gates,) = conn.execute(
        "SELECT count(*) FROM pgq.workflow_gates WHERE child_id = %s", (handle.job_ids[-1],)
    ).fetchone()
    assert gates == wf_mod.gates_for(300) == 10
    seen: dict[str, list[Any]] = {}
    report = drain(conn, {"step": _recorder(seen)})
    assert report.completed == 302
    assert len(seen["join"]) == 1
    assert len(seen["join"][0]) == 300
    assert all(state == "completed" for _, state, _ in seen["join"][0])


def test_leaves_ending_concurrently_release_the_join_once(dsn: str) -> None:
    """Each leaf ends in its own transaction on its own connection, all at once: exactly one
    of them sees the join's last gate empty."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        wf = Workflow()
        leaves = [wf.add(NewJob("leaf")) for _ in range(64)]
        wf.add(NewJob("join"), after=leaves)
        handle = enqueue_workflow(conn, wf)
        jobs = claim(conn, "default", worker="h:1:x", limit=64)
        assert len(jobs) == 64
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def finish(part: list[Any]) -> None:
        try:
            with psycopg.connect(dsn) as own:
                barrier.wait()
                for job in part:
                    complete(own, [job]).raise_if_lost()
                    own.commit()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=finish, args=(jobs[i::8],)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with psycopg.connect(dsn, autocommit=True) as conn:
        (state,) = conn.execute(
            "SELECT state FROM pgq.jobs WHERE id = %s", (handle.job_ids[-1],)
        ).fetchone()
        assert state == "available"
        (left,) = conn.execute(
            "SELECT shards_left FROM pgq.workflow_steps WHERE job_id = %s",
            (handle.job_ids[-1],),
        ).fetchone()
        assert left == 0


def test_a_discarded_parent_cancels_its_descendants_while_a_run_step_runs(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow()
    bad = wf.add(NewJob("step", {"name": "bad"}))
    good = wf.add(NewJob("step", {"name": "good"}))
    child = wf.add(NewJob("step", {"name": "child"}), after=[bad, good])
    wf.add(NewJob("step", {"name": "grandchild"}), after=[child])
    wf.add(NewJob("step", {"name": "cleanup"}), after=[bad, good], on_parent_failure="run")
    handle = enqueue_workflow(conn, wf)
    seen: dict[str, list[Any]] = {}
    drain(conn, {"step": _recorder(seen, fail=frozenset({"bad"}))})
    steps = {s.job_id: s for s in workflow_steps(conn, handle.id)}
    names = ["bad", "good", "child", "grandchild", "cleanup"]
    by_name = dict(zip(names, handle.job_ids, strict=True))
    assert steps[by_name["bad"]].state == "discarded"
    assert steps[by_name["child"]].state == "cancelled"
    assert steps[by_name["child"]].cause == "parent"
    assert steps[by_name["grandchild"]].state == "cancelled"
    assert "child" not in seen and "grandchild" not in seen
    assert seen["cleanup"][0] == [
        ("step", "discarded", None),
        ("step", "completed", {"from": "good"}),
    ]
    status = workflow_status(conn, handle.id)
    assert (status.completed, status.discarded, status.cancelled) == (2, 1, 2)
    assert status.finished


def test_a_replayed_dead_step_releases_its_descendants_again(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow()
    first = wf.add(NewJob("step", {"name": "first"}))
    second = wf.add(NewJob("step", {"name": "second"}), after=[first])
    wf.add(NewJob("step", {"name": "third"}), after=[second])
    handle = enqueue_workflow(conn, wf)
    seen: dict[str, list[Any]] = {}
    drain(conn, {"step": _recorder(seen, fail=frozenset({"first"}))})
    assert [s.state for s in workflow_steps(conn, handle.id)] == [
        "discarded",
        "cancelled",
        "cancelled",
    ]
    assert workflow_status(conn, handle.id).finished
    replay(conn, ReplayFilter(ids=[handle.job_ids[0]]))
    assert [s.state for s in workflow_steps(conn, handle.id)] == [
        "available",
        "waiting",
        "waiting",
    ]
    assert not workflow_status(conn, handle.id).finished
    seen.clear()
    report = drain(conn, {"step": _recorder(seen)})
    assert report.completed == 3
    assert seen["third"] == [[("step", "completed", {"from": "second"})]]
    status = workflow_status(conn, handle.id)
    assert status.finished and (status.completed, status.discarded, status.cancelled) == (3, 0, 0)


def test_cancelling_a_workflow_cancels_every_step_not_started(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow()
    a = wf.add(NewJob("step", {"name": "a"}))
    b = wf.add(NewJob("step", {"name": "b"}), after=[a])
    wf.add(NewJob("step", {"name": "c"}), after=[b], on_parent_failure="run")
    wf.add(NewJob("step", {"name": "d"}))
    handle = enqueue_workflow(conn, wf)
    (running,) = claim(conn, "default", worker="h:1:x", limit=1)
    assert running.id == handle.job_ids[0]
    assert cancel_workflow(conn, handle.id) == 3
    complete(conn, [running]).raise_if_lost()  # the running step finishes; nothing is released
    assert [s.state for s in workflow_steps(conn, handle.id)] == [
        "completed",
        "cancelled",
        "cancelled",
        "cancelled",
    ]
    status = workflow_status(conn, handle.id)
    assert status.finished and status.cancelled_at is not None
    with pytest.raises(LookupError):
        cancel_workflow(conn, 10**12)


def test_cancelling_one_waiting_step_cancels_its_descendants(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow()
    a = wf.add(NewJob("step", {"name": "a"}))
    b = wf.add(NewJob("step", {"name": "b"}), after=[a])
    wf.add(NewJob("step", {"name": "c"}), after=[b])
    handle = enqueue_workflow(conn, wf)
    assert cancel(conn, handle.job_ids[1]).cancelled == [handle.job_ids[1]]
    seen: dict[str, list[Any]] = {}
    drain(conn, {"step": _recorder(seen)})
    assert list(seen) == ["a"]
    assert [s.state for s in workflow_steps(conn, handle.id)] == [
        "completed",
        "cancelled",
        "cancelled",
    ]


def test_an_outcome_unknown_step_holds_its_descendants_until_resolved(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow()
    charge = wf.add(NewJob("charge"))
    wf.add(NewJob("receipt"), after=[charge])
    handle = enqueue_workflow(conn, wf)
    claim(conn, "default", worker="h:1:dead", limit=1)
    # Its child died while it ran, and its kind has effects outside the database.
    requeue_worker(conn, "h:1:dead", "killed", spent=[handle.job_ids[0]], external_kinds=["charge"])
    assert [s.state for s in workflow_steps(conn, handle.id)] == ["unknown", "waiting"]
    assert drain(conn, {"receipt": lambda: None}).completed == 0
    resolve(conn, [handle.job_ids[0]], "completed")
    assert [s.state for s in workflow_steps(conn, handle.id)] == ["completed", "available"]
    assert drain(conn, {"receipt": lambda: None}).completed == 1


def test_a_step_with_parents_and_a_delay_is_due_that_long_after_its_release(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True
    wf = Workflow()
    a = wf.add(NewJob("a"))
    wf.add(NewJob("b", delay=3600), after=[a])
    handle = enqueue_workflow(conn, wf)
    drain(conn, {"a": lambda: None})
    (state, wait) = conn.execute(
        "SELECT state, extract(epoch FROM run_at - now()) FROM pgq.jobs WHERE id = %s",
        (handle.job_ids[1],),
    ).fetchone()
    assert state == "scheduled" and 3500 < wait <= 3600


def _count_jobs(conn: psycopg.Connection[Any]) -> int:
    return int(conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0])


def test_bad_graphs_are_refused_before_anything_is_written(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    other = Workflow("other")
    stranger = other.add(NewJob("x"))
    wf = Workflow("bad")
    wf.add(NewJob("a"), after=[stranger])
    with pytest.raises(EnqueueError, match="another workflow"):
        enqueue_workflow(conn, wf)

    with pytest.raises(EnqueueError, match="no steps"):
        enqueue_workflow(conn, Workflow("empty"))

    with pytest.raises(EnqueueError, match="on_parent_failure"):
        Workflow().add(NewJob("a"), on_parent_failure="retry")  # type: ignore[arg-type]

    # A cycle can only be built by hand (add() takes steps already added): still refused.
    looped = Workflow("loop")
    a = looped.add(NewJob("a"))
    b = looped.add(NewJob("b"), after=[a])
    object.__setattr__(a, "after", (b,))  # frozen: forced, as a buggy caller might
    with pytest.raises(EnqueueError, match=r"cycle: .*'a'.*'b'"):
        enqueue_workflow(conn, looped)

    keyed = Workflow()
    keyed.add(NewJob("a", unique_key="k"))
    with pytest.raises(EnqueueError, match="unique_key"):
        enqueue_workflow(conn, keyed)

    monkeypatch.setattr(wf_mod, "MAX_STEPS", 5)
    big = Workflow("big")
    for _ in range(6):
        big.add(NewJob("a"))
    with pytest.raises(EnqueueError, match="6 steps; the limit is 5"):
        enqueue_workflow(conn, big)

    bad_args = Workflow()
    bad_args.add(NewJob("a"))
    bad_args.add(NewJob("b", {"x": object()}))
    with pytest.raises(EnqueueError, match="not JSON-serialisable"):
        enqueue_workflow(conn, bad_args)
    assert _count_jobs(conn) == 0
    assert conn.execute("SELECT count(*) FROM pgq.batches").fetchone()[0] == 0


def test_ten_thousand_steps_enqueue_in_one_statement(
    conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    wf = Workflow("wide")
    root = wf.add(NewJob("root"))
    mids = [wf.add(NewJob("mid", {"i": i}), after=[root]) for i in range(9_998)]
    wf.add(NewJob("join"), after=mids)
    statements: list[str] = []
    real = wf_mod._run

    def counting(c: Any, steps: Any) -> Any:
        def spy() -> Any:
            reply = None
            while True:
                try:
                    step = steps.send(reply)
                except StopIteration as done:
                    return done.value
                statements.append(step.name)
                reply = yield step

        return real(c, spy())

    monkeypatch.setattr(wf_mod, "_run", counting)
    handle = enqueue_workflow(conn, wf)
    conn.commit()
    assert statements == ["enqueue_workflow"]
    assert len(handle.job_ids) == 10_000 == len(set(handle.job_ids))
    assert handle.job_ids == sorted(handle.job_ids)
    (edges,) = conn.execute(
        "SELECT count(*) FROM pgq.workflow_edges e JOIN pgq.workflow_steps s "
        "ON s.job_id = e.child_id WHERE s.workflow_id = %s",
        (handle.id,),
    ).fetchone()
    assert edges == 2 * 9_998


def test_the_async_enqueue_writes_the_same_graph(dsn: str) -> None:
    async def run() -> Any:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            wf = Workflow("async")
            a = wf.add(NewJob("a"))
            wf.add(NewJob("b"), after=[a])
            handle = await enqueue_workflow_async(aconn, wf)
            await aconn.commit()
            return handle

    handle = asyncio.run(run())
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert [s.state for s in workflow_steps(conn, handle.id)] == ["available", "waiting"]
        assert workflow_steps(conn, handle.id)[1].parents == [handle.job_ids[0]]


def test_the_purge_of_a_finished_workflow_takes_its_steps_edges_and_gates(
    conn: psycopg.Connection[Any],
) -> None:
    conn.autocommit = True

    def pair() -> Workflow:
        wf = Workflow()
        a = wf.add(NewJob("a"))
        wf.add(NewJob("b"), after=[a])
        return wf

    running = enqueue_workflow(conn, pair())
    (held,) = claim(conn, "default", worker="h:1:x", limit=1)  # its first step runs on
    assert held.id == running.job_ids[0]
    finished = enqueue_workflow(conn, pair())
    drain(conn, {"a": lambda: None, "b": lambda: None})
    assert workflow_status(conn, finished.id).finished
    later = datetime.now(timezone.utc) + timedelta(days=1)
    assert purge_batches_slice(conn, later) == 1

    def count(table: str) -> int:
        return int(conn.execute(f"SELECT count(*) FROM pgq.{table}").fetchone()[0])

    # What is left is the running workflow's: 2 steps, 1 edge, 1 gate.
    assert (count("workflow_steps"), count("workflow_edges"), count("workflow_gates")) == (2, 1, 1)
    assert workflow_status(conn, running.id).total == 2
    with pytest.raises(LookupError):
        workflow_status(conn, finished.id)
