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

from supervisor.cli.session import json_argument, queue_in_use, session
from supervisor.cli.verbs import Context, UsageError, verb
from supervisor.config.names import unserved_queue
from supervisor.queue import control, maintenance
from supervisor.shared.exits import MasterExit
from supervisor.views.text import clock_time, iso, safe, table


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
    json_argument(
        sub.add_parser(
            "list",
            help="every queue: the pools that serve it (weight), its jobs, whether it is paused",
            description="Every queue a pool of the config serves, that holds jobs or that is "
            "paused: the pools that claim from it with their weights, and its jobs due, "
            "scheduled, running and dead.",
        )
    )


@verb(
    "queues",
    "list the queues, pause or resume them on every host; exit 0, 2 on an unknown queue, 1 on "
    "a database error",
    queues_arguments,
)
def queues_verb(ctx: Context) -> int:
    command = ctx.args.queues_command
    with session(ctx) as conn, conn.transaction():
        if command == "paused":
            return _paused(ctx, control.paused_queues(conn))
        if command == "list":
            return _listed(ctx, maintenance.queue_stats(conn))
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


def _listed(ctx: Context, stats: list[maintenance.QueueStats]) -> int:
    found = {s.queue: s for s in stats}
    served: dict[str, list[tuple[str, int]]] = {}
    for pool in ctx.config.pools.values():
        for queue, weight in pool.queues.items():
            served.setdefault(queue, []).append((pool.name, weight))
    names = sorted(set(found) | set(served))
    counts = ("available", "scheduled", "running", "discarded")
    if ctx.args.json:
        document = {
            "queues": [
                {
                    "queue": name,
                    "pools": [{"pool": p, "weight": w} for p, w in served.get(name, [])],
                    "paused": bool(found[name].paused) if name in found else False,
                    **{c: getattr(found[name], c) if name in found else 0 for c in counts},
                }
                for name in names
            ]
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    if not names:
        print(f"no queue: no pool in {ctx.config.path} serves one and no job waits")
        return MasterExit.OK
    rows = []
    for name in names:
        s = found.get(name)
        pools = ", ".join(f"{p} ({w})" for p, w in served.get(name, [])) or "none"
        figures = [getattr(s, c) if s else 0 for c in counts]
        rows.append([safe(name), pools, *figures, "paused" if s and s.paused else ""])
    headers = ["QUEUE", "POOLS (WEIGHT)", "DUE", "SCHEDULED", "RUNNING", "DEAD", ""]
    print("\n".join(table(headers, rows, right=(2, 3, 4, 5))))
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
    for queue in ctx.args.queues:
        refusal = unserved_queue(ctx.config, safe(queue))
        if refusal and not queue_in_use(conn, queue):
            raise UsageError(
                f"{refusal}, no job waits in it and it is not paused; nothing paused. "
                "Pause it ahead of its first job with --any-queue"
            )
