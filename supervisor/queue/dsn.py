"""Connection strings: opening connections with clear errors, and never showing a password.

A DSN can carry a password in URI form (postgresql://user:secret@host/db) or in key=value form
(password=secret). Anything that prints or logs a DSN goes through ``describe``; any error text
that might quote one goes through ``scrub``.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import conninfo

DEFAULT_CONNECT_TIMEOUT = 5

# TCP settings every connection of ours gets, unless its DSN sets them itself. Without them a
# connection whose server vanished (a host failure, a failover that moved the address, a
# firewall dropping state) stays half-open: an idle session notices after the kernel's two-hour
# keepalive default, and a query in flight waits for retransmissions to give up (about 15
# minutes). With them, an idle session notices after 10 + 3 x 5 = 25 s and a session waiting on
# unacknowledged data after 15 s. libpq ignores them on a Unix socket.
TCP_OPTIONS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,  # milliseconds
}

_URI_PASSWORD = re.compile(r"(?P<scheme>postgres(?:ql)?://[^:/@\s]*):[^@\s]*@")
_KV_PASSWORD = re.compile(r"(?P<key>password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


class DatabaseError(RuntimeError):
    """The database could not be reached or refused us; the message never holds the password."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def _password(dsn: str) -> str | None:
    try:
        return conninfo.conninfo_to_dict(dsn).get("password") or None
    except psycopg.ProgrammingError:
        return None


# The DSN's own password is also removed wherever it stands alone in the text, but only if it
# looks like a secret: 8 characters or more, not letters alone. A short password or an ordinary
# word ("postgres") would otherwise be starred out of every log line that happens to hold those
# letters, garbling the log; such passwords are still removed from every DSN the text quotes.
_SECRET_MIN_LENGTH = 8


def scrub(text: str, dsn: str | None = None) -> str:
    """Remove any password from text: URI and key=value forms, and the DSN's own password."""
    text = _URI_PASSWORD.sub(r"\g<scheme>:***@", text)
    text = _KV_PASSWORD.sub(r"\g<key>***", text)
    secret = _password(dsn) if dsn else None
    if secret and len(secret) >= _SECRET_MIN_LENGTH and not secret.isalpha():
        # Standing alone: not the middle of a longer run of letters and digits.
        alone = re.compile(rf"(?<![0-9A-Za-z]){re.escape(secret)}(?![0-9A-Za-z])")
        text = alone.sub("***", text)
    return text


# user:secret@ at the start of a DSN written without its scheme (libpq cannot parse it, but the
# error quoting it must not show the secret either).
_BARE_PASSWORD = re.compile(r"^(?P<user>[^:/@\s]*):[^@\s]*@")


def masked(dsn: str) -> str:
    """The DSN as written, with any password starred: for an error that must quote it."""
    return _BARE_PASSWORD.sub(r"\g<user>:***@", scrub(dsn))


def parse_problem(dsn: str) -> str | None:
    """Why libpq cannot parse this DSN (quoting it with the password masked), or None."""
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        reason = str(exc).strip().replace(dsn, masked(dsn))
        hint = ""
        if "://" not in dsn and "=" not in dsn:
            hint = "; write it as postgresql://USER@HOST:PORT/DBNAME or host=HOST dbname=DBNAME"
        return f"libpq cannot parse the connection string {masked(dsn)!r} ({scrub(reason)}){hint}"
    return None


def describe(dsn: str) -> str:
    """user@host:port/dbname, for logs and errors; never the password."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    host = params.get("host") or "localhost"
    if host.startswith("/"):
        host = f"socket {host}"
    port = params.get("port") or "5432"
    user = params.get("user") or "<default user>"
    dbname = params.get("dbname") or user
    return f"{user}@{host}:{port}/{dbname}"


# SQLSTATE classes that waiting will not fix: bad password, no such role or database.
_PERMANENT_SQLSTATES = {"28P01", "28000", "3D000", "42501"}


def connection_options(dsn: str, connect_timeout: float) -> dict[str, Any]:
    """The libpq options every connection of ours is opened with: the TCP settings above and a
    bounded connect. What the DSN sets itself wins: an operator's own keepalive tuning is kept.
    The one place these are decided, for the master, the children and the verbs alike."""
    try:
        given = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        given = {}  # psycopg.connect reports the bad DSN itself
    options: dict[str, Any] = {k: v for k, v in TCP_OPTIONS.items() if k not in given}
    options["connect_timeout"] = max(1, round(connect_timeout))
    return options


def connect(
    dsn: str,
    *,
    autocommit: bool = True,
    application_name: str = "pgq-supervisor",
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    pooled: bool = False,
    **kwargs: Any,
) -> psycopg.Connection[Any]:
    """Open a connection; a failure becomes a DatabaseError naming the server, not the secret.

    ``pooled``: the DSN reaches PostgreSQL through a transaction-mode pooler, where each
    transaction may run on a different server session; a statement psycopg prepared on one
    would be missing on the next, so nothing is prepared server-side.
    """
    if pooled:
        kwargs["prepare_threshold"] = None
    try:
        return psycopg.connect(
            dsn,
            autocommit=autocommit,
            application_name=application_name,
            **{**connection_options(dsn, connect_timeout), **kwargs},
        )
    except psycopg.OperationalError as exc:
        raise connection_error(dsn, exc) from None


def connection_error(dsn: str, exc: BaseException) -> DatabaseError:
    sqlstate = getattr(exc, "sqlstate", None)
    detail = scrub(str(exc).strip(), dsn).replace("\n", " ")
    permanent = sqlstate in _PERMANENT_SQLSTATES or "password authentication failed" in detail
    return DatabaseError(f"cannot connect to {describe(dsn)}: {detail}", permanent=permanent)


# OperationalErrors that leave the session usable: the statement was cut short by our own
# timeouts (statement_timeout, lock_timeout) or lost a deadlock or serialization race.
_SESSION_SURVIVES = {"57014", "55P03", "40001", "40P01"}


# What a child catches to drop its session and reconnect: a broken connection, and a server
# that turned read-only under it (a failover demoted it; a new session, through a multi-host
# DSN with target_session_attrs=read-write, reaches the new primary).
RECONNECT_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.OperationalError,
    psycopg.errors.ReadOnlySqlTransaction,
)

# A statement the session's own lock or statement timeout cut short: OperationalErrors, but the
# session is fine and nothing needs a reconnect (catch these before RECONNECT_ERRORS).
STATEMENT_CUT: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.LockNotAvailable,
    psycopg.errors.QueryCanceled,
)


def session_lost(exc: BaseException) -> bool:
    """Whether a session that raised ``exc`` must be dropped and reopened rather than reused.

    True when the connection broke or the server ended the session (class 08, 57P0x), and when
    the server is read-only (class 25, SQLSTATE 25006): after a failover demoted it, every
    write on this session would fail the same way, while a fresh connection, through a
    multi-host DSN with ``target_session_attrs=read-write``, reaches the new primary.
    """
    sqlstate = getattr(exc, "sqlstate", None) or ""
    if sqlstate.startswith("25"):
        return True
    return isinstance(exc, psycopg.OperationalError) and sqlstate not in _SESSION_SURVIVES
