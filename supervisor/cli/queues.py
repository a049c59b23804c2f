"""`queues pause|resume|paused`: stop claims from a queue on every host, let them start again.

The pause is a row in pgq.queue_pauses: every supervisor's next claim skips the queue, jobs
already running finish, and the pause outlives restarts until `queues resume`. A queue that no
pool of the config serves, that holds no waiting job and is not paused is most likely a typo:
pausing it is refused (exit 2) unless --any-queue says it is meant.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import psycopg

from supervisor.cli.session import cli_query, json_argument, session
from supervisor.cli.verbs import Context, UsageError, verb
from supervisor.queue import control
from supervisor.shared.exits import MasterExit
from supervisor.views.text import clock_time, iso, safe


def queues_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="queues_command", metavar="COMMAND", required=True)
    p = sub.add_parser("pause", help="stop claims from queues on every host (running jobs finish)")
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p.add_argument(
        "--any-queue",
        action="store_true",
        help="pause a queue that no pool in the config serves and no job is waiting in "
        "(ahead of its first job); without it such a queue is refused, exit 2",
    )
    json_argument(p)
    p = sub.add_parser("resume", help="let workers claim from paused queues again")
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    json_argument(p)
    json_argument(sub.add_parser("paused", help="list the paused queues"))


@verb(
    "queues",
    "pause or resume queues on every host; exit 0, 2 on an unknown queue, 1 on a database error",
    queues_arguments,
)
def queues_verb(ctx: Context) -> int:
    command = ctx.args.queues_command
    with session(ctx) as conn, conn.transaction():
        if command == "paused":
            return _paused(ctx, control.paused_queues(conn))
        if command == "pause" and not ctx.args.any_queue:
            _refuse_unknown(ctx, conn)
        act = control.pause_queue if command == "pause" else control.resume_queue
        changed = {queue: act(conn, queue) for queue in ctx.args.queues}
    if ctx.args.json:
        key = "paused" if command == "pause" else "resumed"
        document = {
            key: [q for q, did in changed.items() if did],
            "unchanged": [q for q, did in changed.items() if not did],
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    for queue, did in changed.items():
        if command == "pause":
            print(
                f"queue {safe(queue)} paused: no new claims on any host; running jobs finish"
                if did
                else f"queue {safe(queue)} was already paused"
            )
        else:
            print(f"queue {safe(queue)} resumed" if did else f"queue {safe(queue)} was not paused")
    return MasterExit.OK


def _paused(ctx: Context, pauses: list[control.Pause]) -> int:
    if ctx.args.json:
        document = {
            "paused": [
                {"queue": p.queue, "paused_at": iso(p.paused_at), "paused_by": p.paused_by}
                for p in pauses
            ]
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    for p in pauses:
        print(f"{safe(p.queue)}  paused {clock_time(p.paused_at)} by {safe(p.paused_by)}")
    if not pauses:
        print("no queue is paused")
    return MasterExit.OK


def _refuse_unknown(ctx: Context, conn: psycopg.Connection[Any]) -> None:
    served = {q for pool in ctx.config.pools.values() for q in pool.queues}
    unknown = [q for q in ctx.args.queues if q not in served and not _in_use(conn, q)]
    if unknown:
        names = ", ".join(repr(safe(q)) for q in unknown)
        raise UsageError(
            f"no queue {names}: no pool in {ctx.config.path} serves it, no job waits in it and "
            f"it is not paused (queues served: {', '.join(sorted(served))}); nothing paused. "
            "Pause it ahead of its first job with --any-queue"
        )


def _in_use(conn: psycopg.Connection[Any], queue: str) -> bool:
    row = conn.execute(cli_query("cli_queue_in_use"), {"queue": queue}).fetchone()
    return bool(row and row[0])
