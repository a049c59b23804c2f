"""`workflows list|show ID|cancel ID`: a workflow's steps, their states and timings."""

from __future__ import annotations

import argparse
import json
import sys

from supervisor.cli.session import json_argument, positive_int, session
from supervisor.cli.verbs import Context, verb
from supervisor.queue import workflows
from supervisor.shared.exits import MasterExit
from supervisor.views.text import clock_time, iso, listing, safe, table


def workflows_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="workflows_command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", help="the newest workflows and their progress")
    p.add_argument("--limit", type=positive_int, default=20)
    json_argument(p)
    p = sub.add_parser("show", help="a workflow's steps: state, parents, timings, result size")
    p.add_argument("id", type=positive_int, metavar="ID")
    json_argument(p)
    p = sub.add_parser("cancel", help="cancel every step of a workflow not yet started")
    p.add_argument("id", type=positive_int, metavar="ID")
    json_argument(p)


@verb("workflows", "graphs of jobs: list, show, cancel", workflows_arguments)
def workflows_verb(ctx: Context) -> int:
    command = ctx.args.workflows_command
    if command == "list":
        return _list(ctx)
    if command == "show":
        return _show(ctx)
    return _cancel(ctx)


def _missing(workflow_id: int) -> int:
    print(f"pgq-supervisor workflows: no workflow {workflow_id}", file=sys.stderr)
    return MasterExit.ERROR


def _progress(status: workflows.WorkflowStatus) -> str:
    ended = status.total - status.remaining
    state = "cancelled" if status.cancelled_at else "finished" if status.finished else "running"
    return f"{ended} of {status.total} ended, {state}"


def _list(ctx: Context) -> int:
    with session(ctx, snapshot=True) as conn, conn.transaction():
        found = workflows.recent_workflows(conn, ctx.args.limit)
    if ctx.args.json:
        print(json.dumps([w.as_dict() for w in found], indent=2, ensure_ascii=False))
        return MasterExit.OK
    rows = [
        (w.id, w.name or "-", _progress(w), w.completed, w.discarded, w.cancelled) for w in found
    ]
    head = ("ID", "NAME", "PROGRESS", "COMPLETED", "DISCARDED", "CANCELLED")
    print("\n".join(table(head, rows, right=(0, 3, 4, 5))) if rows else "no workflows")
    return MasterExit.OK


def _show(ctx: Context) -> int:
    with session(ctx, snapshot=True) as conn, conn.transaction():
        try:
            status = workflows.workflow_status(conn, ctx.args.id)
        except LookupError:
            return _missing(ctx.args.id)
        steps = workflows.workflow_steps(conn, ctx.args.id)
    if ctx.args.json:
        document = {**status.as_dict(), "steps": [s.as_dict() for s in steps]}
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    name = f" ({safe(status.name)})" if status.name else ""
    lines = [
        f"workflow {status.id}{name}: {_progress(status)}",
        f"  completed {status.completed}, discarded {status.discarded}, "
        f"cancelled {status.cancelled}; created {iso(status.created_at)}",
    ]
    rows = []
    for s in steps:
        state = s.state + (f" (by {s.cause})" if s.cause else "")
        rows.append(
            (
                s.job_id,
                s.kind,
                s.queue,
                state,
                listing(s.parents, first=5) if s.parents else "-",
                clock_time(s.released_at) if s.released_at else "-",
                clock_time(s.started_at) if s.started_at else "-",
                clock_time(s.ended_at) if s.ended_at else "-",
                s.result_bytes if s.result_bytes is not None else "-",
            )
        )
    head = ("JOB", "KIND", "QUEUE", "STATE", "AFTER", "RELEASED", "STARTED", "ENDED", "RESULT B")
    lines += table(head, rows, right=(0, 8), indent="  ")
    print("\n".join(lines))
    return MasterExit.OK


def _cancel(ctx: Context) -> int:
    with session(ctx) as conn, conn.transaction():
        try:
            cancelled = workflows.cancel_workflow(conn, ctx.args.id)
        except LookupError:
            return _missing(ctx.args.id)
    if ctx.args.json:
        print(json.dumps({"id": ctx.args.id, "cancelled": cancelled}))
    else:
        print(
            f"workflow {ctx.args.id}: cancelled {cancelled} steps not yet started "
            "(running steps finish; nothing after them runs)"
        )
    return MasterExit.OK
