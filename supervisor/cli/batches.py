"""`batches show ID`: a batch's progress, and its `then` job once enqueued."""

from __future__ import annotations

import argparse
import json
import sys

from supervisor.cli.session import json_argument, positive_int, session
from supervisor.cli.verbs import Context, verb
from supervisor.queue.batches import batch_status
from supervisor.shared.exits import MasterExit
from supervisor.views.text import iso, safe


def batches_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="batches_command", metavar="COMMAND", required=True)
    p = sub.add_parser("show", help="a batch's progress and its then job")
    p.add_argument("id", type=positive_int, metavar="ID")
    json_argument(p)


@verb("batches", "batches of jobs: show", batches_arguments)
def batches_verb(ctx: Context) -> int:
    with session(ctx, snapshot=True) as conn, conn.transaction():
        try:
            status = batch_status(conn, ctx.args.id)
        except LookupError:
            print(f"pgq-supervisor batches: no batch {ctx.args.id}", file=sys.stderr)
            return MasterExit.ERROR
    if ctx.args.json:
        print(json.dumps(status.as_dict(), indent=2, ensure_ascii=False))
        return MasterExit.OK
    ended = status.total - status.remaining
    share = f"{100 * ended / status.total:.0f}%" if status.total else "100%"
    lines = [
        f"batch {status.id}: {ended} of {status.total} ended ({share})"
        + (", finished" if status.finished else ""),
        f"  completed   {status.completed}",
        f"  discarded   {status.discarded}",
        f"  cancelled   {status.cancelled}",
        f"  remaining   {status.remaining}",
        f"  created     {iso(status.created_at)}",
        f"  finished    {iso(status.finished_at) if status.finished_at else '-'}",
    ]
    if status.then_kind is None:
        lines.append("  then        -")
    else:
        job = f"job {status.then_job_id}" if status.then_job_id else "not yet enqueued"
        lines.append(f"  then        {safe(status.then_kind)} on {safe(status.then_queue)}: {job}")
    print("\n".join(lines))
    return MasterExit.OK
