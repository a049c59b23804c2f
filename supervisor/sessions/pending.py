"""Statements the master sends without waiting for their results.

The master's loop may not wait on the database for more than a moment, but some statements
take seconds (VACUUM, counting the rows of a big queue table). Those go on a connection of
their own: the statement is sent, the connection's socket joins the master's selector, and the
result is read when it arrives. Whatever owns such a connection is ``Readable``: the loop calls
``on_readable`` when its socket is, and a new child closes its ``fileno`` at once.
"""

from __future__ import annotations

import contextlib
import select
from typing import Any

import psycopg
from psycopg import pq


class Readable:
    """A part of the master that owns a socket of its own in the master's selector."""

    def fileno(self) -> int | None:
        raise NotImplementedError

    def on_readable(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """On the master's way out: stop what is in flight and close the connection."""
        raise NotImplementedError


class PendingStatement:
    """One statement sent on a connection without waiting for its result.

    Making one sends the statement and returns at once; whenever the connection's socket is
    readable, ``poll`` takes in what arrived and returns True once the statement has finished
    (``error`` then says whether it failed). Nothing here waits for the server.
    """

    def __init__(self, conn: psycopg.Connection[Any], statement: str) -> None:
        self.conn = conn
        self.error: str | None = None
        # The rows of the last result that returned any, as text (None for NULL).
        self.rows: list[tuple[str | None, ...]] = []
        self.warnings: list[str] = []
        conn.add_notice_handler(self._notice)
        conn.pgconn.send_query(statement.encode())
        while conn.pgconn.flush():  # a few bytes: a full socket buffer would be a surprise
            select.select([], [conn.pgconn.socket], [], 1.0)

    def _notice(self, diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.severity in ("WARNING", "ERROR") and diagnostic.message_primary:
            self.warnings.append(diagnostic.message_primary)

    def fileno(self) -> int:
        return self.conn.pgconn.socket

    def poll(self) -> bool:
        finished = self._poll()
        if finished:  # the connection may live on and carry other statements
            with contextlib.suppress(ValueError):
                self.conn.remove_notice_handler(self._notice)
        return finished

    def _poll(self) -> bool:
        pgconn = self.conn.pgconn
        try:
            pgconn.consume_input()
        except psycopg.OperationalError as exc:
            self.error = str(exc).strip() or "the connection was lost"
            return True
        while not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                return True
            if result.status == pq.ExecStatus.TUPLES_OK:
                self.rows = [_row(result, r) for r in range(result.ntuples)]
            elif result.status == pq.ExecStatus.FATAL_ERROR:
                message = result.error_message
                self.error = (message.decode(errors="replace") if message else "").strip()
        return False


def _row(result: pq.abc.PGresult, row: int) -> tuple[str | None, ...]:
    values = (result.get_value(row, col) for col in range(result.nfields))
    return tuple(v.decode() if v is not None else None for v in values)
