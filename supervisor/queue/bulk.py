"""Actions on every job a filter matches: the one piece the dashboard's /jobs and the command
line's `jobs cancel|retry|replay` share (the SQL is sql/dashboard_jobs.sql).

A filter names any of state, queue, kind, tenant and arguments (a JSON object the job's
arguments contain). An action first counts what it would touch inside a range of ids fixed at
the count (at or below the newest job then, so jobs enqueued meanwhile are never touched), then
acts in slices, one transaction each, every slice locking its jobs with SKIP LOCKED so that two
operators never act on one job at once. The dashboard bounds the range to the newest ``SCAN``
jobs and each statement by a timeout; the command line reads the whole table.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from supervisor.queue import control, maintenance
from supervisor.queue.queries import query

SLICE = 500  # jobs one slice locks and acts on, in one transaction


# The statements of sql/dashboard_jobs.sql, by name (every sql/*.sql file is one dict).
bulk_query = query


@dataclass(frozen=True)
class Action:
    """One action that applies to jobs in some states."""

    name: str
    states: tuple[str, ...]
    verb: str  # "Cancel"
    done: str  # "cancelled or stopping"


ACTIONS = {
    a.name: a
    for a in (
        Action(
            "cancel",
            ("available", "scheduled", "waiting", "running"),
            "Cancel",
            "cancelled or stopping",
        ),
        Action("run-now", ("scheduled",), "Run now", "made due now"),
        Action("replay", ("discarded",), "Replay", "replayed"),
    )
}


@dataclass(frozen=True)
class JobFilter:
    state: str | None = None
    queue: str | None = None
    kind: str | None = None
    tenant: str | None = None
    args: dict[str, Any] | None = None

    @property
    def empty(self) -> bool:
        return all(v is None for v in asdict(self).values())

    def params(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "queue": self.queue,
            "kind": self.kind,
            "tenant": self.tenant,
            "args": Jsonb(self.args) if self.args is not None else None,
        }

    def form(self) -> dict[str, str]:
        """The filter as form fields (a link's query string, a --json document)."""
        values = {k: v for k, v in asdict(self).items() if v is not None and k != "args"}
        if self.args is not None:
            values["args"] = json.dumps(self.args, ensure_ascii=False, separators=(", ", ": "))
        return values

    def words(self) -> str:
        parts = [f"{k} {v}" for k, v in self.form().items()]
        return ", ".join(parts) if parts else "no filter"


class NotApplicable(ValueError):
    """The filter's state is one the action does not apply to."""


def states_for(action: Action, which: JobFilter) -> list[str]:
    """The states the action touches under this filter."""
    if which.state is None:
        return list(action.states)
    if which.state == "waiting" and action.name == "run-now":
        raise NotApplicable(
            "run now applies to scheduled jobs, not waiting ones: a waiting job waits for its "
            "workflow parents or for the earlier job of its order key to end, not for a time "
            "(cancel it, or let what it waits for end)"
        )
    if which.state not in action.states:
        raise NotApplicable(
            f"{action.verb.lower()} applies to {' or '.join(action.states)} jobs, not "
            f"{which.state} ones"
        )
    return [which.state]


@dataclass(frozen=True)
class Counted:
    """How many jobs an action on a filter will touch: those between ``floor`` and ``top``
    (ids), counted once; the slices act on that range only."""

    jobs: int
    top: int
    floor: int
    capped: bool  # the range stopped at a scan limit: older jobs are left out


def count(conn: psycopg.Connection[Any], which: JobFilter, states: list[str]) -> Counted:
    """The dry run over the whole table (the command line's; the dashboard bounds its own)."""
    row = conn.execute(bulk_query("web_top_id")).fetchone()
    top = int(row[0]) if row else 0
    params = {**which.params(), "states": states, "top": top, "floor": 0}
    found = conn.execute(bulk_query("web_count_jobs"), params).fetchone()
    return Counted(int(found[0]) if found else 0, top, 0, False)


@dataclass(frozen=True)
class Sliced:
    ids: list[int]  # the jobs this slice looked at, highest first
    changed: tuple[int, ...]  # the ones the action changed
    skipped: int  # the others (finished meanwhile, a unique key held)
    lowest: int | None  # where the next slice starts (below it)

    @property
    def acted(self) -> int:
        return len(self.changed)


def act(
    conn: psycopg.Connection[Any], name: str, ids: list[int], *, history: bool
) -> tuple[int, ...]:
    """Apply action ``name`` to ``ids`` with the library's own functions; the ids it changed."""
    if name == "cancel":
        done = control.cancel(conn, ids, history=history)
        return tuple(sorted([*done.cancelled, *done.requested]))
    if name == "run-now":
        return tuple(i for i in ids if control.retry_now(conn, i) is not None)
    if name == "replay":
        return tuple(maintenance.replay(conn, maintenance.ReplayFilter(ids=ids)).ids)
    raise ValueError(f"unknown bulk action {name!r}")


def act_slice(
    conn: psycopg.Connection[Any],
    name: str,
    params: dict[str, Any],
    *,
    top: int,
    floor: int,
    below: int | None,
    limit: int = SLICE,
    history: bool,
) -> Sliced:
    """One slice: the next ``limit`` matching ids below ``below``, locked, acted on in the
    caller's transaction. ``params`` are the filter's with ``states``."""
    # A cancel takes no row lock here: cancel_jobs locks an ordered job's key before the job
    # (sql/control.sql), as the ending of its key's head does; locking the job first would
    # deadlock with that ending (it holds the key, then releases the waiting follower).
    text = bulk_query("web_slice_ids")
    found = conn.execute(
        text if name == "cancel" else text + "\nFOR UPDATE SKIP LOCKED",
        {**params, "top": top, "floor": floor, "below": below, "limit": limit},
    ).fetchall()
    ids = [row[0] for row in found]
    changed = act(conn, name, ids, history=history) if ids else ()
    return Sliced(ids, changed, len(ids) - len(changed), min(ids) if ids else None)
