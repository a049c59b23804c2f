"""The operator's verbs: `status`, `enqueue` and `dlq` (list, show, replay, purge).

Each one prints what it did, exits 0 on success, 2 on bad usage (before anything is written) and
1 otherwise (supervisor.shared.exits.MasterExit). Everything they read or write goes through
the named queries and the library functions the supervisor itself uses.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from datetime import datetime
from typing import Any

import psycopg

from supervisor.cli.dlq import dlq_arguments, dlq_verb
from supervisor.cli.session import (
    duration_arg,
    json_argument,
    positive_int,
    queue_in_use,
    session,
    timestamp_arg,
)
from supervisor.cli.verbs import Context, UsageError, verb
from supervisor.config.names import unserved_queue
from supervisor.queue.dsn import describe
from supervisor.queue.enqueue import (
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    EnqueueError,
    check_name,
    enqueue,
)
from supervisor.queue.queries import query
from supervisor.shared.exits import MasterExit
from supervisor.views.text import age, clock_time, safe, width


def status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    parser.add_argument(
        "--watch",
        nargs="?",
        const=2.0,
        type=_seconds,
        metavar="SECONDS",
        help="refresh every SECONDS (default 2) until Ctrl-C; with --json, one document a line",
    )
    parser.add_argument(
        "--count", type=positive_int, metavar="N", help="with --watch: stop after N refreshes"
    )


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, got {text!r}") from None
    if not 0.1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"between 0.1 and 3600 seconds, got {text}")
    return value


@verb(
    "status",
    "per queue: jobs due, scheduled, running, dead, oldest wait, recent throughput; "
    "pools and weights; live supervisors and their children; what needs attention; exit 0, 1 "
    "on a database error",
    status_arguments,
)
def status(ctx: Context) -> int:
    a = ctx.args
    if a.count is not None and a.watch is None:
        raise UsageError("--count goes with --watch")
    # A terminal is cleared and redrawn; a pipe gets each refresh after the last.
    redraw = a.watch is not None and not a.json and sys.stdout.isatty()
    try:
        return _show_status(ctx, redraw)
    except KeyboardInterrupt:  # Ctrl-C ends a watch; not worth a traceback
        return MasterExit.OK


def _show_status(ctx: Context, redraw: bool) -> int:
    from supervisor.views import status as status_view

    a = ctx.args
    shown = 0
    with session(ctx, snapshot=True) as conn:
        while True:
            with conn.transaction():
                snapshot = status_view.gather(conn, ctx.config, describe(conn.info.dsn))
            if a.json:
                indent = None if a.watch is not None else 2
                print(json.dumps(status_view.to_json(snapshot), indent=indent, ensure_ascii=False))
            else:
                text = "\n".join(status_view.render(snapshot))
                print(("\x1b[H\x1b[2J" if redraw else "") + text)
            shown += 1
            if a.watch is None or (a.count is not None and shown >= a.count):
                return MasterExit.OK
            sys.stdout.flush()
            time.sleep(a.watch)


def enqueue_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("kind", metavar="KIND", help="the job kind (a key under handlers:)")
    parser.add_argument(
        "args_json",
        metavar="ARGS_JSON",
        nargs="?",
        help="the handler's keyword arguments as a JSON object, e.g. '{\"invoice_id\": 42}' "
        "(default: {})",
    )
    parser.add_argument(
        "--queue", default=DEFAULT_QUEUE, help=f"queue to put it in (default: {DEFAULT_QUEUE})"
    )
    parser.add_argument(
        "--priority", type=int, default=0, metavar="N", help="higher runs first (default 0)"
    )
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--delay", type=duration_arg, metavar="DURATION", help="run after this long: 30s, 5m, 1h30m"
    )
    when.add_argument(
        "--run-at",
        type=timestamp_arg,
        metavar="TIME",
        help="run at this time: ISO 8601 with an offset, e.g. 2030-01-01T03:00:00Z",
    )
    parser.add_argument(
        "--max-attempts",
        type=positive_int,
        metavar="N",
        help="attempts before it is discarded (default: jobs.KIND.max_attempts in the config, "
        f"else {DEFAULT_MAX_ATTEMPTS})",
    )
    parser.add_argument(
        "--unique-key",
        metavar="KEY",
        help="enqueue nothing while a waiting or running job holds this key",
    )
    parser.add_argument(
        "--any-kind",
        action="store_true",
        help="enqueue a KIND that no handler in this config serves (a supervisor with another "
        "config handles it); without it such a kind is refused, exit 2",
    )
    parser.add_argument(
        "--any-queue",
        action="store_true",
        help="enqueue on a queue that no pool in this config serves and no job waits in (a "
        "supervisor with another config serves it); without it such a queue is refused, exit 2",
    )
    parser.add_argument(
        "--tenant",
        metavar="NAME",
        help="whose job it is (a customer, an endpoint): a queue is shared fairly among tenants",
    )
    json_argument(parser)


@verb(
    "enqueue",
    "put one job in a queue (and wake the workers); exit 0, 2 on bad usage or an unknown kind, "
    "1 on a database error",
    enqueue_arguments,
)
def enqueue_verb(ctx: Context) -> int:
    a = ctx.args
    args = parse_json_object(a.args_json)
    if a.kind not in ctx.config.handlers and not a.any_kind:
        try:  # a kind no handler could ever have is refused for what it is first
            check_name("kind", a.kind)
        except EnqueueError as exc:
            raise UsageError(str(exc)) from None
        raise UsageError(unknown_kind(ctx, a.kind))
    policy = ctx.config.jobs.get(a.kind)
    max_attempts = a.max_attempts
    if max_attempts is None:
        # The supervisor applies the configured policy anyway; writing it into the row keeps
        # `dlq show`'s "attempt N of M" true.
        max_attempts = (policy.max_attempts if policy else None) or DEFAULT_MAX_ATTEMPTS
    with session(ctx) as conn, conn.transaction():
        refusal = None if a.any_queue else unserved_queue(ctx.config, a.queue)
        if refusal and queue_in_use(conn, a.queue):
            refusal = None  # jobs wait in it or it is paused: another deploy's queue
        try:
            job_id = enqueue(
                conn,
                a.kind,
                args,
                queue=a.queue,
                priority=a.priority,
                delay=a.delay,
                run_at=a.run_at,
                max_attempts=max_attempts,
                unique_key=a.unique_key,
                tenant=a.tenant,
            )
        except EnqueueError as exc:
            raise UsageError(str(exc)) from None
        # After enqueue's own checks (a bad priority is named first); the raise rolls it back.
        if refusal:
            raise UsageError(
                f"{refusal}; nothing enqueued (--any-queue enqueues it for a supervisor with "
                "another config)"
            )
        held = a.unique_key is not None and not _inserted_here(conn, job_id)
    for warning in _enqueue_warnings(ctx, a.kind, a.queue):
        print(f"pgq-supervisor enqueue: warning: {warning}", file=sys.stderr)
    if a.json:
        document = {"id": job_id, "kind": a.kind, "queue": a.queue, "enqueued": not held}
        print(json.dumps(document, indent=2, ensure_ascii=False))
    elif held:
        print(f"job {job_id} already holds unique key {safe(a.unique_key)}; nothing enqueued")
    else:
        print(
            f"enqueued job {job_id} ({safe(a.kind)}) on queue {safe(a.queue)}"
            f"{_when(a.delay, a.run_at)}"
        )
    return MasterExit.OK


def unknown_kind(ctx: Context, kind: str) -> str:
    """The refusal of a kind no handler serves, with the closest configured one (the same
    suggestion `check` makes for a schedule's kind)."""
    kinds = sorted(ctx.config.handlers)
    close = difflib.get_close_matches(kind, kinds, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    served = f" (kinds: {', '.join(safe(k) for k in kinds)})" if kinds and not close else ""
    return (
        f"no handler for kind '{safe(kind)}' in {ctx.config.path}{served}; {hint}"
        "nothing enqueued (--any-kind enqueues it for a supervisor with another config)"
    )


def _enqueue_warnings(ctx: Context, kind: str, queue: str) -> list[str]:
    warnings = []
    if kind not in ctx.config.handlers:
        warnings.append(
            f"no handler for kind {safe(kind)!r} in {ctx.config.path}; enqueued anyway (--any-kind)"
        )
    if not any(queue in pool.queues for pool in ctx.config.pools.values()):
        warnings.append(
            f"no pool in {ctx.config.path} claims from queue {safe(queue)!r}; "
            "the job waits until one does"
        )
    return warnings


def _inserted_here(conn: psycopg.Connection[Any], job_id: int) -> bool:
    row = conn.execute(query("job_inserted_here"), {"id": job_id}).fetchone()
    return bool(row and row[0])


def _when(delay: float | None, run_at: datetime | None) -> str:
    if delay:
        return f", due in {age(delay)}"
    if run_at is not None:
        return f", due at {clock_time(run_at)}"
    return ""


def parse_json_object(text: str | None) -> dict[str, Any]:
    """ARGS_JSON as a dict, or a UsageError that names the problem and where it is."""
    if text is None:
        return {}
    try:
        value = json.loads(text, object_pairs_hook=_unique_pairs, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"ARGS_JSON is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno} "
            f"(character {exc.pos}){_pointer(text, exc.pos)}"
        ) from None
    except ValueError as exc:
        raise UsageError(f"ARGS_JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(
            f"ARGS_JSON must be a JSON object of keyword arguments, such as "
            f"'{{\"invoice_id\": 42}}', not {_json_type(value)}"
        )
    return value


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys silently; in a hand-typed job that is a typo.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice in one object")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (PostgreSQL's jsonb cannot store it)")


def _pointer(text: str, position: int) -> str:
    """The offending line with a caret under the position, when it can be shown faithfully."""
    if "\n" in text or len(text) > 200 or not text.isprintable():
        return ""
    return f"\n  {text}\n  {' ' * width(text[:position])}^"


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    return "a number"


verb(
    "dlq",
    "the dead-letter queue: list, show, replay or purge discarded jobs; exit 0, 1 when a job "
    "named is missing or left as it was (or on a database error), 2 on bad usage",
    dlq_arguments,
)(dlq_verb)
