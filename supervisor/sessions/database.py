"""The master's own database session: one connection, reconnected behind the loop's back.

The master must never die because the database did, nor wait on it for long. Every use goes
through ``run``, which returns None instead of raising when the database is unreachable or a
statement fails; the caller treats None as "did not happen, try again later". Reconnects back
off so a dead database costs the loop one connect attempt every few seconds, not one per tick.

Every session gets a statement and lock timeout: the master's statements take milliseconds, and
one that waits longer (a lock held by someone else, a server in trouble) is cut short by the
server instead of holding up lease renewal, reaping and signals. A session the server made
read-only (a failover demoted it) or ended is dropped and reopened, like a broken one.

A database that does not answer at all (the network to it is cut) is the loop's other risk:
every wait of ``run`` ends by LOOP_WAIT, and a connect is driven a step at a time across turns
(supervisor.sessions.loop_session), so no turn waits on the network for more than a moment and
/livez answers throughout. An abandoned transaction is ended by the server (the session's
``idle_in_transaction_session_timeout``) rather than holding its locks until the dead
connection is noticed.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from supervisor.queue.dsn import DatabaseError, describe, session_lost
from supervisor.queue.queries import query
from supervisor.sessions.loop_session import LOOP_WAIT, Connecting, LoopConnection

log = logging.getLogger("pgq.master")

T = TypeVar("T")
RETRY_FIRST = 0.5
RETRY_CAP = 10.0
# Backstops, far above what the master's statements take (milliseconds): a statement past them
# is cancelled by the server and retried by its service at its next turn. Below LOOP_WAIT, so a
# slow statement is cut short by the server (the session lives on) before the loop gives up on
# an answer (and closes the session).
STATEMENT_TIMEOUT = "1s"
LOCK_TIMEOUT = "500ms"
# A transaction of the master's is never idle for more than a moment; one the loop abandoned
# (no answer in time) is ended by the server after this, releasing its locks.
IDLE_IN_TRANSACTION_TIMEOUT = "5s"
# How long one call of ``connection`` may advance a connect under way: a LAN connect takes a
# few milliseconds and is done in one call; a far one takes a call per round trip, and the
# master's loop makes one every turn while it is under way (supervisor.master.loop).
CONNECT_STEP = 0.02


class MasterDatabase:
    def __init__(
        self,
        dsn: str,
        *,
        name: str,
        connect_timeout: float,
        pooled: bool = False,
        on_connect: Callable[[psycopg.Connection[Any]], None] | None = None,
        timeouts: tuple[str, str] | None = (STATEMENT_TIMEOUT, LOCK_TIMEOUT),
        quiet: bool = False,
    ) -> None:
        """``timeouts``: the session's statement and lock timeouts (None: the server's, for a
        session whose one statement may run long, sent without waiting). ``quiet``: outages
        are logged at debug level (a side session: the master's own reports them)."""
        self.dsn = dsn
        self.on_connect = on_connect
        self.timeouts = timeouts
        self.quiet = quiet
        self.name = name
        # Nothing waits for it: the configured timeout applies, not libpq's shortest.
        self.connect_timeout = connect_timeout
        self.pooled = pooled
        self.conn: LoopConnection | None = None
        self.connecting: Connecting | None = None
        self.next_attempt = 0.0
        self.delay = RETRY_FIRST
        self.reachable = False
        self.down_since: float | None = None

    def backend_pid(self) -> int | None:
        """The server process of this session (NOTIFYs it sent carry it)."""
        return (
            self.conn.info.backend_pid if self.conn is not None and not self.conn.closed else None
        )

    def fileno(self) -> int | None:
        """The session's socket, or that of the connect under way (a new child must close
        either: the master's end of a connection must close when the master closes it)."""
        if self.conn is not None and not self.conn.closed:
            return self.conn.fileno()
        return self.connecting.fileno() if self.connecting is not None else None

    @property
    def connect_under_way(self) -> bool:
        return self.connecting is not None

    @property
    def in_outage(self) -> bool:
        """The last connect or statement found the database gone, and none has worked since."""
        return self.down_since is not None

    def connection(self) -> LoopConnection | None:
        """The session, or None: the database is unreachable, or a connect is under way (it
        advances a moment per call)."""
        if self.conn is not None and not self.conn.closed:
            return self.conn
        try:
            conn = self._connect_step()
            if conn is None:
                return None
            self.conn = conn
            conn.deadline = time.monotonic() + LOOP_WAIT
            if self.timeouts is not None:
                bound_session(conn, *self.timeouts, pooled=self.pooled)
            if self.on_connect is not None:
                self.on_connect(conn)
            conn.deadline = None
        except (DatabaseError, psycopg.Error) as exc:
            self.close()
            self._down(str(exc).strip())
            return None
        if self.down_since is not None:
            log.log(
                logging.DEBUG if self.quiet else logging.INFO,
                "database %s reachable again after %.0fs",
                describe(self.dsn),
                time.monotonic() - self.down_since,
            )
        self.down_since = None
        self.delay = RETRY_FIRST
        self.reachable = True
        return self.conn

    def _connect_step(self) -> LoopConnection | None:
        if self.connecting is None:
            if time.monotonic() < self.next_attempt:
                return None
            self.connecting = Connecting(
                self.dsn,
                application_name=f"pgq-supervisor {self.name}",
                connect_timeout=self.connect_timeout,
                pooled=self.pooled,
            )
        conn = self.connecting.step(CONNECT_STEP)
        if conn is not None:
            self.connecting = None
        return conn

    def _down(self, why: str) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.log(
                logging.DEBUG if self.quiet else logging.WARNING,
                "database unreachable (%s): %s; retrying in the background",
                self.name,
                why,
            )
        self.reachable = False
        self.next_attempt = time.monotonic() + self.delay
        self.delay = min(self.delay * 2, RETRY_CAP)

    def run(self, what: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T | None:
        conn = self.connection()
        if conn is None:
            return None
        # One deadline for the whole piece of work, however many statements it takes.
        conn.deadline = time.monotonic() + LOOP_WAIT
        try:
            result = fn(conn)
        except psycopg.Error as exc:
            if not session_lost(exc):
                self._failed(conn, what, exc)
                return None
            self.close()
            self._down(f"{what}: {exc}".strip())
            return None
        finally:
            conn.deadline = None
        self.reachable = True
        return result

    def _failed(self, conn: psycopg.Connection[Any], what: str, exc: psycopg.Error) -> None:
        """A statement failed on a session that is still good: say so, and leave the session
        clean for the next one. A lock timeout is no fault of the statement: the rows were
        held past LOCK_TIMEOUT, as by a primary cut off from its synchronous standby (each of
        its commits keeps its locks until the standby answers, which it cannot): a warning,
        and the work is tried again on its next turn."""
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            log.warning(
                "%s waited past the lock timeout (%s) for rows another session holds (a long "
                "transaction, or commits waiting for a synchronous standby); trying again on "
                "its next turn",
                what,
                self.timeouts[1] if self.timeouts else "the server's",
            )
        else:
            log.error("%s failed: %s", what, str(exc).strip())
        with contextlib.suppress(psycopg.Error):
            if not conn.autocommit:
                conn.rollback()

    def close(self) -> None:
        if self.connecting is not None:
            self.connecting.close()
            self.connecting = None
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None


def bound_session(
    conn: psycopg.Connection[Any], statement_timeout: str, lock_timeout: str, *, pooled: bool
) -> None:
    """Give a session of the master's its time limits, so no statement can hold the loop.

    Not behind a transaction pooler: a session setting would stay on the server connection the
    pooler hands to its next client, whoever that is. There, set them on the role instead
    (``ALTER ROLE ... SET statement_timeout``), as the README says."""
    if not pooled:
        conn.execute(
            query("loop_session_timeouts"),
            {
                "statement_timeout": statement_timeout,
                "lock_timeout": lock_timeout,
                "idle_timeout": IDLE_IN_TRANSACTION_TIMEOUT,
            },
        )
