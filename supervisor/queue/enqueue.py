"""Putting jobs in the queue, through the caller's connection and inside the caller's transaction.

The job row joins whatever transaction the caller is in, so it exists if and only if the
caller commits: no job for a rolled-back order, no order without its job. Every argument is
checked before anything is sent, so a bad enqueue raises without writing.

The sync and async functions share everything but the I/O: validation, statements and the
handling of what comes back live in generators that yield each statement to run (a ``_Step``)
and receive its rows; ``_run`` drives them on a ``psycopg.Connection``, ``_run_async`` on a
``psycopg.AsyncConnection``.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
import sys
import unicodedata
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

import psycopg
from psycopg.rows import tuple_row

from supervisor.queue import keyring, ordered
from supervisor.queue import secrets as envelope
from supervisor.queue import tracecontext as tracing
from supervisor.queue.columns import job_columns
from supervisor.queue.keyring import KeysError
from supervisor.queue.queries import positional, query

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 10
# Arguments travel in every claim; a queue is not a blob store. Large payloads belong in a table
# or object store, with their key in the arguments.
MAX_ARGS_BYTES = 256 * 1024
MAX_NAME_LENGTH = 200
PRIORITY_RANGE = (-32768, 32767)  # smallint
MAX_ATTEMPTS_LIMIT = 2**31 - 1  # integer
# A century: far past any real schedule, far short of what the timestamp column can hold
# (a delay of 1e13 s would make the server fail the statement and the caller's transaction).
MAX_DELAY_SECONDS = 100 * 365.25 * 86400
# Unicode categories refused in kinds and queue names: control characters (a newline or an
# escape sequence would forge or garble the log lines that name them), format characters
# (bidirectional overrides make a name read differently than it is), line separators.
_UNPRINTABLE = {"Cc", "Cf", "Zl", "Zp"}
# A NUL in a JSON string: the escape \u0000 preceded by an even number of backslashes (an odd
# number means the backslash itself was escaped, and the text is a literal "\u0000").
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class EnqueueError(ValueError):
    """An enqueue was refused before anything was written; the message names the bad field."""


@dataclass(frozen=True)
class NewJob:
    """A job to enqueue: what enqueue() takes as arguments, as a value for bulk enqueue."""

    kind: str
    args: Mapping[str, Any] = field(default_factory=dict)
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    delay: float | timedelta | None = None
    run_at: datetime | None = None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    unique_key: str | None = None
    # The W3C trace context to continue when the job runs; None: the current span's, if any.
    traceparent: str | None = None
    tenant: str | None = None
    # Seconds: with unique_key, replace the waiting job of that key (see enqueue).
    debounce: float | timedelta | None = None
    # Jobs of one queue sharing an order key start one at a time, in enqueue order (see enqueue).
    order_key: str | None = None


class _Row(NamedTuple):
    """A job checked and ready to send: its fields but the last in the order the ``enqueue``
    statement takes its parameters (``_ENQUEUE_ORDER``), so the one-job path sends the row
    itself as a tuple. A debounced row carries its debounce key as unique_key and its
    debounce as delay (``enqueue_debounced`` takes the same parameters). The last two fields
    are not sent as such: a row with an order key goes through ``enqueue_ordered``."""

    queue: str
    kind: str
    args: str
    priority: int
    max_attempts: int
    unique_key: str | None
    traceparent: str | None
    tenant: str | None
    run_at: datetime | None
    delay: float
    debounced: bool = False
    order_key: str | None = None


# The enqueue statements' parameters in the order they appear in their SQL: _Row's fields but
# `debounced` and `order_key`, then the wake-up switch. queries.positional checks it against
# sql/enqueue.sql.
_SENT = len(_Row._fields) - 2
_ENQUEUE_ORDER = (*_Row._fields[:_SENT], "notify")


def check_name(what: str, value: object, *, printable: bool = True) -> str:
    if not isinstance(value, str):
        raise EnqueueError(f"{what} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise EnqueueError(f"{what} must not be empty")
    if len(value) > MAX_NAME_LENGTH:
        raise EnqueueError(
            f"{what} is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}"
        )
    if "\x00" in value:
        raise EnqueueError(f"{what} contains a NUL character")
    if not _encodable(value):
        raise EnqueueError(f"{what} is not valid Unicode (it holds a lone surrogate)")
    if printable:
        bad = next((c for c in value if unicodedata.category(c) in _UNPRINTABLE), None)
        if bad is not None:
            raise EnqueueError(
                f"{what} {value!r} contains the control or format character U+{ord(bad):04X}; "
                "names appear in logs and must be printable"
            )
    return value


def _encodable(text: str) -> bool:
    """Whether text can travel as UTF-8: a lone surrogate (from a bad decode) cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(number: int) -> str:
    """An out-of-range integer for a message: Python refuses to print one of over 4,300 digits
    (a ValueError instead of the EnqueueError), so a long one is shown as its power of ten."""
    if number.bit_length() <= 64:
        return str(number)
    return f"~{'-' if number < 0 else ''}10**{int(number.bit_length() * math.log10(2))}"


def _int(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise EnqueueError(f"{what} must be an integer, not {type(value).__name__}")
    return value


class _HasSecret(Exception):
    """Raised out of the shared encoder at the first Secret: those args take the sealing path."""


def _no_secret(obj: object) -> object:
    # Called by the C encoder only for values it cannot encode itself, so plain args pay nothing.
    if isinstance(obj, envelope.Secret):
        raise _HasSecret
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


# One encoder for every job: json.dumps with options builds a new one per call.
_JSON = json.JSONEncoder(
    allow_nan=False, separators=(",", ":"), ensure_ascii=False, default=_no_secret
)


# The sealing encoder of each kind, made once per key ring: a new encoder and its sealing
# closure cost about as much as a seal. Bounded like _GOOD_NAMES.
_SEALING: dict[str, tuple[Any, json.JSONEncoder]] = {}


def _sealed_text(kind: str, args: object) -> str:
    """Args holding Secrets, encoded with each Secret sealed under the first key (envelope)."""
    try:
        ring = keyring.active()
        made = _SEALING.get(kind) if type(kind) is str else None
        if made is None or made[0] is not ring:
            encoder = json.JSONEncoder(
                allow_nan=False,
                separators=(",", ":"),
                ensure_ascii=False,
                default=envelope.sealer(kind, ring),
            )
            if len(_SEALING) >= _GOOD_NAMES_LIMIT:
                _SEALING.clear()
            made = _SEALING[kind] = (ring, encoder)
        return made[1].encode(args)
    except KeysError as exc:
        raise EnqueueError(
            str(exc) if str(exc).startswith("job ") else f"job {kind!r}: {exc}"
        ) from None


def encode_args(kind: str, args: object, *, limit: int = MAX_ARGS_BYTES) -> str:
    """The job's arguments as JSON text, or an EnqueueError saying exactly what is wrong."""
    if not isinstance(args, Mapping):
        raise EnqueueError(
            f"job {kind!r}: args must be a JSON object (a dict of keyword arguments), "
            f"not {type(args).__name__}"
        )
    try:
        try:
            text = _JSON.encode(args)
        except _HasSecret:
            text = _sealed_text(kind, args)
    except EnqueueError:
        raise
    except (TypeError, ValueError) as exc:
        raise EnqueueError(f"job {kind!r}: args are not JSON-serialisable: {exc}") from None
    except RecursionError:
        # The C encoder recurses once per level: about a thousand levels exhaust the stack.
        raise EnqueueError(
            f"job {kind!r}: args are nested too deeply to encode (Python's recursion limit is "
            f"{sys.getrecursionlimit()} levels)"
        ) from None
    # The substring test first: the pattern walks every character, about half of a small job's
    # encode (3.6 of 8 us) and more for sealed args, whose base64 is long.
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise EnqueueError(
            f"job {kind!r}: args contain a NUL character (\\u0000), which PostgreSQL's jsonb "
            "cannot store; encode binary data (base64) first"
        )
    try:
        size = len(text.encode("utf-8"))  # encoded once: it checks and measures
    except UnicodeEncodeError:
        raise EnqueueError(
            f"job {kind!r}: args are not valid Unicode (a string holds a lone surrogate, "
            "often from decoding bytes with errors='surrogateescape')"
        ) from None
    if size > limit:
        raise EnqueueError(
            f"job {kind!r}: args are {size} bytes of JSON; the limit is {limit} bytes. "
            "Store large payloads elsewhere and pass their key"
        )
    return text


def _seconds(what: str, value: float | timedelta | None) -> float:
    if value is None:
        return 0.0
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise EnqueueError(f"{what} must be seconds or a timedelta, not {type(value).__name__}")
    try:
        finite = math.isfinite(seconds)
    except OverflowError:  # an int past any float (10**400), too long even to print
        raise EnqueueError(
            f"{what} must be zero to a century ({MAX_DELAY_SECONDS:g}) seconds, "
            f"got {_shown(int(seconds))}"
        ) from None
    if not finite or seconds < 0:
        raise EnqueueError(f"{what} must be zero or more seconds, got {value!r}")
    if seconds > MAX_DELAY_SECONDS:
        raise EnqueueError(
            f"{what} of {seconds:g}s is more than a century ({MAX_DELAY_SECONDS:g}s)"
        )
    return float(seconds)


def _traceparent(kind: str, given: str | None, current: str | None) -> str | None:
    if given is None:
        return current
    if not tracing.valid(given):
        if not isinstance(given, str):
            raise EnqueueError(
                f"job {kind!r}: traceparent must be a string (a W3C trace context), "
                f"not {type(given).__name__}"
            )
        raise EnqueueError(
            f"job {kind!r}: traceparent must be a W3C trace context like "
            f"00-<32 hex digits>-<16 hex digits>-01, got {given[:80]!r}"
        )
    return given


# Kinds and queues already found good: an application enqueues a few names over and over, and
# checking each character of each again cost more than the rest of the validation. Bounded;
# only exact str values are remembered (a str subclass could compare equal and differ).
_GOOD_NAMES: set[str] = set()
_GOOD_NAMES_LIMIT = 4096


def _remember(*names: str) -> None:
    if len(_GOOD_NAMES) >= _GOOD_NAMES_LIMIT:
        _GOOD_NAMES.clear()
    _GOOD_NAMES.update(n for n in names if type(n) is str)


def _validate(job: NewJob, current_trace: str | None = None) -> _Row:
    try:
        return _check(
            job.kind,
            job.args,
            job.queue,
            job.priority,
            job.delay,
            job.run_at,
            job.max_attempts,
            job.unique_key,
            job.traceparent,
            job.tenant,
            current_trace,
            job.debounce,
            job.order_key,
        )
    except AttributeError:
        if isinstance(job, NewJob):
            raise
        raise EnqueueError(
            f"each job must be a NewJob, not {type(job).__name__}: {reprlib.repr(job)}"
        ) from None


def _rows(jobs: Iterable[NewJob], current_trace: str | None) -> list[_Row]:
    """Every job of a bulk enqueue checked, in input order."""
    try:
        return [_validate(job, current_trace) for job in jobs]
    except TypeError:
        try:
            iter(jobs)
        except TypeError:
            raise EnqueueError(
                f"jobs must be an iterable of NewJob (a list), not {type(jobs).__name__}"
            ) from None
        raise  # from inside the iterable (a generator's own error): not ours to rename


def _check(
    kind: str,
    args: object,
    queue: str,
    priority: int,
    delay: float | timedelta | None,
    run_at: datetime | None,
    max_attempts: int,
    unique_key: str | None,
    traceparent: str | None,
    tenant: str | None,
    current_trace: str | None,
    debounce: float | timedelta | None = None,
    order_key: str | None = None,
) -> _Row:
    """Every check of one job, in a fixed order, or the EnqueueError of the first that fails.

    Called once per job on every path, so the usual case is kept short: the messages (each
    a repr of the kind) are only built for a value that fails, the common types are tested
    by identity before the general checks, and the row is a tuple, not a dataclass.
    """
    if not (
        type(kind) is str and kind in _GOOD_NAMES and type(queue) is str and queue in _GOOD_NAMES
    ):
        kind = check_name("kind", kind)
        queue = check_name(f"job {kind!r}: queue", queue)
        _remember(kind, queue)
    if type(priority) is not int:  # bool and int subclasses take the general check
        priority = _int(f"job {kind!r}: priority", priority)
    if not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
        low, high = PRIORITY_RANGE
        raise EnqueueError(f"job {kind!r}: priority {_shown(priority)} is outside {low}..{high}")
    if type(max_attempts) is not int:
        max_attempts = _int(f"job {kind!r}: max_attempts", max_attempts)
    if not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        if max_attempts < 1:
            raise EnqueueError(
                f"job {kind!r}: max_attempts must be at least 1, got {_shown(max_attempts)}"
            )
        raise EnqueueError(
            f"job {kind!r}: max_attempts must be at most {MAX_ATTEMPTS_LIMIT}, "
            f"got {_shown(max_attempts)}"
        )
    if delay is None:
        seconds = 0.0
    else:
        if run_at is not None:
            raise EnqueueError(f"job {kind!r}: give delay or run_at, not both")
        seconds = _seconds(f"job {kind!r}: delay", delay)
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise EnqueueError(
                f"job {kind!r}: run_at must be a datetime, not {type(run_at).__name__}"
            )
        # utcoffset(), not tzinfo: a tzinfo whose utcoffset() is None leaves the datetime naive
        # (psycopg then failed with a bare TypeError).
        if run_at.utcoffset() is None:
            raise EnqueueError(
                f"job {kind!r}: run_at must be timezone-aware; a naive datetime is ambiguous"
            )
    if unique_key is not None:
        # Keys are the application's own identifiers, never logged as names: only NUL and
        # lone surrogates (which cannot be stored) are refused.
        unique_key = check_name(f"job {kind!r}: unique_key", unique_key, printable=False)
    if tenant is not None:
        # Tenants are named in logs, metrics and the dashboard: printable, like queue names.
        tenant = check_name(f"job {kind!r}: tenant", tenant)
    if order_key is not None:
        # An application's identifier (an account, a conversation), like a unique key.
        order_key = check_name(f"job {kind!r}: order_key", order_key, printable=False)
    debounced = debounce is not None
    if debounced:
        seconds = _debounce(kind, debounce, unique_key, delay, run_at)
    text = encode_args(kind, args)
    if traceparent is None:
        traceparent = current_trace
    else:
        traceparent = _traceparent(kind, traceparent, current_trace)
    return _Row(
        queue,
        kind,
        text,
        priority,
        max_attempts,
        unique_key,
        traceparent,
        tenant,
        run_at,
        seconds,
        debounced,
        order_key,
    )


def _debounce(
    kind: str,
    debounce: float | timedelta,
    unique_key: str | None,
    delay: float | timedelta | None,
    run_at: datetime | None,
) -> float:
    """The seconds of a debounce, checked with what it cannot go with."""
    if unique_key is None:
        raise EnqueueError(f"job {kind!r}: debounce needs a unique_key (the key it debounces)")
    if delay is not None or run_at is not None:
        raise EnqueueError(
            f"job {kind!r}: give debounce or {'delay' if delay is not None else 'run_at'}, "
            "not both (a debounced job is due debounce seconds after its last enqueue)"
        )
    return _seconds(f"job {kind!r}: debounce", debounce)


class _Step(NamedTuple):
    """One statement for a driver to run, and how much of its result to send back: a query
    of sql/ by name with named parameters, or (``text``) a statement already positional and
    its parameters as a tuple."""

    name: str
    params: Mapping[str, Any] | tuple[Any, ...]
    fetch: Literal["one", "all", "none"]
    text: str | None = None


# What a step's generator receives back: one row, all rows, or nothing.
_Steps = Generator[_Step, Any, Any]

# Where a connection keeps the cursor its enqueues reuse (see _run). A reused cursor keeps
# psycopg's adapters for the statement it ran last, about a quarter of an enqueue's client CPU
# (scripts/benchmarks/enqueue_cpu_bench.py); a new cursor per statement looked them all up again.
# The sync and async drivers keep theirs apart, so that each makes its first cursor itself, after
# checking the connection's class: a sync Connection given to enqueue_async ran the INSERT and
# only then failed on its await, a job written (committed, in autocommit) behind a TypeError.
_CURSOR = "_pgq_enqueue_cursor"
_ASYNC_CURSOR = "_pgq_enqueue_async_cursor"


def _take_cursor(conn: Any, key: str, wanted: type) -> Any:
    """The connection's enqueue cursor, taken out so that no other thread or task uses it at
    the same time (one that finds it taken makes its own), or a new one. Rows are tuples
    whatever the connection's row_factory."""
    try:
        cursor = conn.__dict__.pop(key, None)
    except AttributeError:  # None, a DSN string: no connection at all, refused below
        cursor = None
    if cursor is None or cursor.closed:
        if not isinstance(conn, wanted):
            raise _wrong_connection(conn, wanted)
        cursor = conn.cursor(row_factory=tuple_row)
    return cursor


def _wrong_connection(conn: object, wanted: type) -> EnqueueError:
    hint = ""
    if wanted is psycopg.Connection and isinstance(conn, psycopg.AsyncConnection):
        hint = "; await enqueue_async or enqueue_many_async with an AsyncConnection"
    elif wanted is psycopg.AsyncConnection and isinstance(conn, psycopg.Connection):
        hint = "; call enqueue or enqueue_many with a Connection"
    return EnqueueError(
        f"conn must be a psycopg.{wanted.__name__}, not {type(conn).__name__}{hint}"
    )


def _give_back(conn: Any, key: str, cursor: Any) -> None:
    # The cursor refers to its connection, so this is a reference cycle: a connection dropped
    # without close() is freed by the garbage collector instead of at once (psycopg warns of
    # such connections anyway). setdefault: a cursor made while this one was out is dropped.
    conn.__dict__.setdefault(key, cursor)


def _run(conn: psycopg.Connection[Any], steps: _Steps) -> Any:
    cursor = _take_cursor(conn, _CURSOR, psycopg.Connection)
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            cursor.execute(step.text or query(step.name), step.params)
            if step.fetch == "one":
                reply = cursor.fetchone()
            elif step.fetch == "all":
                reply = cursor.fetchall()
            else:
                reply = None
    except StopIteration as done:
        _give_back(conn, _CURSOR, cursor)
        return done.value


async def _run_async(conn: psycopg.AsyncConnection[Any], steps: _Steps) -> Any:
    cursor = _take_cursor(conn, _ASYNC_CURSOR, psycopg.AsyncConnection)
    reply: Any = None
    try:
        while True:
            step = steps.send(reply)
            await cursor.execute(step.text or query(step.name), step.params)
            if step.fetch == "one":
                reply = await cursor.fetchone()
            elif step.fetch == "all":
                reply = await cursor.fetchall()
            else:
                reply = None
    except StopIteration as done:
        _give_back(conn, _ASYNC_CURSOR, cursor)
        return done.value


def _check_notify(what: str, notify: object) -> None:
    # Sent as a parameter: 1 or 0 made the server fail the statement (argument of NOT must be
    # type boolean) and so the caller's transaction; "no" was read as false.
    if notify is not True and notify is not False:
        raise EnqueueError(f"{what}: notify must be True or False, not {type(notify).__name__}")


def _ordered_params(row: _Row) -> dict[str, Any]:
    """The parameters of ``enqueue_ordered`` for one row (with an order key)."""
    return {
        "kind": row.kind,
        "args": row.args,
        "queue": row.queue,
        "priority": row.priority,
        "run_at": row.run_at,
        "delay": row.delay,
        "debounced": row.debounced,
        "max_attempts": row.max_attempts,
        "unique_key": row.unique_key,
        "tenant": row.tenant,
        "traceparent": row.traceparent,
        "order_key": row.order_key,
    }


def _enqueue_steps(row: _Row, notify: bool) -> _Steps:
    _check_notify(f"job {row.kind!r}", notify)
    if row.order_key is not None:
        # pgq.enqueue itself (0066): the key's row is taken before the insert, its count tells
        # head from follower, and a job not inserted (a held unique key) is not counted.
        ordered = yield _Step("enqueue_ordered", _ordered_params(row), "one")
        return int(ordered[0])
    if row.debounced:
        # One upsert: it always returns the job (replaced or new), never loops.
        upserted = yield _Step(
            "enqueue_debounced",
            (*row[:_SENT], notify),
            "one",
            positional("enqueue_debounced", _ENQUEUE_ORDER),
        )
        return int(upserted[0])
    inserted = yield _Step(
        "enqueue", (*row[:_SENT], notify), "one", positional("enqueue", _ENQUEUE_ORDER)
    )
    while True:
        if inserted is not None:
            return int(inserted[0])
        existing = yield _Step("job_by_unique_key", {"unique_key": row.unique_key}, "one")
        if existing is not None:
            return int(existing[0])
        # The holder of the key finished between our insert and our look-up: the key is free
        # again, so the insert can now succeed.
        inserted = yield _Step(
            "enqueue", (*row[:_SENT], notify), "one", positional("enqueue", _ENQUEUE_ORDER)
        )


def _one_row(
    kind: str,
    args: Mapping[str, Any] | None,
    queue: str,
    priority: int,
    delay: float | timedelta | None,
    run_at: datetime | None,
    max_attempts: int,
    unique_key: str | None,
    traceparent: str | None,
    tenant: str | None,
    debounce: float | timedelta | None,
    order_key: str | None = None,
) -> _Row:
    """The checked row of ``enqueue``'s (and ``enqueue_async``'s) arguments."""
    return _check(
        kind,
        {} if args is None else args,
        queue,
        priority,
        delay,
        run_at,
        max_attempts,
        unique_key,
        traceparent,
        tenant,
        tracing.current_traceparent() if traceparent is None else None,
        debounce,
        order_key,
    )


def enqueue(
    conn: psycopg.Connection[Any],
    kind: str,
    args: Mapping[str, Any] | None = None,
    *,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    delay: float | timedelta | None = None,
    run_at: datetime | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    unique_key: str | None = None,
    tenant: str | None = None,
    notify: bool = True,
    traceparent: str | None = None,
    debounce: float | timedelta | None = None,
    order_key: str | None = None,
) -> int:
    """Enqueue one job on ``conn`` (inside its current transaction) and return its id.

    Higher ``priority`` runs first within a queue. A job due later (``delay``, ``run_at``) waits
    as 'scheduled' until a supervisor's stager makes it available at its time. With
    ``unique_key``, an enqueue while a job with that key waits or runs returns that job's id and
    writes nothing. The job keeps ``traceparent`` (a W3C trace context), by default the current
    OpenTelemetry span's, so that its attempts continue the enqueuer's trace. Inside a queue,
    claims share fairly among the ``tenant``s with due work (a customer, an endpoint: short
    printable text); jobs without one form one tenant of their own.

    With ``unique_key`` and ``debounce`` (seconds), while the job enqueued with that key has
    not started, the enqueue replaces its arguments, moves it to ``debounce`` seconds from now
    and returns its id; once it has started (or ended), a new job is enqueued, due in
    ``debounce`` seconds. Only debounced enqueues meet a debounced job's key.

    Inside a queue, jobs that share an ``order_key`` (an account, a conversation: up to 200
    characters) start one at a time, fleet-wide, in the order they were enqueued: a later one
    waits (state 'waiting', never claimed, no attempt spent) until the one before it has ended
    (completed, discarded or cancelled); one that is retried or whose outcome is unknown holds
    the ones after it until it ends. Order inside a key wins over priority. A follower holds its
    ``unique_key`` while it waits, as any job does.
    """
    row = _one_row(
        kind,
        args,
        queue,
        priority,
        delay,
        run_at,
        max_attempts,
        unique_key,
        traceparent,
        tenant,
        debounce,
        order_key,
    )
    return int(_run(conn, _enqueue_steps(row, notify)))


async def enqueue_async(
    conn: psycopg.AsyncConnection[Any],
    kind: str,
    args: Mapping[str, Any] | None = None,
    *,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
    delay: float | timedelta | None = None,
    run_at: datetime | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    unique_key: str | None = None,
    tenant: str | None = None,
    notify: bool = True,
    traceparent: str | None = None,
    debounce: float | timedelta | None = None,
    order_key: str | None = None,
) -> int:
    """``enqueue`` for a ``psycopg.AsyncConnection``: same arguments, checks and semantics."""
    row = _one_row(
        kind,
        args,
        queue,
        priority,
        delay,
        run_at,
        max_attempts,
        unique_key,
        traceparent,
        tenant,
        debounce,
        order_key,
    )
    return int(await _run_async(conn, _enqueue_steps(row, notify)))


def _enqueue_many_steps(rows: list[_Row], notify: bool) -> _Steps:
    _check_notify("enqueue_many", notify)
    if any(row.order_key is not None for row in rows):
        paths = ordered.Paths(_Step, _enqueue_steps, _unordered_many_steps)
        return (yield from ordered.with_order_keys(rows, notify, paths))
    return (yield from _unordered_many_steps(rows, notify))


def _unordered_many_steps(rows: list[_Row], notify: bool) -> _Steps:
    if any(row.debounced for row in rows):
        return (yield from _mixed_steps(rows, notify))
    return (yield from _plain_many_steps(rows, notify))


def _mixed_steps(rows: list[_Row], notify: bool) -> _Steps:
    """A bulk enqueue with debounced jobs: the plain ones in one statement as usual, then one
    upsert per debounce key, in key order (two such calls meet their keys in the same order
    rather than deadlock). A key given twice in the batch is debounced once, with its last
    job: the earlier ones would be replaced by it anyway; they all get its id."""
    plain = [row for row in rows if not row.debounced]
    plain_ids = iter((yield from _plain_many_steps(plain, notify)))
    last = {row.unique_key: row for row in rows if row.debounced}
    by_key: dict[str | None, int] = {}
    for key in sorted(last, key=lambda k: str(k).encode("utf-8")):
        by_key[key] = yield from _enqueue_steps(last[key], notify)
    return [by_key[row.unique_key] if row.debounced else next(plain_ids) for row in rows]


def _plain_many_steps(rows: list[_Row], notify: bool) -> _Steps:
    if not rows:
        return []
    if len(rows) == 1:
        # One job: the one-row statement, same row and same answer, at two thirds of the cost
        # of the array statement's unnesting and sorting (scripts/benchmarks/producers_bench.py).
        return [(yield from _enqueue_steps(rows[0], notify))]
    returned = yield _Step(
        "enqueue_many",
        {
            **job_columns(rows),
            "unique_keys": [r.unique_key for r in rows],
            "notify": notify,
        },
        "all",
    )
    # Rows without a unique key always insert and come back in input order; a row with a key
    # gets the id of whichever job holds that key, inserted now or already there.
    plain = iter([int(job_id) for job_id, key, *_ in returned if key is None])
    by_key = {key: int(job_id) for job_id, key, *_ in returned if key is not None}
    missing = sorted({r.unique_key for r in rows if r.unique_key and r.unique_key not in by_key})
    if missing:
        found = yield _Step("jobs_by_unique_keys", {"unique_keys": missing}, "all")
        by_key.update({key: int(job_id) for key, job_id in found})
    ids = []
    for row in rows:
        if row.unique_key is None:
            ids.append(next(plain))
        elif row.unique_key in by_key:
            ids.append(by_key[row.unique_key])
        else:
            raise RuntimeError(
                f"job {row.kind!r}: the job holding unique key {row.unique_key!r} finished during "
                "this enqueue; enqueue it again"
            )
    # The due jobs' queues were woken by the statement itself (when their flags were up); what
    # the database wrote decides which were due, not what was asked.
    # Jobs for later wake the stagers only when one is due before their next look (0036).
    if notify and any(wakes_stagers for _, _, _, wakes_stagers, _ in returned):
        yield _Step("notify_scheduled", {}, "none")
    return ids


def enqueue_many(
    conn: psycopg.Connection[Any], jobs: Iterable[NewJob], *, notify: bool = True
) -> list[int]:
    """Enqueue many jobs in one statement on ``conn``; returns their ids in input order.

    A job whose unique key is already held (or repeated earlier in the batch) gets the id of the
    job holding it. Every job is validated before anything is sent.
    """
    rows = _rows(jobs, tracing.current_traceparent())
    return list(_run(conn, _enqueue_many_steps(rows, notify)))


async def enqueue_many_async(
    conn: psycopg.AsyncConnection[Any], jobs: Iterable[NewJob], *, notify: bool = True
) -> list[int]:
    """``enqueue_many`` for a ``psycopg.AsyncConnection``: same arguments, checks and semantics."""
    rows = _rows(jobs, tracing.current_traceparent())
    return list(await _run_async(conn, _enqueue_many_steps(rows, notify)))
