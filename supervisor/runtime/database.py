"""The master's own database session: one connection, reconnected behind the loop's back.

The master must never die because the database did. Every use goes through ``run``, which
returns None instead of raising when the database is unreachable or a statement fails; the
caller treats None as "did not happen, try again later". Reconnects back off so a dead database
costs the loop one connect attempt every few seconds, not one per tick.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from supervisor.queue.dsn import DatabaseError, connect, describe

log = logging.getLogger("pgq.master")

T = TypeVar("T")
RETRY_FIRST = 0.5
RETRY_CAP = 10.0


class MasterDatabase:
    def __init__(
        self,
        dsn: str,
        *,
        name: str,
        connect_timeout: float,
        pooled: bool = False,
        on_connect: Callable[[psycopg.Connection[Any]], None] | None = None,
    ) -> None:
        self.dsn = dsn
        self.on_connect = on_connect
        self.name = name
        self.connect_timeout = connect_timeout
        self.pooled = pooled
        self.conn: psycopg.Connection[Any] | None = None
        self.next_attempt = 0.0
        self.delay = RETRY_FIRST
        self.reachable = False
        self.down_since: float | None = None

    def fileno(self) -> int | None:
        return self.conn.fileno() if self.conn is not None else None

    def connection(self) -> psycopg.Connection[Any] | None:
        if self.conn is not None and not self.conn.closed:
            return self.conn
        if time.monotonic() < self.next_attempt:
            return None
        try:
            self.conn = connect(
                self.dsn,
                application_name=f"pgq-supervisor {self.name}",
                connect_timeout=self.connect_timeout,
                pooled=self.pooled,
            )
            if self.on_connect is not None:
                self.on_connect(self.conn)
        except (DatabaseError, psycopg.Error) as exc:
            self.close()
            self._down(str(exc))
            return None
        if self.down_since is not None:
            log.info(
                "database %s reachable again after %.0fs",
                describe(self.dsn),
                time.monotonic() - self.down_since,
            )
        self.down_since = None
        self.delay = RETRY_FIRST
        self.reachable = True
        return self.conn

    def _down(self, why: str) -> None:
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning("database unreachable (%s): %s; retrying in the background", self.name, why)
        self.reachable = False
        self.next_attempt = time.monotonic() + self.delay
        self.delay = min(self.delay * 2, RETRY_CAP)

    def run(self, what: str, fn: Callable[[psycopg.Connection[Any]], T]) -> T | None:
        conn = self.connection()
        if conn is None:
            return None
        try:
            result = fn(conn)
        except psycopg.OperationalError as exc:
            self.close()
            self._down(f"{what}: {exc}".strip())
            return None
        except psycopg.Error as exc:
            log.error("%s failed: %s", what, exc)
            with contextlib.suppress(psycopg.Error):
                if not conn.autocommit:
                    conn.rollback()
            return None
        self.reachable = True
        return result

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None
