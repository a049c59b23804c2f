"""What the operator verbs share: a database session with readable errors, the server's clock,
and argument types that turn bad values into usage errors (exit 2) before anything connects."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import IsolationLevel

from supervisor.config.units import UnitError, parse_duration
from supervisor.queue.dsn import DatabaseError, connect, describe, scrub
from supervisor.queue.queries import query

if TYPE_CHECKING:
    from supervisor.cli.verbs import Context


@contextlib.contextmanager
def session(
    ctx: Context, *, autocommit: bool = False, snapshot: bool = False
) -> Iterator[psycopg.Connection[Any]]:
    """A connection for one operator command. ``snapshot`` makes it read-only REPEATABLE READ,
    so every query of the command sees the same moment. Database errors become DatabaseError
    (exit 1) with a message for people, never a traceback or a password."""
    dsn = ctx.dsn()
    conn = connect(
        dsn,
        autocommit=autocommit,
        application_name=f"pgq-supervisor {ctx.args.verb}",
        connect_timeout=ctx.config.database.connect_timeout,
        pooled=ctx.config.database.pooled,
    )
    try:
        if snapshot:
            conn.read_only = True
            conn.isolation_level = IsolationLevel.REPEATABLE_READ
        yield conn
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        raise DatabaseError(
            f"{describe(dsn)} has no pgq schema (or an old one): run "
            f"`pgq-supervisor -c {ctx.config.path} migrate` first"
        ) from None
    except psycopg.Error as exc:
        detail = scrub(str(exc).strip(), dsn).replace("\n", " ")
        raise DatabaseError(f"{describe(dsn)}: {detail}") from None
    finally:
        conn.close()


@cache
def cli_query(name: str) -> str:
    """A named query of the command line's own (cli_*, in sql/history.sql and sql/control.sql)."""
    return query(name)


def duration_arg(text: str) -> float:
    """An argparse type: ``30s``, ``1h30m``, ``2d`` or a number of seconds."""
    try:
        return parse_duration(text, "")
    except UnitError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def timestamp_arg(text: str) -> datetime:
    """An argparse type: an ISO 8601 time with a UTC offset (``2024-05-01T03:00:00Z``)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be an ISO 8601 time such as 2024-05-01T03:00:00Z, got {text!r}"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no UTC offset, so it is ambiguous; add Z (UTC) or one like +02:00"
        )
    return moment


def listing_arguments(parser: argparse.ArgumentParser) -> None:
    """What every listing verb takes after its filters: --limit and --json."""
    parser.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="at most this many (50)"
    )
    json_argument(parser)


def json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document, for scripts")


def queue_in_use(conn: psycopg.Connection[Any], queue: str) -> bool:
    """Whether a job waits in ``queue`` or it is paused: a name in use, even if no pool of this
    config serves it (another deploy's queue), not a typo."""
    row = conn.execute(query("queue_in_use"), {"queue": queue}).fetchone()
    return bool(row and row[0])
