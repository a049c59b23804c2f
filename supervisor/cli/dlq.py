"""`dlq`: the dead-letter queue (discarded jobs): list, show, replay, purge.

Nothing here acts on jobs the operator did not name: replay needs a filter or --all, purge
needs --older-than, and both print which jobs they touched. Ages and cutoffs are measured on
the database's clock.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg.rows import dict_row

from supervisor.cli.session import (
    duration_arg,
    json_argument,
    listing_arguments,
    positive_int,
    session,
)
from supervisor.cli.verbs import Context, UsageError
from supervisor.config.units import format_duration
from supervisor.crypto import mask
from supervisor.queue import maintenance
from supervisor.queue.queries import query
from supervisor.shared.exits import MasterExit
from supervisor.shared.redact import row_shown
from supervisor.views.clock import server_clock
from supervisor.views.text import age, clock_time, iso, listing, safe, safe_block, table

ERROR_COLUMN = 100  # characters of the error line shown in `dlq list`


def dlq_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="dlq_command", metavar="COMMAND", required=True)
    p = sub.add_parser(
        "list", help="dead letters, newest first", description="dead letters, newest first"
    )
    _filters(p)
    p.add_argument(
        "--newer-than", type=duration_arg, metavar="AGE", help="finished less than AGE ago"
    )
    listing_arguments(p)

    p = sub.add_parser("show", help="everything about one dead letter")
    p.add_argument("id", type=positive_int, metavar="ID")
    json_argument(p)

    p = sub.add_parser(
        "replay",
        help="put dead letters back in their queues, attempts reset",
        description="Put dead letters back in their queues with attempts reset, due now. "
        "Say which: --id, --kind, --queue, --older-than (combined: all must match), or --all.",
    )
    p.add_argument(
        "--id",
        dest="ids",
        type=positive_int,
        nargs="+",
        action="extend",
        metavar="ID",
        help="these jobs (repeatable: --id 4 7 or --id 4 --id 7)",
    )
    _filters(p)
    p.add_argument("--all", action="store_true", help="every dead letter (and no filter)")
    json_argument(p)

    p = sub.add_parser(
        "purge",
        help="delete dead letters that finished more than --older-than ago",
        description="Delete dead letters that finished more than --older-than ago (required), "
        "in batches; --kind and --queue narrow it.",
    )
    p.add_argument("--older-than", type=duration_arg, metavar="AGE", required=True)
    p.add_argument("--kind", help="only jobs of this kind")
    p.add_argument("--queue", help="only jobs of this queue")
    p.add_argument(
        "--dry-run", action="store_true", help="say how many would be deleted; delete nothing"
    )
    json_argument(p)


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", help="only jobs of this kind")
    parser.add_argument("--queue", help="only jobs of this queue")
    parser.add_argument(
        "--older-than", type=duration_arg, metavar="AGE", help="finished more than AGE ago (1d)"
    )


def dlq_verb(ctx: Context) -> int:
    commands: dict[str, Callable[[Context], int]] = {
        "list": dlq_list,
        "show": dlq_show,
        "replay": dlq_replay,
        "purge": dlq_purge,
    }
    return commands[ctx.args.dlq_command](ctx)


def _before(now: datetime, seconds: float | None) -> datetime | None:
    return None if seconds is None else now - timedelta(seconds=seconds)


def _described(args: argparse.Namespace) -> str:
    """The filters in words, for messages: ``kind 'x', finished more than 1d ago``."""
    parts = []
    if getattr(args, "ids", None):
        parts.append(f"id {listing(sorted(set(args.ids)))}")
    if args.kind is not None:
        parts.append(f"kind {args.kind!r}")
    if args.queue is not None:
        parts.append(f"queue {args.queue!r}")
    if args.older_than is not None:
        parts.append(f"finished more than {format_duration(args.older_than)} ago")
    if getattr(args, "newer_than", None) is not None:
        parts.append(f"finished less than {format_duration(args.newer_than)} ago")
    return ", ".join(parts)


def _plural(n: int) -> str:
    return f"{n} dead letter" if n == 1 else f"{n} dead letters"


def telling_line(error: str | None) -> str | None:
    """The last non-blank line of an error: a traceback's exception and message."""
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    if not lines:
        return None
    if len(lines) > 1 and lines[-1].startswith("(attempt "):
        # "(attempt 5 of 5: no attempts left)" appended after a traceback's final newline.
        return f"{lines[-2]} {lines[-1]}"
    return lines[-1]


@dataclass(frozen=True)
class DeadLetter:
    id: int
    kind: str
    queue: str
    attempts: int
    max_attempts: int
    finished_at: datetime
    unique_key: str | None
    last_error: str | None


def dlq_list(ctx: Context) -> int:
    a = ctx.args
    with session(ctx, snapshot=True) as conn, conn.transaction():
        now = server_clock(conn)
        params = {
            "kind": a.kind,
            "queue": a.queue,
            "finished_before": _before(now, a.older_than),
            "finished_after": _before(now, a.newer_than),
        }
        jobs = [
            DeadLetter(*row)
            for row in conn.execute(query("list_discarded"), {**params, "limit": a.limit})
        ]
        total = len(jobs)
        if total == a.limit:
            row = conn.execute(query("count_discarded"), params).fetchone()
            total = int(row[0]) if row else total
    if a.json:
        document = {
            "generated_at": iso(now),
            "total": total,
            "jobs": [
                {
                    "id": j.id,
                    "kind": j.kind,
                    "queue": j.queue,
                    "attempts": j.attempts,
                    "max_attempts": ctx.config.attempt_limit(j.kind, j.max_attempts),
                    "finished_at": iso(j.finished_at),
                    "finished_age_seconds": (now - j.finished_at).total_seconds(),
                    "unique_key": j.unique_key,
                    "error": telling_line(j.last_error),
                }
                for j in jobs
            ],
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    filters = _described(a)
    if not jobs:
        print(f"no dead letters match ({filters})" if filters else "no dead letters")
        return MasterExit.OK
    rows = [
        [
            j.id,
            j.kind,
            j.queue,
            f"{j.attempts}/{ctx.config.attempt_limit(j.kind, j.max_attempts)}",
            f"{age((now - j.finished_at).total_seconds())} ago",
            _clip(safe(telling_line(j.last_error))),
        ]
        for j in jobs
    ]
    print(
        "\n".join(table(["ID", "KIND", "QUEUE", "ATTEMPTS", "FINISHED", "ERROR"], rows, right=(0,)))
    )
    shown = f"{len(jobs)} of {total}" if total > len(jobs) else f"all {total}"
    more = "; --limit N shows more" if total > len(jobs) else ""
    print(f"{shown} dead letters{f' ({filters})' if filters else ''}, newest first{more}")
    return MasterExit.OK


def _clip(text: str) -> str:
    return text if len(text) <= ERROR_COLUMN else text[: ERROR_COLUMN - 1] + "…"


def dlq_show(ctx: Context) -> int:
    job_id = ctx.args.id
    with session(ctx, snapshot=True) as conn, conn.transaction():
        now = server_clock(conn)
        cursor = conn.cursor(row_factory=dict_row)
        job = cursor.execute(query("job_by_id"), {"id": job_id}).fetchone()
    if job is not None:
        job = row_shown(job, ctx.config.web.redact)
    if job is None:
        return _fail(f"no job {job_id}: it completed, was purged, or never existed")
    if job["state"] != "discarded":
        return _fail(
            f"job {job_id} is {job['state']}, not discarded: dlq show shows dead letters only"
        )
    if ctx.args.json:
        document = {k: iso(v) if isinstance(v, datetime) else v for k, v in job.items()}
        document["max_attempts"] = ctx.config.attempt_limit(job["kind"], job["max_attempts"])
        document["args"] = mask(job["args"])  # envelopes as [encrypted: key ID]
        document["finished_age_seconds"] = (now - job["finished_at"]).total_seconds()
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    print("\n".join(_show_lines(ctx, job, now)))
    return MasterExit.OK


def _show_lines(ctx: Context, job: dict[str, Any], now: datetime) -> list[str]:
    def when(moment: datetime | None) -> str:
        if moment is None:
            return "-"
        return f"{clock_time(moment)} ({age((now - moment).total_seconds())} ago)"

    args = json.dumps(mask(job["args"]), indent=2, ensure_ascii=False, sort_keys=True)
    lines = [
        f"job {job['id']}: {safe(job['kind'])} on queue {safe(job['queue'])}, discarded",
        f"  attempts    {job['attempts']} of "
        f"{ctx.config.attempt_limit(job['kind'], job['max_attempts'])}",
        f"  priority    {job['priority']}",
        f"  unique key  {safe(job['unique_key'])}",
        f"  created     {when(job['created_at'])}",
        f"  last run    {when(job['started_at'])}",
        f"  finished    {when(job['finished_at'])}",
        "args:",
        *(f"  {line}" for line in safe_block(args).splitlines()),
        "last error:",
    ]
    error = job["last_error"]
    lines += [f"  {line}" for line in safe_block(error).splitlines()] if error else ["  -"]
    lines.append(f"replay it: pgq-supervisor -c {ctx.config.path} dlq replay --id {job['id']}")
    return lines


def _fail(message: str) -> int:
    print(f"pgq-supervisor dlq: {message}", file=sys.stderr)
    return MasterExit.ERROR


def dlq_replay(ctx: Context) -> int:
    a = ctx.args
    named = bool(a.ids) or any(v is not None for v in (a.kind, a.queue, a.older_than))
    if a.all and named:
        raise UsageError("--all replays every dead letter; give filters or --all, not both")
    if not a.all and not named:
        raise UsageError(
            "say which dead letters to replay: --id ID..., --kind K, --queue Q, "
            "--older-than AGE, or --all for every one (nothing was replayed)"
        )
    with session(ctx) as conn, conn.transaction():
        now = server_clock(conn)
        replayed = maintenance.replay(
            conn,
            maintenance.ReplayFilter(
                ids=a.ids,
                kind=a.kind,
                queue=a.queue,
                finished_before=_before(now, a.older_than),
                everything=a.all,
            ),
        )
    ids = sorted(replayed.ids)
    held = {job_id for job_id, _ in replayed.held}
    missing = sorted(set(a.ids or ()) - set(ids) - held)
    if a.json:
        document = {
            "replayed": ids,
            "held": [{"id": job_id, "unique_key": key} for job_id, key in sorted(replayed.held)],
            "missing": missing,
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.ERROR if replayed.held or missing else MasterExit.OK
    filters = "every dead letter" if a.all else _described(a)
    if ids:
        print(f"replayed {_plural(len(ids))} ({filters}), attempts reset, due now: {listing(ids)}")
    elif not replayed.held:
        print(f"replayed nothing: no dead letter matches ({filters})")
    code = MasterExit.OK
    if replayed.held:
        # A job waiting or running holds the key (or a newer dead letter of this replay took
        # it): replaying would duplicate that job, so these stay dead.
        keys = ", ".join(f"{job_id} ({safe(key)})" for job_id, key in sorted(replayed.held)[:20])
        code = _fail(
            f"left {_plural(len(replayed.held))} in the queue: each one's unique key is held "
            f"by a job waiting or running now, or by a newer dead letter replayed here: {keys}"
        )
    if missing:
        code = _fail(f"not replayed: {listing(missing)}: no dead letter with that id matches")
    return code


def dlq_purge(ctx: Context) -> int:
    a = ctx.args
    # Autocommit: each batch commits on its own, so a large purge never holds many row locks.
    with session(ctx, autocommit=True) as conn:
        cutoff = server_clock(conn) - timedelta(seconds=a.older_than)
        if a.dry_run:
            found = maintenance.count_dead_letters(conn, cutoff, kind=a.kind, queue=a.queue)
            if a.json:
                print(json.dumps({"would_purge": found, "dry_run": True}))
            else:
                said = f"would purge {_plural(found)} ({_described(a)})"
                print(f"{said}; nothing deleted (--dry-run)")
            return MasterExit.OK
        purged = 0
        while True:  # one commit per slice: a large purge never holds many row locks
            n = maintenance.purge_dead_letters_slice(
                conn, cutoff, limit=ctx.config.purge.batch, kind=a.kind, queue=a.queue
            )
            purged += n
            if n < ctx.config.purge.batch:
                break
    if a.json:
        print(json.dumps({"purged": purged}))
        return MasterExit.OK
    print(f"purged {_plural(purged)} ({_described(a)})")
    return MasterExit.OK
