"""Workflows: a graph of jobs enqueued in one transaction, each step running once its parents
have ended, with their results in ``job.parents``::

    wf = Workflow("invoice 42")
    pages = [wf.add(NewJob("render_page", {"page": n})) for n in range(300)]
    archive = wf.add(NewJob("zip_pages", {}), after=pages)
    wf.add(NewJob("mail_zip", {}), after=[archive])
    handle = enqueue_workflow(conn, wf)        # inside the caller's transaction

A step with parents waits in state 'waiting' (outside the claim index: no claim reads it, no
attempt is spent) until the statement that records its last parent's ending releases it, in
that same transaction (sql/migrations/0050_workflows.sql says how without a hot row). The whole
graph is checked before anything is sent (cycles, steps of another workflow, the size limits)
and written by one statement, however many steps it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg

from supervisor.queue import enqueue as enqueue_mod
from supervisor.queue import ordered
from supervisor.queue import tracecontext as tracing
from supervisor.queue.batches import shards_for
from supervisor.queue.columns import job_columns
from supervisor.queue.enqueue import EnqueueError, NewJob, _run, _run_async, _Step, _Steps
from supervisor.queue.queries import query

# The documented limits of one workflow (docs/workflows.md): a graph is written by one
# statement and its steps' rows are read whole by `workflows show` and the dashboard, so it is
# bounded like a statement's parameters are. A bigger job is several workflows, or a batch.
MAX_STEPS = 10_000
MAX_EDGES = 100_000
# Parents per gate row, and the most gate rows a step gets (as batches' shards, 0018): a fan-in
# of 1,000 parents counts down 32 rows, so no two of 32 consecutive completions wait on a row.
PARENTS_PER_GATE = 32
MAX_GATES = 128

Policy = Literal["cancel", "run"]
_POLICIES = ("cancel", "run")


@dataclass(frozen=True, eq=False)
class Step:
    """A step of a workflow, as ``Workflow.add`` returns it: what later steps name in ``after``.
    ``index`` is its place in ``add`` order (and in ``WorkflowHandle.job_ids``)."""

    workflow: Workflow = field(repr=False)
    index: int
    job: NewJob
    after: tuple[Step, ...]
    on_parent_failure: Policy


@dataclass
class Workflow:
    """A graph of jobs to enqueue together with ``enqueue_workflow``."""

    name: str | None = None
    steps: list[Step] = field(default_factory=list)

    def add(
        self,
        job: NewJob,
        *,
        after: Sequence[Step] = (),
        on_parent_failure: Policy = "cancel",
    ) -> Step:
        """Add ``job`` as a step that runs once every step in ``after`` has ended. With
        ``on_parent_failure="cancel"`` (the default) a parent discarded or cancelled cancels it
        and its descendants; with ``"run"`` it runs whatever its parents' outcomes."""
        where = f"workflow step {len(self.steps)} ({getattr(job, 'kind', job)!r})"
        if on_parent_failure not in _POLICIES:
            raise EnqueueError(
                f"{where}: on_parent_failure must be 'cancel' or 'run', not {on_parent_failure!r}"
            )
        if isinstance(after, Step) or not isinstance(after, Sequence | set | frozenset):
            raise EnqueueError(
                f"{where}: after must be a list of steps, not {type(after).__name__}"
            )
        step = Step(self, len(self.steps), job, tuple(after), on_parent_failure)
        self.steps.append(step)
        return step


@dataclass(frozen=True)
class WorkflowHandle:
    id: int
    job_ids: list[int]


@dataclass(frozen=True)
class WorkflowStatus:
    id: int
    name: str | None
    total: int
    remaining: int
    completed: int
    discarded: int
    cancelled: int
    created_at: datetime
    finished_at: datetime | None
    cancelled_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "total": self.total,
            "remaining": self.remaining,
            "completed": self.completed,
            "discarded": self.discarded,
            "cancelled": self.cancelled,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "cancelled_at": self.cancelled_at.isoformat() if self.cancelled_at else None,
        }


@dataclass(frozen=True)
class StepStatus:
    job_id: int
    position: int
    kind: str
    queue: str
    state: str
    on_parent_failure: str
    cause: str | None
    parents: list[int]
    released_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    attempts: int | None
    result_bytes: int | None

    def as_dict(self) -> dict[str, Any]:
        def iso(t: datetime | None) -> str | None:
            return t.isoformat() if t else None

        return {
            "id": self.job_id,
            "position": self.position,
            "kind": self.kind,
            "queue": self.queue,
            "state": self.state,
            "on_parent_failure": self.on_parent_failure,
            "cancelled_by": self.cause,
            "parents": self.parents,
            "released_at": iso(self.released_at),
            "started_at": iso(self.started_at),
            "ended_at": iso(self.ended_at),
            "attempts": self.attempts,
            "result_bytes": self.result_bytes,
        }


def gates_for(parents: int) -> int:
    return max(1, min(MAX_GATES, -(-parents // PARENTS_PER_GATE)))


def _check_graph(wf: Workflow) -> list[tuple[int, int]]:
    """The edges as (parent index, child index), or the EnqueueError of the first problem:
    nothing is sent for a graph that fails."""
    if not isinstance(wf, Workflow):
        raise EnqueueError(f"enqueue_workflow takes a Workflow, not {type(wf).__name__}")
    if not wf.steps:
        raise EnqueueError(f"workflow {wf.name!r} has no steps")
    if len(wf.steps) > MAX_STEPS:
        raise EnqueueError(
            f"workflow {wf.name!r} has {len(wf.steps)} steps; the limit is {MAX_STEPS} "
            "(split it into several workflows)"
        )
    edges: list[tuple[int, int]] = []
    for step in wf.steps:
        seen: set[int] = set()
        for parent in step.after:
            if not isinstance(parent, Step):
                raise EnqueueError(
                    f"workflow {wf.name!r}, step {step.index} ({step.job.kind!r}): after holds "
                    f"{type(parent).__name__}, not a step returned by add()"
                )
            if parent.workflow is not wf or wf.steps[parent.index] is not parent:
                raise EnqueueError(
                    f"workflow {wf.name!r}, step {step.index} ({step.job.kind!r}): after names "
                    f"a step of another workflow ({parent.job.kind!r})"
                )
            if parent.index not in seen:
                seen.add(parent.index)
                edges.append((parent.index, step.index))
    if len(edges) > MAX_EDGES:
        raise EnqueueError(f"workflow {wf.name!r} has {len(edges)} edges; the limit is {MAX_EDGES}")
    cycle = _cycle(len(wf.steps), edges)
    if cycle is not None:
        path = " -> ".join(f"{i} ({wf.steps[i].job.kind!r})" for i in cycle)
        raise EnqueueError(f"workflow {wf.name!r} has a cycle: {path}")
    return edges


def _cycle(n: int, edges: list[tuple[int, int]]) -> list[int] | None:
    """A cycle of the graph as step indexes (first repeated last), or None (Kahn's order)."""
    children: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for parent, child in edges:
        children[parent].append(child)
        indegree[child] += 1
    ready = [i for i in range(n) if indegree[i] == 0]
    done = 0
    while ready:
        node = ready.pop()
        done += 1
        for child in children[node]:
            indegree[child] -= 1
            if indegree[child] == 0:
                ready.append(child)
    if done == n:
        return None
    # Walk back along parents that are still unresolved until one repeats.
    parents: list[list[int]] = [[] for _ in range(n)]
    for parent, child in edges:
        if indegree[child] > 0 and indegree[parent] > 0:
            parents[child].append(parent)
    node = next(i for i in range(n) if indegree[i] > 0 and parents[i])
    path: list[int] = []
    while node not in path:
        path.append(node)
        node = parents[node][0]
    loop = [*path[path.index(node) :], node]
    return loop[::-1]


def _workflow_steps(wf: Workflow, notify: bool) -> _Steps:
    enqueue_mod._check_notify("enqueue_workflow", notify)
    edges = _check_graph(wf)
    if wf.name is not None:
        enqueue_mod.check_name("workflow name", wf.name)
    rows = enqueue_mod._rows([s.job for s in wf.steps], tracing.current_traceparent())
    parents = [0] * len(rows)
    for _, child in edges:
        parents[child] += 1
    for step, row, count in zip(wf.steps, rows, parents, strict=True):
        where = f"workflow {wf.name!r}, step {step.index} ({row.kind!r})"
        if row.unique_key is not None:
            # A duplicate would be another job's id, outside the graph.
            raise EnqueueError(f"{where}: a step cannot have a unique_key ({row.unique_key!r})")
        if count and row.run_at is not None:
            raise EnqueueError(
                f"{where}: a step with parents cannot have a run_at (when they end is not known "
                "in advance); give a delay, counted from its release"
            )
    # A step with an order key joins its key once it is ready (0068): one without parents now,
    # its key's row taken before it is written, as an enqueue takes it; one with parents when
    # they have ended (pgq.workflow_ended), so it never holds its key while it cannot start.
    roots = [i for i, row in enumerate(rows) if row.order_key is not None and not parents[i]]
    follows = [False] * len(rows)
    if roots:
        joined = yield from ordered.join_keys([rows[i] for i in roots], _Step)
        for i, follow in zip(roots, joined, strict=True):
            follows[i] = follow
    returned = yield _Step(
        "enqueue_workflow",
        {
            **job_columns(rows),
            "order_keys": [row.order_key for row in rows],
            "follows": follows,
            "policies": [s.on_parent_failure for s in wf.steps],
            "parents": parents,
            "shards": [gates_for(p) for p in parents],
            "edge_parents": [p + 1 for p, _ in edges],
            "edge_children": [c + 1 for _, c in edges],
            "batch_shards": shards_for(len(rows)),
            "name": wf.name,
            "notify": notify,
        },
        "all",
    )
    ids = [int(r[0]) for r in returned]
    if roots:
        yield from ordered.name_heads(
            [rows[i] for i in roots], [ids[i] for i in roots], [follows[i] for i in roots], _Step
        )
    if notify and returned[0][2]:
        yield _Step("notify_scheduled", {}, "none")
    return WorkflowHandle(int(returned[0][1]), ids)


def enqueue_workflow(
    conn: psycopg.Connection[Any], wf: Workflow, *, notify: bool = True
) -> WorkflowHandle:
    """Enqueue every step of ``wf`` on ``conn`` (inside its current transaction) in one
    statement; returns the workflow's id and its jobs' ids in ``add`` order. Steps may not
    carry a unique_key; a step with parents takes a delay (from its release), not a run_at."""
    return _run(conn, _workflow_steps(wf, notify))  # type: ignore[no-any-return]


async def enqueue_workflow_async(
    conn: psycopg.AsyncConnection[Any], wf: Workflow, *, notify: bool = True
) -> WorkflowHandle:
    """``enqueue_workflow`` for a ``psycopg.AsyncConnection``."""
    return await _run_async(conn, _workflow_steps(wf, notify))  # type: ignore[no-any-return]


def workflow_status(conn: psycopg.Connection[Any], workflow_id: int) -> WorkflowStatus:
    """A workflow's progress; LookupError when there is no such workflow."""
    row = conn.execute(query("workflow_status"), {"id": workflow_id}).fetchone()
    if row is None:
        raise LookupError(f"no workflow {workflow_id}")
    return WorkflowStatus(*row)


def workflow_steps(conn: psycopg.Connection[Any], workflow_id: int) -> list[StepStatus]:
    """Every step of a workflow in ``add`` order, with its state and timings."""
    return [StepStatus(*r) for r in conn.execute(query("workflow_steps"), {"id": workflow_id})]


def recent_workflows(conn: psycopg.Connection[Any], limit: int = 20) -> list[WorkflowStatus]:
    return [WorkflowStatus(*r) for r in conn.execute(query("recent_workflows"), {"limit": limit})]


def cancel_workflow(conn: psycopg.Connection[Any], workflow_id: int) -> int:
    """Cancel every step of the workflow not yet started; returns how many. Running steps
    finish (their children are cancelled). LookupError when there is no such workflow."""
    row = conn.execute(query("cancel_workflow"), {"id": workflow_id}).fetchone()
    if row is None or row[0] is None:
        raise LookupError(f"no workflow {workflow_id}")
    return int(row[0])


def job_workflow(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any] | None:
    """The workflow a job is a step of (id, name, position, policy, parents' ids), or None."""
    row = conn.execute(query("job_workflow"), {"id": job_id}).fetchone()
    if row is None:
        return None
    workflow_id, name, position, policy, parents = row
    return {
        "id": workflow_id,
        "name": name,
        "position": position,
        "on_parent_failure": policy,
        "parents": list(parents),
    }
