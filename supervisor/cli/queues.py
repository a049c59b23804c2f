"""`queues pause|resume`: stop claims from a queue on every host, and let them start again.

The pause is a row in pgq.queue_pauses: every supervisor's next claim skips the queue, jobs
already running finish, and the pause outlives restarts until `queues resume`.
"""

from __future__ import annotations

import argparse

from supervisor.cli.session import session
from supervisor.cli.tables import clock_time, safe
from supervisor.cli.verbs import Context, verb
from supervisor.queue import control
from supervisor.shared.exits import MasterExit


def queues_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="queues_command", metavar="COMMAND", required=True)
    p = sub.add_parser("pause", help="stop claims from queues on every host (running jobs finish)")
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    p = sub.add_parser("resume", help="let workers claim from paused queues again")
    p.add_argument("queues", nargs="+", metavar="QUEUE")
    sub.add_parser("paused", help="list the paused queues")


@verb("queues", "pause or resume queues on every host", queues_arguments)
def queues_verb(ctx: Context) -> int:
    command = ctx.args.queues_command
    with session(ctx) as conn, conn.transaction():
        if command == "paused":
            pauses = control.paused_queues(conn)
            for p in pauses:
                print(f"{safe(p.queue)}  paused {clock_time(p.paused_at)} by {safe(p.paused_by)}")
            if not pauses:
                print("no queue is paused")
            return MasterExit.OK
        act = control.pause_queue if command == "pause" else control.resume_queue
        changed = {queue: act(conn, queue) for queue in ctx.args.queues}
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
