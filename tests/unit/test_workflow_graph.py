"""Workflows without a database: the graph's checks, and a step's handler run inline with the
parents it would see (issue 32)."""

from __future__ import annotations

from typing import Any

import pytest

from supervisor import EnqueueError, JobContext, NewJob, Parent, Workflow
from supervisor.queue.workflows import _check_graph, _cycle, gates_for
from supervisor.testing import run_inline


def test_a_step_run_inline_sees_its_parents() -> None:
    def zip_pages(*, job: JobContext) -> dict[str, Any]:
        return {
            "workflow": job.workflow,
            "pages": [p.result["page"] for p in job.parents if p.state == "completed"],
        }

    parents = [
        Parent(1, "render", "completed", {"page": 1}),
        Parent(2, "render", "discarded"),
        Parent(3, "render", "completed", {"page": 3}),
    ]
    outcome = run_inline(zip_pages, parents=parents, workflow=7)
    assert outcome.completed and outcome.result == {"workflow": 7, "pages": [1, 3]}
    # Outside a workflow: no parents, no workflow.
    assert run_inline(lambda *, job: [job.workflow, job.parents]).result == [None, []]


def test_edges_come_in_add_order_once_each() -> None:
    wf = Workflow()
    a = wf.add(NewJob("a"))
    b = wf.add(NewJob("b"), after=[a, a])
    wf.add(NewJob("c"), after=[b, a])
    assert _check_graph(wf) == [(0, 1), (1, 2), (0, 2)]


def test_a_cycle_is_named_step_by_step() -> None:
    assert _cycle(3, [(0, 1), (1, 2)]) is None
    loop = _cycle(4, [(0, 1), (1, 2), (2, 3), (3, 1)])
    assert loop is not None and loop[0] == loop[-1] and set(loop) == {1, 2, 3}


def test_after_must_be_steps() -> None:
    wf = Workflow("w")
    a = wf.add(NewJob("a"))
    with pytest.raises(EnqueueError, match="after must be a list of steps"):
        wf.add(NewJob("b"), after=a)  # type: ignore[arg-type]
    wf.add(NewJob("c"), after=["a"])  # type: ignore[list-item]
    with pytest.raises(EnqueueError, match="step 1 \\('c'\\): after holds str"):
        _check_graph(wf)


def test_gates_per_fan_in() -> None:
    assert [gates_for(n) for n in (0, 1, 32, 33, 1000, 10_000)] == [1, 1, 1, 2, 32, 128]
