"""The master's services that feed its metrics server: queue figures, the xmin horizon (the
doctor's cheapest check) and connection sweeps.

They run on the master's loop like every other service, so a scrape never touches the database
and never waits: it reads what these left behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import time
from collections.abc import Callable
from typing import Any

import psycopg

from supervisor.doctor import horizon
from supervisor.doctor.sql import doctor_query
from supervisor.observability.metrics import STATS_INTERVAL, MetricsServer
from supervisor.queue import limits, maintenance
from supervisor.queue.costs import cost_query
from supervisor.queue.dsn import scrub
from supervisor.queue.queries import query
from supervisor.services.base import Host, Service
from supervisor.sessions.database import MasterDatabase
from supervisor.sessions.pending import PendingStatement, Readable

log = logging.getLogger("pgq.master")

# Counting every row of pgq.jobs takes about 0.25 s at a million rows: it runs on a session of
# its own, so the figures may take that long to arrive but the loop does not wait for them. The
# server cuts the count short past this (waiting for a lock included: the loop does not wait
# with it), and a slow count makes the refresh less frequent.
STATS_TIMEOUT = "30s"
STATS_DB_SHARE = 0.05


def metrics_services(
    host: Host, server: MetricsServer, selector: selectors.BaseSelector
) -> list[Service]:
    return [QueueStatsRefresh(host, server, selector), ConnectionSweep(host, server)]


Rows = list[tuple[str | None, ...]]


class QueueStatsRefresh(Service, Readable):
    """Reads, one after the other on a session of its own, who holds the xmin horizon (the
    doctor's cheapest check, a millisecond) and the queue table's figures, for /metrics and
    /readyz, without waiting for them: each statement is sent, and its rows are read when they
    arrive. One session for both: every supervisor host would pay a second connection else."""

    name = "queue stats"

    def __init__(self, host: Host, server: MetricsServer, selector: selectors.BaseSelector) -> None:
        super().__init__(host, STATS_INTERVAL)
        self.server = server
        self.selector = selector
        database = host.config.database
        self.session = MasterDatabase(
            host.dsn,
            name="stats",
            connect_timeout=database.connect_timeout,
            pooled=database.pooled,
            timeouts=(STATS_TIMEOUT, STATS_TIMEOUT),
            quiet=True,  # the master's own session reports outages
        )
        self.pending: PendingStatement | None = None
        # The readings of this refresh still to send, and what takes the rows of the current.
        self.todo: list[tuple[str, Callable[[Rows, float], None]]] = []
        self.handler: Callable[[Rows, float], None] | None = None
        self.sent = 0.0
        self.fd = -1
        self.kind_rows: list[tuple[str, int, float]] = []

    def readings(self) -> list[tuple[str, Callable[[Rows, float], None]]]:
        # The queue figures last: their handler ends the refresh, with the limits read just
        # before them (the snapshot carries both).
        costs = []
        if self.host.config.history.enabled:  # attempts' costs are written with the history
            costs = [
                (cost_query("metrics_cost_by_kind"), self._kind_costs),
                (cost_query("metrics_cost_by_tenant"), self._tenant_costs),
            ]
        return [
            (doctor_query("horizon"), self._horizon),
            (limits.use_statement(), self._limits),
            (limits.busiest_tenants_statement(), self._tenants),
            *costs,
            (query("queue_stats"), self._queues),
        ]

    def run_once(self) -> int:
        if self.pending is not None:
            return 0  # the last refresh is still running
        conn = self._session()
        if conn is None:
            return 0
        self.todo = self.readings()
        if not self._send_next(conn):
            return 0
        self.sent = time.monotonic()
        assert self.pending is not None
        self.fd = self.pending.fileno()  # kept: a lost connection cannot say its socket
        self.selector.register(self.fd, selectors.EVENT_READ, self)
        return 1

    def _send_next(self, conn: psycopg.Connection[Any]) -> bool:
        statement, self.handler = self.todo.pop(0)
        try:
            self.pending = PendingStatement(conn, statement)
        except psycopg.Error as exc:
            self._lost(str(exc))
            return False
        return True

    def _session(self) -> psycopg.Connection[Any] | None:
        if self.host.db.in_outage:
            # The master's own session knows of the outage and retries with backoff.
            return None
        return self.session.connection()  # None too while a connect is under way

    def fileno(self) -> int | None:
        with contextlib.suppress(psycopg.Error):
            return self.session.fileno()
        return None

    def on_readable(self) -> None:
        pending = self.pending
        if pending is None or not pending.poll():
            return
        if pending.error:
            self._unregister()
            self._lost(pending.error)
            return
        now = time.monotonic()
        handler = self.handler
        assert handler is not None
        if self.todo and self.session.conn is not None:
            handler(pending.rows, now)
            self._send_next(self.session.conn)  # on the same socket, still registered
            return
        self._unregister()
        # A big table makes the refresh rarer instead of keeping the server busy counting.
        self.interval = max(STATS_INTERVAL, (now - self.sent) / STATS_DB_SHARE)
        self.next_due = self.sent + self.interval
        handler(pending.rows, now)

    def _horizon(self, rows: Rows, now: float) -> None:
        text = rows[0][0] if rows else None
        if text is not None:
            doc = json.loads(text)
            self.server.horizon_read(horizon.summarize(doc, self.host.config.doctor))

    def _limits(self, rows: Rows, now: float) -> None:
        self.server.limits_read(limits.limit_use_from_rows(rows))

    def _tenants(self, rows: Rows, now: float) -> None:
        self.server.tenants_read(limits.tenants_from_rows(rows))

    def _kind_costs(self, rows: Rows, now: float) -> None:
        self.kind_rows = [(str(k), int(n or 0), float(c or 0)) for k, n, c in rows]

    def _tenant_costs(self, rows: Rows, now: float) -> None:
        tenants = [(str(q), str(t or ""), float(c or 0)) for q, t, c in rows]
        self.server.costs_read(self.kind_rows, tenants)

    def _queues(self, rows: Rows, now: float) -> None:
        self.server.queue_stats_read(maintenance.queue_stats_from_rows(rows), now, self.interval)

    def _lost(self, why: str) -> None:
        log.warning("queue stats: %s", scrub(why.strip(), self.host.dsn))
        self.close()

    def _unregister(self) -> None:
        if self.pending is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.fd)
        self.pending = None
        self.todo = []

    def close(self) -> None:
        self._unregister()
        self.session.close()


class ConnectionSweep(Service):
    """Closes metrics connections that sat too long (a client that connects and sends nothing
    must not keep a slot forever)."""

    name = "metrics connections"

    def __init__(self, host: Host, server: MetricsServer) -> None:
        super().__init__(host, 1.0, first_in=1.0)
        self.server = server

    def run_once(self) -> int:
        return self.server.expire(time.monotonic())
