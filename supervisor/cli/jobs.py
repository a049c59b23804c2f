"""`jobs`: look at jobs in any state, cancel them, run a waiting one now, resolve unknown ones.

`jobs list` and `jobs show` read; `jobs cancel` and `jobs retry` write only the jobs named and
say, id by id, what they did. Ages are measured on the database's clock.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from supervisor.cli import costs_view, filtered, jobhistory
from supervisor.cli.dlq import telling_line
from supervisor.cli.jobhistory import attempt_limit
from supervisor.cli.operator import parse_json_object
from supervisor.cli.session import (
    json_argument,
    listing_arguments,
    positive_int,
    session,
)
from supervisor.cli.verbs import Context, UsageError, verb
from supervisor.crypto import mask
from supervisor.crypto.search import protected_keys, search_problem
from supervisor.queue import bulk, control, costs, maintenance, progress, unknown, workflows
from supervisor.shared.exits import MasterExit
from supervisor.shared.redact import redact, shown
from supervisor.shared.words import plural
from supervisor.views.aging import aging_lines, job_aging
from supervisor.views.clock import server_clock
from supervisor.views.order import job_order, order_lines
from supervisor.views.text import age, clock_time, iso, listing, safe, safe_block, table

ERROR_COLUMN = 60  # characters of the error line shown in `jobs list`


def jobs_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="jobs_command", metavar="COMMAND", required=True)
    p = sub.add_parser("list", help="jobs in any state, newest first")
    p.add_argument("--state", choices=control.STATES, help="only jobs in this state")
    p.add_argument("--queue", help="only jobs of this queue")
    p.add_argument("--kind", help="only jobs of this kind")
    p.add_argument(
        "--args",
        dest="args_filter",
        metavar="JSON",
        help="only jobs whose arguments contain this JSON object: '{\"invoice_id\": 42}'",
    )
    listing_arguments(p)

    p = sub.add_parser("show", help="everything about one job, and where it runs")
    p.add_argument("id", type=positive_int, metavar="ID")
    json_argument(p)

    p = sub.add_parser(
        "cancel",
        help="cancel jobs, by id or by filter: a waiting one never runs, a running one is stopped",
        description="Cancel jobs, named by id or by a filter. A waiting job becomes cancelled at "
        "once; a running one is stopped by the supervisor running it within about a second, and "
        "is not retried.",
    )
    filtered.filter_arguments(p)
    json_argument(p)

    p = sub.add_parser(
        "retry",
        help="run waiting jobs now (waiting for their retry, or scheduled), by id or by filter",
        description="Make waiting jobs (in their retry backoff, or scheduled for later) due now, "
        "their attempts kept; named by id or by a filter. A dead letter goes back with "
        "`jobs replay`.",
    )
    filtered.filter_arguments(p)
    json_argument(p)

    p = sub.add_parser(
        "replay",
        help="put dead letters back in their queues, attempts reset, by id or by filter",
        description="Put dead letters (discarded jobs) back in their queues with their attempts "
        "reset, due now; named by id or by a filter. One whose unique key a waiting or running "
        "job holds stays dead.",
    )
    filtered.filter_arguments(p)
    json_argument(p)

    p = sub.add_parser(
        "resolve",
        help="decide what happened to jobs whose outcome is unknown (effects: external)",
        description="End the 'unknown' state of jobs of a kind with effects outside the "
        "database: --as completed (the effect happened), retry (it did not: run it again) or "
        "discarded (a dead letter). Check the outside system first.",
    )
    p.add_argument("ids", type=positive_int, nargs="+", metavar="ID")
    p.add_argument("--as", dest="resolution", required=True, choices=unknown.RESOLUTIONS)


@verb(
    "jobs",
    "jobs in any state: list, show, cancel, retry, replay, resolve; exit 0, 1 when a job named is "
    "missing or in the wrong state (or on a database error), 2 on bad usage",
    jobs_arguments,
)
def jobs_verb(ctx: Context) -> int:
    commands: dict[str, Callable[[Context], int]] = {
        "list": jobs_list,
        "show": jobs_show,
        "cancel": jobs_cancel,
        "retry": jobs_retry,
        "replay": jobs_replay,
        "resolve": jobs_resolve,
    }
    return commands[ctx.args.jobs_command](ctx)


def _fail(message: str) -> int:
    print(f"pgq-supervisor jobs: {message}", file=sys.stderr)
    return MasterExit.ERROR


def _last_line(error: str | None) -> str:
    line = telling_line(error)
    text = safe(line) if line else ""
    return text if len(text) <= ERROR_COLUMN else text[: ERROR_COLUMN - 1] + "…"


def _earlier_errors(errors: control.Errors) -> list[str]:
    """The errors before the last one (shown whole above it), a line each, newest first."""
    earlier = errors.newest_first[1:]
    if not earlier:
        return []
    dropped = f", {errors.dropped} older ones dropped" if errors.dropped else ""
    lines = [f"earlier errors ({len(earlier)} kept{dropped}):"]
    for e in earlier:
        lines.append(f"  #{e.seq} attempt {e.attempt} at {clock_time(e.at)}: {_last_line(e.error)}")
    return lines


def _when(job: control.JobRow, now: datetime) -> str:
    """The moment that matters for the job's state, as an age."""
    if job.state in ("discarded", "cancelled") and job.finished_at is not None:
        return f"finished {age((now - job.finished_at).total_seconds())} ago"
    if job.state == "running" and job.started_at is not None:
        return f"running {age((now - job.started_at).total_seconds())}"
    wait = (job.run_at - now).total_seconds()
    return f"due in {age(wait)}" if wait > 0 else f"due {age(-wait)} ago"


def _jsonable(value: dict[str, Any]) -> dict[str, Any]:
    # Encrypted arguments as [encrypted: key ID], never their envelope (supervisor/crypto).
    return {
        k: iso(v) if isinstance(v, datetime) else mask(v) if k == "args" else v
        for k, v in value.items()
    }


def jobs_list(ctx: Context) -> int:
    a = ctx.args
    search = parse_json_object(a.args_filter) if a.args_filter is not None else None
    problem = search_problem(search, protected_keys(ctx.config, a.kind))
    if problem:  # found or not, the answer would tell the value one guess at a time
        raise UsageError(problem)
    with session(ctx, snapshot=True) as conn, conn.transaction():
        now = server_clock(conn)
        jobs = control.list_jobs(
            conn, state=a.state, queue=a.queue, kind=a.kind, args=search, limit=a.limit
        )
    if a.json:
        limit = ctx.config.attempt_limit
        document = {
            "generated_at": iso(now),
            "jobs": [
                {**_jsonable(asdict(j)), "max_attempts": limit(j.kind, j.max_attempts)}
                for j in jobs
            ],
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    if not jobs:
        print("no jobs match")
        return MasterExit.OK
    rows = [
        [
            j.id,
            safe(j.kind),
            safe(j.queue),
            j.state + (" (cancelling)" if j.state == "running" and j.cancel_requested_at else ""),
            f"{j.attempts}/{ctx.config.attempt_limit(j.kind, j.max_attempts)}",
            _when(j, now),
            _last_line(j.last_error),
        ]
        for j in jobs
    ]
    headers = ["ID", "KIND", "QUEUE", "STATE", "ATTEMPTS", "WHEN", "LAST ERROR"]
    print("\n".join(table(headers, rows, right=(0,))))
    more = "; --limit N shows more" if len(jobs) == a.limit else ""
    print(f"{plural(len(jobs), 'job')}, newest first{more}")
    return MasterExit.OK


def jobs_show(ctx: Context) -> int:
    with session(ctx, snapshot=True) as conn, conn.transaction():
        now = server_clock(conn)
        job = control.show_job(conn, ctx.args.id)
        kept = _kept_result(conn, ctx.args.id)
        step = workflows.job_workflow(conn, ctx.args.id)
        history = jobhistory.read(conn, ctx.args.id) if job is None else []
        spent = costs.job_costs(conn, ctx.args.id)
        said = progress.read(conn, [ctx.args.id]).get(ctx.args.id)
        aged = (
            job_aging(conn, ctx.args.id, ctx.config.aging.period(job.queue), now)
            if job is not None
            else None
        )
        ordered = job_order(conn, ctx.args.id) if job is not None else None
    if job is not None:
        job = shown(job, ctx.config.web.redact)
    # What a handler returned may carry a redacted key's value too (a card echoed back).
    kept = redact(kept, ctx.config.web.redact) if kept is not None else None
    if job is None and history:
        return jobhistory.show(ctx, ctx.args.id, history, now, kept, step, spent, said)
    if job is None and kept is not None:
        return _show_completed(ctx, kept, step)
    if job is None:
        return _fail(
            f"no job {ctx.args.id}: it never existed, or it finished and its history was "
            "purged (or history is off: history.enabled)"
        )
    limit = attempt_limit(ctx, job.kind, job.max_attempts)
    if ctx.args.json:
        document = {**_jsonable(asdict(job)), "attempt_limit": limit.to_json()}
        document["result"] = kept
        document["workflow"] = step
        document.update(costs_view.to_json(spent))
        document["progress"] = said.to_json() if said is not None else None
        document["aging"] = aged
        document["order"] = ordered
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK

    def when(moment: datetime | None) -> str:
        if moment is None:
            return "-"
        seconds = (now - moment).total_seconds()
        return f"{clock_time(moment)} ({age(abs(seconds))} {'ago' if seconds >= 0 else 'from now'})"

    state = job.state
    if job.cancel_requested_at is not None and state == "running":
        state += f", cancel requested {when(job.cancel_requested_at)}"
    lines = [
        f"job {job.id}: {safe(job.kind)} on queue {safe(job.queue)}, {state}",
        f"  attempts    {job.attempts} of {limit.effective} ({limit.reason})",
        f"  priority    {job.priority}",
        *aging_lines(aged),
        f"  unique key  {safe(job.unique_key)}",
        *order_lines(ordered),
        f"  created     {when(job.created_at)}",
        f"  run at      {when(job.run_at)}",
        f"  last run    {when(job.started_at)}",
        f"  finished    {when(job.finished_at)}",
    ]
    lines += jobhistory.workflow_lines(step)
    if job.state == "unknown":
        lines.append(
            "  outcome     unknown: its kind has effects outside the database; check there, "
            f"then `jobs resolve {job.id} --as completed|retry|discarded`"
        )
    lines += costs_view.progress_lines(said, now)
    if job.state == "running":
        where = f"worker {safe(job.locked_by)}"
        if job.pool is not None:
            where = f"{safe(job.host)}: {job.pool}#{job.slot} (pid {job.pid}), {where}"
        lines += [f"  runs on     {where}", f"  lease until {when(job.lease_until)}"]
    args = json.dumps(mask(job.args), indent=2, ensure_ascii=False, sort_keys=True)
    lines += ["args:", *(f"  {line}" for line in safe_block(args).splitlines()), "last error:"]
    error = job.last_error
    lines += [f"  {line}" for line in safe_block(error).splitlines()] if error else ["  -"]
    lines += _earlier_errors(control.errors_of(job.errors))
    lines += costs_view.lines(spent)
    if kept is not None:
        text = json.dumps(kept, indent=2, ensure_ascii=False, sort_keys=True)
        lines += ["result:", *(f"  {line}" for line in safe_block(text).splitlines())]
    print("\n".join(lines))
    return MasterExit.OK


def _kept_result(conn: Any, job_id: int) -> Any:
    try:
        return unknown.result(conn, job_id)
    except LookupError:
        return None


def _show_completed(ctx: Context, kept: Any, step: dict[str, Any] | None = None) -> int:
    """A completed job left pgq.jobs; what its handler returned is still kept."""
    if ctx.args.json:
        document = {"id": ctx.args.id, "state": "completed", "result": kept, "workflow": step}
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    text = json.dumps(kept, indent=2, ensure_ascii=False, sort_keys=True)
    print(f"job {ctx.args.id}: completed (no longer in pgq.jobs)")
    print("\n".join([*jobhistory.workflow_lines(step), "result:"]))
    print("\n".join(f"  {line}" for line in safe_block(text).splitlines()))
    return MasterExit.OK


def jobs_resolve(ctx: Context) -> int:
    a = ctx.args
    with session(ctx) as conn, conn.transaction():
        done = unknown.resolve(conn, a.ids, a.resolution, history=ctx.config.history.enabled)
    code = MasterExit.OK
    then = {"completed": "completed", "available": "due again now", "discarded": "discarded"}
    for job in done:
        if job.state == "held":
            code = _fail(
                f"job {job.id} ({safe(job.kind)}) on queue {safe(job.queue)}: not retried, its "
                f"unique key is held by job {job.holder}; it stays unknown (resolve it as "
                "completed or discarded, or retry it once that job has ended)"
            )
            continue
        print(f"job {job.id} ({safe(job.kind)}) on queue {safe(job.queue)}: {then[job.state]}")
    left = sorted(set(a.ids) - {j.id for j in done})
    if left:
        return _fail(f"not unknown, left as they are: {listing(left)}")
    return code


def _dry_run_ids(ctx: Context, command: str) -> int:
    """--dry-run with IDs: how many of them the command would change, and nothing changed."""
    action = bulk.ACTIONS[filtered.ACTION_OF[command]]
    with session(ctx, snapshot=True) as conn, conn.transaction():
        found = {i: control.show_job(conn, i) for i in sorted(set(ctx.args.ids))}
    would = [i for i, job in found.items() if job is not None and job.state in action.states]
    if ctx.args.json:
        print(json.dumps({"action": command, "dry_run": True, "would": would}, indent=2))
        return MasterExit.OK
    left = sorted(set(found) - set(would))
    rest = f"; {listing(left)} left as they are (not {' or '.join(action.states)})" if left else ""
    print(
        f"would {command} {plural(len(would), 'job')}{f' ({listing(would)})' if would else ''}"
        f"{rest}; nothing changed (--dry-run)"
    )
    return MasterExit.OK


def jobs_cancel(ctx: Context) -> int:
    which = filtered.chosen(ctx, "cancel")
    if which is not None:
        return filtered.run(ctx, "cancel", which)
    if ctx.args.dry_run:
        return _dry_run_ids(ctx, "cancel")
    with session(ctx) as conn, conn.transaction():
        result = control.cancel(conn, ctx.args.ids, history=ctx.config.history.enabled)
    if ctx.args.json:
        document = {
            "cancelled": sorted(result.cancelled),
            "stopping": sorted(result.requested),
            "finished": {str(i): state for i, state in sorted(result.finished.items())},
            "missing": sorted(result.missing),
        }
        print(json.dumps(document, indent=2))
        return MasterExit.ERROR if result.finished or result.missing else MasterExit.OK
    if result.cancelled:
        print(f"cancelled {listing(result.cancelled)} (waiting: they will not run)")
    if result.requested:
        print(
            f"stopping {listing(result.requested)} (running: the supervisor running each one "
            "stops it within about a second; it ends cancelled, not retried)"
        )
    code = MasterExit.OK
    if result.finished:
        listed = ", ".join(f"{i} ({state})" for i, state in sorted(result.finished.items()))
        code = _fail(f"already finished, left as they are: {listed}")
    if result.missing:
        code = _fail(f"no job {listing(result.missing)}: completed, purged, or never existed")
    return code


def jobs_replay(ctx: Context) -> int:
    which = filtered.chosen(ctx, "replay")
    if which is not None:
        return filtered.run(ctx, "replay", which)
    if ctx.args.dry_run:
        return _dry_run_ids(ctx, "replay")
    ids = sorted(set(ctx.args.ids))
    with session(ctx) as conn, conn.transaction():
        replayed = maintenance.replay(conn, maintenance.ReplayFilter(ids=ids))
    left = sorted(set(ids) - set(replayed.ids))
    if ctx.args.json:
        document = {"replayed": sorted(replayed.ids), "left": left}
        print(json.dumps(document, indent=2))
        return MasterExit.ERROR if left else MasterExit.OK
    if replayed.ids:
        print(f"replayed {listing(sorted(replayed.ids))}: attempts reset, due now")
    if left:
        return _fail(
            f"not replayed: {listing(left)}: not a dead letter, gone, or its unique key is held"
        )
    return MasterExit.OK


def jobs_retry(ctx: Context) -> int:
    which = filtered.chosen(ctx, "retry")
    if which is not None:
        return filtered.run(ctx, "retry", which)
    if ctx.args.dry_run:
        return _dry_run_ids(ctx, "retry")
    documents: list[dict[str, Any]] = []
    codes = [_retry_one(ctx, job_id, documents) for job_id in dict.fromkeys(ctx.args.ids)]
    if ctx.args.json:
        # One id: its document, as before; several: one document listing each.
        shown = documents[0] if len(documents) == 1 else {"jobs": documents}
        print(json.dumps(shown, indent=2))
    return max(codes)


def _retry_one(ctx: Context, job_id: int, documents: list[dict[str, Any]]) -> int:
    with session(ctx) as conn, conn.transaction():
        moved = control.retry_now(conn, job_id)
        job = control.show_job(conn, job_id) if moved is None else None
        order = job_order(conn, job_id) if job is not None and job.state == "waiting" else None
    documents.append(
        {
            "id": job_id,
            "due_now": moved is not None,
            "state": "available" if moved is not None else (job.state if job else None),
        }
    )
    if moved is not None:
        if not ctx.args.json:
            print(f"job {job_id} on queue {safe(moved.queue)} is due now (attempts kept)")
        return MasterExit.OK
    if job is None:
        return _fail(f"no job {job_id}: it completed, was purged, or never existed")
    if job.state == "discarded":
        return _fail(
            f"job {job_id} is discarded: put it back with "
            f"`pgq-supervisor -c {ctx.config.path} jobs replay {job_id}`"
        )
    if job.state == "waiting":
        return _fail(
            f"job {job_id} {_waits_for(order)}: it cannot be made due before that "
            "(cancel it, or let that end)"
        )
    return _fail(f"job {job_id} is {job.state}, not waiting: nothing to retry")


def _waits_for(order: dict[str, Any] | None) -> str:
    """What a job in state 'waiting' waits for, in words (`jobs retry` of one)."""
    if order is not None and order["waits_for"] is not None:
        return (
            f"waits for job {order['waits_for']} ({order['waits_for_state']}), the earlier job "
            f"of its order key {safe(order['key'])}, to end"
        )
    return "waits for its workflow parents to end"
