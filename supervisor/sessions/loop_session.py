"""The master's sessions wait on the network for a moment at most.

A host whose link to the database is cut (a partition, a firewall dropping state) answers
nothing: a statement sent then waits until the kernel gives up on the unacknowledged data
(``tcp_user_timeout``, 15 s), and a connect waits for its whole timeout. The master's loop,
which also answers /livez, reaps children and handles signals, cannot wait that long. So:

- ``LoopConnection``: every wait of a statement ends by a deadline (``LOOP_WAIT`` by default,
  the whole of ``MasterDatabase.run`` for one piece of work). Past it the connection is closed
  and ``NoAnswer`` raised: the service counts the database as unreachable and tries again
  later. A statement cut off mid-flight was either never applied, applied whole (autocommit,
  or its COMMIT got there) or rolled back with its transaction when the server sees the
  session end; every service's work is safe to repeat, so "not done" is the one assumption.
- ``Connecting``: a connect driven a step at a time (libpq's non-blocking connect), each step
  taking a moment at most; between steps the loop turns. Each host of a multi-host DSN is one
  attempt with a timeout of its own, as libpq's blocking connect does. Host names are still
  resolved by libpq, blocking: a DSN naming a host whose DNS is out of reach waits for the
  resolver (an address, or a local resolver, avoids it).

No thread (the master forks) and no statement of the master's that takes long (VACUUM, the
queue figures) goes through here: those are sent without waiting (supervisor.sessions.pending).
"""

from __future__ import annotations

import random
import selectors
import time
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from supervisor.queue.dsn import DatabaseError, connection_error, connection_options

RV = TypeVar("RV")

# How long the loop waits for the database's answer to one piece of work (all its statements).
# The master's statements take milliseconds; the server cuts one short well before this
# (STATEMENT_TIMEOUT in supervisor.sessions.database), so only a database that does not answer
# at all (the network is gone, the server froze) reaches it. /livez answers within about this.
LOOP_WAIT = 1.5


class NoAnswer(psycopg.OperationalError):
    """The database did not answer within the loop's wait; the connection was closed."""


class LoopConnection(psycopg.Connection[Any]):
    """A connection whose waits end by ``deadline`` (or LOOP_WAIT from each wait's start)."""

    deadline: float | None = None

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None:  # psycopg's own bounded waits (notifies(timeout=...))
            return super().wait(gen, interval, timeout)
        deadline = self.deadline if self.deadline is not None else time.monotonic() + LOOP_WAIT
        fileno = self.pgconn.socket
        try:
            state = next(gen)
            with selectors.DefaultSelector() as selector:
                selector.register(fileno, state)
                while (left := deadline - time.monotonic()) > 0:
                    ready = selector.select(left)
                    if not ready:
                        continue
                    new = gen.send(ready[0][1])
                    if new != state:
                        selector.modify(fileno, new)
                        state = new
        except StopIteration as done:
            return done.value
        gen.close()
        # Closed before raising: psycopg's transaction exit then rolls nothing back over a
        # connection that would not answer either, and the session is not used again.
        self.close()
        raise NoAnswer("no answer from the database within the master's wait; session closed")


_POLL_WAITS = {
    pq.PollingStatus.READING: selectors.EVENT_READ,
    pq.PollingStatus.WRITING: selectors.EVENT_WRITE,
}


class Connecting:
    """One connect under way, advanced by ``step`` without waiting longer than asked."""

    def __init__(
        self, dsn: str, *, application_name: str, connect_timeout: float, pooled: bool
    ) -> None:
        self.dsn = dsn
        self.pooled = pooled
        self.timeout = max(1.0, connect_timeout)
        self.attempts = attempts(dsn, application_name, connect_timeout)
        self.failures: list[str] = []
        self.pgconn: pq.abc.PGconn | None = None
        self.waiting_for = 0  # selector events the last poll asked for; 0 before the first
        self.deadline = 0.0
        self._next_attempt()

    def step(self, budget: float) -> LoopConnection | None:
        """Advance for ``budget`` seconds at most: the connection once made, None while under
        way. Raises DatabaseError (naming the server, never the password) when it failed."""
        end = time.monotonic() + budget
        while True:
            pgconn = self.pgconn
            assert pgconn is not None
            if time.monotonic() >= self.deadline:
                self._failed("timeout expired")
                continue
            if self.waiting_for and not _ready(pgconn.socket, self.waiting_for, end):
                return None
            status = pgconn.connect_poll()
            if status == pq.PollingStatus.OK:
                return self._made(pgconn)
            if status in _POLL_WAITS:
                self.waiting_for = _POLL_WAITS[status]
                continue
            self._failed(pgconn.get_error_message().strip() or "connection failed")

    def fileno(self) -> int | None:
        try:
            return self.pgconn.socket if self.pgconn is not None else None
        except psycopg.Error:  # no socket yet
            return None

    def close(self) -> None:
        if self.pgconn is not None:
            self.pgconn.finish()
            self.pgconn = None

    def _next_attempt(self) -> None:
        if not self.attempts:
            detail = "; ".join(self.failures) or "no host to connect to"
            raise connection_error(self.dsn, psycopg.OperationalError(detail))
        self.pgconn = pq.PGconn.connect_start(self.attempts.pop(0).encode())
        self.waiting_for = 0
        self.deadline = time.monotonic() + self.timeout
        if self.pgconn.status == pq.ConnStatus.BAD:
            self._failed(self.pgconn.get_error_message().strip() or "connection failed")

    def _failed(self, why: str) -> None:
        self.failures.append(why)
        self.close()
        self._next_attempt()

    def _made(self, pgconn: pq.abc.PGconn) -> LoopConnection:
        self.pgconn = None
        pgconn.nonblocking = 1
        conn = LoopConnection(pgconn)
        conn.autocommit = True  # no statement: an idle session's flag
        if self.pooled:  # see supervisor.queue.dsn.connect
            conn.prepare_threshold = None
        return conn


def _ready(fileno: int, events: int, end: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(fileno, events)
        return bool(selector.select(max(0.0, end - time.monotonic())))


def attempts(dsn: str, application_name: str, connect_timeout: float) -> list[str]:
    """The connection strings to try in turn: one per host of a multi-host DSN (libpq's
    non-blocking connect knows no timeout, so it would never leave a silent first host)."""
    try:
        params: dict[str, Any] = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(f"bad database DSN: {exc}") from None
    params.update(connection_options(dsn, connect_timeout))
    params["application_name"] = application_name
    hosts = str(params.get("host") or "").split(",")
    addrs = str(params.get("hostaddr") or "").split(",")
    count = max(len(hosts), len(addrs))
    if count == 1 or params.get("target_session_attrs") == "prefer-standby":
        return [make_conninfo("", **params)]  # prefer-standby needs libpq to see every host
    ports = str(params.get("port") or "").split(",")
    tries = []
    for i in range(count):
        one = {**params}
        for key, values in (("host", hosts), ("hostaddr", addrs), ("port", ports)):
            value = values[i] if len(values) == count else values[0]
            if value:
                one[key] = value
            else:
                one.pop(key, None)
        tries.append(make_conninfo("", **one))
    if params.get("load_balance_hosts") == "random":
        random.shuffle(tries)
    return tries
