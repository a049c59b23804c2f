"""`jobs cancel|retry|replay` by filter: every job matching --queue, --kind, --state, --tenant
and --args, counted first (--dry-run stops there), then acted on in slices with the same code
as the dashboard's /jobs (supervisor.queue.bulk), so both touch exactly the same jobs.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from supervisor.cli.session import session
from supervisor.cli.verbs import Context, UsageError
from supervisor.crypto.search import protected_keys, search_problem
from supervisor.queue import bulk
from supervisor.queue.control import STATES
from supervisor.shared.exits import MasterExit
from supervisor.shared.words import plural
from supervisor.views.text import safe

# The command's word -> the shared action's name.
ACTION_OF = {"cancel": "cancel", "retry": "run-now", "replay": "replay"}


def filter_arguments(parser: argparse.ArgumentParser) -> None:
    """IDs or a filter, and --dry-run, for a command that acts on jobs."""
    parser.add_argument("ids", type=_positive, nargs="*", metavar="ID", help="these jobs")
    group = parser.add_argument_group("or every job matching (at least one of)")
    group.add_argument("--queue", help="jobs of this queue")
    group.add_argument("--kind", help="jobs of this kind")
    group.add_argument("--state", choices=STATES, help="jobs in this state")
    group.add_argument("--tenant", help="jobs of this tenant")
    group.add_argument(
        "--args",
        metavar="JSON",
        help="jobs whose arguments contain this JSON object, e.g. '{\"customer\": 7}'",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="say how many jobs it would touch; change nothing"
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a job id is a positive whole number, got {text!r}")
    return int(text)


def job_filter(args: argparse.Namespace) -> bulk.JobFilter:
    """The filter given on the command line; bad --args is exit 2 naming it."""
    found: dict[str, Any] | None = None
    if args.args is not None:
        try:
            found = json.loads(args.args)
        except json.JSONDecodeError as exc:
            raise UsageError(
                f"--args must be a JSON object such as '{{\"invoice_id\": 42}}': {exc.msg} at "
                f"character {exc.pos}"
            ) from None
        if not isinstance(found, dict):
            raise UsageError("--args must be a JSON object such as '{\"invoice_id\": 42}'")
    return bulk.JobFilter(args.state, args.queue, args.kind, args.tenant, found)


def chosen(ctx: Context, command: str) -> bulk.JobFilter | None:
    """The filter, or None when IDs were given; both or neither is exit 2."""
    which = job_filter(ctx.args)
    problem = search_problem(which.args, protected_keys(ctx.config, which.kind))
    if problem:  # counted or acted on, the answer would tell the value one guess at a time
        raise UsageError(problem)
    if ctx.args.ids and not which.empty:
        raise UsageError(f"jobs {command}: give IDs or a filter, not both")
    if not ctx.args.ids and which.empty:
        raise UsageError(
            f"jobs {command}: name the jobs: IDs, or a filter (--queue, --kind, --state, "
            "--tenant, --args)"
        )
    return None if ctx.args.ids else which


def run(ctx: Context, command: str, which: bulk.JobFilter) -> int:
    action = bulk.ACTIONS[ACTION_OF[command]]
    try:
        states = bulk.states_for(action, which)
    except bulk.NotApplicable as exc:
        raise UsageError(str(exc)) from None
    history = ctx.config.history.enabled
    with session(ctx, autocommit=True) as conn:
        with conn.transaction():
            counted = bulk.count(conn, which, states)
        if ctx.args.dry_run:
            return _said(ctx, command, action, which, states, counted.jobs, None)
        changed: list[int] = []
        skipped, below = 0, None
        while True:  # one transaction per slice: a large action never holds many row locks
            with conn.transaction():
                done = bulk.act_slice(
                    conn,
                    action.name,
                    {**which.params(), "states": states},
                    top=counted.top,
                    floor=counted.floor,
                    below=below,
                    history=history,
                )
            changed += done.changed
            skipped += done.skipped
            below = done.lowest
            if len(done.ids) < bulk.SLICE:
                break
    return _said(ctx, command, action, which, states, len(changed) + skipped, (changed, skipped))


def _said(
    ctx: Context,
    command: str,
    action: bulk.Action,
    which: bulk.JobFilter,
    states: list[str],
    matched: int,
    done: tuple[list[int], int] | None,
) -> int:
    if ctx.args.json:
        document: dict[str, Any] = {
            "action": command,
            "filter": which.form(),
            "states": states,
            "dry_run": done is None,
            "matched": matched,
        }
        if done is not None:
            document["changed"] = sorted(done[0])
            document["skipped"] = done[1]
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    where = f"{safe(which.words())}; {' or '.join(states)}"
    if done is None:
        print(f"would {command} {plural(matched, 'job')} ({where}); nothing changed (--dry-run)")
        return MasterExit.OK
    changed, skipped = done
    print(f"{action.done} {plural(len(changed), 'job')} ({where})")
    if skipped:
        print(
            f"pgq-supervisor jobs {command}: {plural(skipped, 'job')} left as they were "
            "(finished or moved meanwhile, or a unique key held)",
            file=sys.stderr,
        )
    return MasterExit.OK
