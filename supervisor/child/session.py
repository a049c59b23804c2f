"""The child's database session: one connection, opened after the fork, reconnected with
capped backoff while the database is away.

Connections never cross a fork: the child opens its own. After a reconnect it gives back claims
that committed as the old connection died (their reply never came, so nobody would run them).
The session belongs to the child's main thread; nothing else uses its connection (handler
threads ask through supervisor.child.questions).
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

from supervisor.child.process import ChildProcess
from supervisor.queue import jobs as jobs_api
from supervisor.queue import maintenance
from supervisor.queue.dsn import DatabaseError, connect
from supervisor.queue.loaders import use_fast_json
from supervisor.queue.queries import query
from supervisor.shared.board import State

log = logging.getLogger("pgq.worker")

T = TypeVar("T")

RECONNECT_MAX_DELAY = 5.0
QUESTION_CONNECT_EVERY = 1.0
# Every statement of the child's session is bounded (sql/leases.sql, child_session_timeouts): a
# wait on a lock at LOCK_TIMEOUT (a claim's carried outcome then waits its turn in the
# completer, the claim is made without it), anything else at STATEMENT_TIMEOUT, far above what a
# claim from the head walks even hours into a held horizon (seconds). Behind a transaction
# pooler, set them on the role instead (a session setting would stay on the server connection).
LOCK_TIMEOUT = "2s"
STATEMENT_TIMEOUT = "60s"


class BootFailure(Exception):
    """The child cannot get ready and waiting will not help (e.g. the password is wrong)."""


class ChildSession:
    def __init__(self, process: ChildProcess, held: Callable[[], list[int]]) -> None:
        self.process = process
        self.spec = process.spec
        self.pool = self.spec.pool.name
        # The jobs this child holds (running, waiting to start, waiting to be written): a
        # reconnect gives back every other job the database says is ours.
        self.held = held
        self.conn: psycopg.Connection[Any] | None = None
        self.next_question_connect = 0.0

    def warn(self, message: str) -> None:
        log.warning("%s: %s", self.process.label, message, extra={"pool": self.pool})

    def error(self, message: str) -> None:
        log.error("%s: %s", self.process.label, message, extra={"pool": self.pool})

    def connect(self, *, through_drain: bool = False) -> bool:
        """Connect, retrying with capped backoff while the database is unreachable. False if
        told to stop first; ``through_drain`` (outcomes wait to be written) keeps trying while
        draining too, until the master's deadline ends this process or the master dies."""
        process = self.process
        delay, warned = 0.1, 0.0
        process.board.set_state(State.CONNECTING)
        while not process.orphaned and (through_drain or not process.draining):
            try:
                self._open()
                self._give_back_lost_claims()
                return True
            except DatabaseError as exc:
                if exc.permanent:
                    raise BootFailure(str(exc)) from None
                if time.monotonic() - warned > 30:
                    self.warn(f"{exc}; retrying")
                    warned = time.monotonic()
            process.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, RECONNECT_MAX_DELAY)
        return False

    def _open(self) -> None:
        """A new session, set up as every one of the child's must be, whoever opens it (the
        loop's reconnect or a handler's question): a session opened for a question serves the
        claims after it too, and without the generic-plan settings each claim was planned
        afresh (1.2 ms of a 1.6 ms claim) and could be planned onto a sequential scan."""
        database = self.spec.config.database
        conn = connect(
            self.spec.dsn,
            application_name=f"pgq-supervisor {self.process.label}",
            connect_timeout=database.connect_timeout,
            pooled=database.pooled,
        )
        try:
            use_fast_json(conn)  # the claimed jobs' args (queue/loaders.py)
            if not database.pooled:
                jobs_api.use_generic_plans(conn)  # the claim's planning, once
                bound_statements(conn)  # every statement's wait bounded
        except psycopg.Error as exc:  # lost again at once: as if the connect had failed
            with contextlib.suppress(Exception):
                conn.close()  # our own, opened after the fork
            raise DatabaseError(f"the new session failed its set-up: {exc}") from None
        self.conn = conn

    def _connect_once(self) -> bool:
        """One connect attempt for a question, not the loop's patient backoff: the handler
        waits on it. At most one a second."""
        now = time.monotonic()
        if now < self.next_question_connect:
            return False
        self.next_question_connect = now + QUESTION_CONNECT_EVERY
        try:
            self._open()
        except DatabaseError:
            return False
        self._give_back_lost_claims()
        return True

    def reconnect(self, *, through_drain: bool = False) -> bool:
        self.discard()
        return self.connect(through_drain=through_drain)

    def discard(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()  # our own connection, opened after the fork
            self.conn = None

    def _give_back_lost_claims(self) -> None:
        """After a reconnect: a claim may have committed just as the old connection died, so
        its reply never came. Such jobs are ours on paper only; nobody would run them, and the
        master would renew their leases for as long as this child lives. Give them back
        without spending an attempt."""
        assert self.conn is not None
        try:
            moved = maintenance.requeue_worker(
                self.conn,
                self.spec.worker_id,
                "claim lost with the connection",
                spent=[],
                keep=self.held(),
            )
        except psycopg.Error as exc:
            # The master gives them back when this child leaves; nothing is lost meanwhile.
            self.warn(f"could not look for claims lost with the connection: {exc}")
            return
        for m in moved:
            log.warning(
                "job %s (%s) on queue %s given back without spending an attempt: its claim "
                "committed as the connection died, so this worker never received it",
                m.id,
                m.kind,
                m.queue,
                extra={
                    "job_id": m.id,
                    "kind": m.kind,
                    "queue": m.queue,
                    "attempt": m.attempts,
                    "pool": self.pool,
                },
            )

    def ask(self, question: Callable[[psycopg.Connection[Any]], T]) -> T | None:
        """A question a running handler asks on this session (from the main thread only);
        None when it could not be answered: the handler then keeps its last known answer and
        asks again. A session found broken is dropped, and the next question (at most one a
        second) or the loop's next claim opens a new one."""
        if self.conn is None and not self._connect_once():
            return None
        assert self.conn is not None
        try:
            return question(self.conn)
        except psycopg.Error:
            if self.conn.broken or self.conn.closed:
                self.discard()
            return None
        except BaseException:
            # A timeout or the master's death raised into the handler while this call was on
            # the wire: the connection is mid-protocol and must never be used again.
            self.discard()
            raise


def bound_statements(conn: psycopg.Connection[Any]) -> None:
    """The child's session timeouts (LOCK_TIMEOUT, STATEMENT_TIMEOUT)."""
    conn.execute(
        query("child_session_timeouts"),
        {"statement_timeout": STATEMENT_TIMEOUT, "lock_timeout": LOCK_TIMEOUT},
    )
