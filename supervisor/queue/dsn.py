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


def scrub(text: str, dsn: str | None = None) -> str:
    """Remove any password from text: URI and key=value forms, and the DSN's own password."""
    text = _URI_PASSWORD.sub(r"\g<scheme>:***@", text)
    text = _KV_PASSWORD.sub(r"\g<key>***", text)
    secret = _password(dsn) if dsn else None
    if secret:
        text = text.replace(secret, "***")
    return text


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
            connect_timeout=max(1, round(connect_timeout)),
            **kwargs,
        )
    except psycopg.OperationalError as exc:
        raise connection_error(dsn, exc) from None


def connection_error(dsn: str, exc: BaseException) -> DatabaseError:
    sqlstate = getattr(exc, "sqlstate", None)
    detail = scrub(str(exc).strip(), dsn).replace("\n", " ")
    permanent = sqlstate in _PERMANENT_SQLSTATES or "password authentication failed" in detail
    return DatabaseError(f"cannot connect to {describe(dsn)}: {detail}", permanent=permanent)
