"""The queue vacuum: keeps the head of the claim index clean while jobs stream through.

Every consumed job leaves a dead row in pgq.jobs and a dead entry at the head of the claim
index, and each claim steps over those entries until VACUUM removes them. Autovacuum wakes only
once per ``autovacuum_naptime`` (a server-wide setting, one minute by default), so in a long
drain claims get slower and slower (measured: a 300,000-job drain at batch 10 ran at 4,241
jobs/s, and at 6,501 with a VACUUM every 5 s). This service checks the dead-row count every
interval and, past a threshold, runs ``VACUUM pgq.jobs`` itself.

A vacuum can take seconds, and the master's loop must not wait for it: the statement is sent on
a connection of its own, opened for the occasion (without waiting: the connect advances a moment
at every turn of the master's loop until it is made, then the vacuum starts), and its socket
joins the master's selector; the result is read when it arrives. (The connect once advanced only
at each check, 20 ms every 5 s: on a loaded server, where a connect takes longer than 20 ms of
polling, it ran out its connect_timeout every time and the vacuum never ran, issue 30.) With
several supervisors on one database, a vacuum starts at most once per interval across the fleet
(the maintenance record, pgq.maintenance_runs); on a direct session the connection also holds an
advisory lock while the vacuum runs, and closing it (or its death) releases the lock. Behind a
transaction pooler no session lock can be held, and VACUUM (SKIP_LOCKED) itself skips a table
another vacuum is working on.

A vacuum of many dead rows (``paced_above``: what a long-held xmin horizon leaves) is paced as
autovacuum's. Unpaced, the first one after a 30-minute hold wrote 1.55 GB of WAL in 20 s, and the
checkpoints that forced stalled every claim for 1-3 s; the everyday vacuum of a few thousand rows
stays unpaced, so the head of the index is clean again as soon as it can be. No vacuum gives the
table's empty end pages back (sql/maintenance.sql, vacuum_jobs): the lock that takes stalls the
claims, and the queue refills them.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import time
from typing import TYPE_CHECKING, Any

import psycopg

from supervisor.config import VacuumConfig
from supervisor.queue import locks, maintenance
from supervisor.queue.dsn import scrub
from supervisor.queue.queries import query
from supervisor.services.base import Service
from supervisor.sessions.database import MasterDatabase
from supervisor.sessions.pending import PendingStatement, Readable

if TYPE_CHECKING:
    from supervisor.services.base import Host

log = logging.getLogger("pgq.master")

MAINTAIN_PRIVILEGE_SINCE = 170000  # PostgreSQL 17 added GRANT MAINTAIN


class QueueVacuum(Service, Readable):
    """Vacuums pgq.jobs when dead rows pile up, without blocking the master's loop."""

    name = "vacuum"

    def __init__(self, host: Host, selector: selectors.BaseSelector) -> None:
        defaults = VacuumConfig()
        super().__init__(host, defaults.interval)
        self.selector = selector
        # Opened for each vacuum and closed after it; no statement timeout (VACUUM may take
        # long: it is sent without waiting). Not quiet: it connects only after the master's own
        # session answered, so a failure here is its own (too many connections, say).
        self.session = MasterDatabase(
            host.dsn,
            name="vacuum",
            connect_timeout=host.config.database.connect_timeout,
            pooled=host.config.database.pooled,
            timeouts=None,
        )
        self.dead_rows = defaults.dead_rows
        self.paced_above = defaults.paced_above
        self.paced = ""  # how the vacuum under way is paced ("": not at all), for its log lines
        self.pending: PendingStatement | None = None
        self.fd = -1
        self.started = 0.0
        self.dead_before = 0
        self.refused = False  # told once that this role may not vacuum the table
        # The dead rows of a check that wants a vacuum while its session's connect is under way
        # (None: no vacuum is waiting for one): the loop advances the connect (``advance``).
        self.wanted: int | None = None
        # The xmin horizon (sql/maintenance.sql, vacuum_due) seen by the check that started the
        # vacuum under way, and by the one that started the last vacuum that finished: while a
        # snapshot holds it there, another VACUUM would scan the whole table and every index to
        # remove nothing (2.4 s every 5 s after 28 minutes of a hold at 3,000 jobs/s, a third of
        # a core), so none starts until it moves.
        self.horizon: str | None = None
        self.vacuumed_at: str | None = None
        self.held_said = False  # said once per hold

    def configure(self, config: VacuumConfig) -> None:
        """(Re)read the settings; a vacuum in flight carries on across a reload."""
        self.interval = config.interval
        self.dead_rows = config.dead_rows
        self.paced_above = config.paced_above
        self.next_due = min(self.next_due, time.monotonic() + config.interval)

    # -- the service's side: decide and start ---------------------------------------------

    def run_once(self) -> int:
        if self.pending is not None:
            return 0  # the last one is still running
        row = self.host.db.run("vacuum check", self._check)
        if row is None:
            return 0
        dead_rows, allowed, maintain, horizon = row
        if not allowed:
            if not self.refused:
                log.warning(
                    "vacuum: this database role may not vacuum pgq.jobs (not its owner%s); "
                    "leaving it to autovacuum",
                    "; GRANT MAINTAIN ON pgq.jobs allows it" if maintain else "",
                )
                self.refused = True
            return 0
        held = horizon is not None and horizon == self.vacuumed_at
        if not held:
            self.held_said = False
        elif dead_rows >= self.dead_rows and not self.held_said:
            self.held_said = True
            log.info(
                "vacuum: %d dead rows in pgq.jobs, but the xmin horizon has not moved since the "
                "last vacuum (an open snapshot or transaction holds it; `pgq-supervisor doctor` "
                "names it): no vacuum until it moves",
                dead_rows,
            )
        if dead_rows < self.dead_rows or held:
            self.wanted = None
            self.session.close()  # a connect left under way by the last try
            return 0
        self.wanted = dead_rows
        self.horizon = horizon
        self._start(dead_rows)
        return 1

    @property
    def connecting(self) -> bool:
        """A vacuum waits for its session's connect, which the loop advances every turn."""
        return self.wanted is not None and self.pending is None and self.session.connect_under_way

    def advance(self) -> None:
        """One step of the connect a vacuum waits for, and the vacuum once it is made."""
        if self.connecting and self.wanted is not None:
            self._start(self.wanted)

    def _check(self, conn: psycopg.Connection[Any]) -> tuple[int, bool, bool, str | None]:
        """Dead rows, whether this role may vacuum, whether the server knows MAINTAIN, and the
        xmin horizon (None: nothing holds one)."""
        maintain = conn.info.server_version >= MAINTAIN_PRIVILEGE_SINCE
        row = conn.execute(query("vacuum_due"), {"maintain": maintain}).fetchone()
        if row is None:
            return 0, False, maintain, None
        return int(row[0]), bool(row[1]), maintain, row[2]

    def _start(self, dead_rows: int) -> None:
        conn = self.session.connection()
        if conn is None:
            return  # the connect goes on at the next turn (or, the database away, check)
        self.wanted = None
        if not self.session.run("vacuum turn", self._our_turn):
            self.session.close()  # another supervisor is vacuuming, or just did
            return
        self.paced = ""
        if dead_rows >= self.paced_above and not self.host.config.database.pooled:
            # Behind a transaction pooler a session setting would stay on the server
            # connection for other clients, and a VACUUM cannot carry a SET LOCAL.
            pace = self.session.run("vacuum pace", self._pace)
            if pace is None:
                self.session.close()
                return
            self.paced = f", paced: cost_delay {pace[0]}, cost_limit {pace[1]}"
        try:
            self.pending = PendingStatement(conn, query("vacuum_jobs"))
        except psycopg.Error as exc:
            self.session.close()
            log.warning("vacuum: could not start: %s", scrub(str(exc).strip(), self.host.dsn))
            return
        self.started = time.monotonic()
        self.dead_before = dead_rows
        self.fd = self.pending.fileno()
        self.selector.register(self.fd, selectors.EVENT_READ, self)
        log.debug("vacuum: started on pgq.jobs (%d dead rows%s)", dead_rows, self.paced)

    def _pace(self, conn: psycopg.Connection[Any]) -> tuple[str, str]:
        """The server's autovacuum pacing set on this session; the values as set, for the log."""
        row = conn.execute(query("vacuum_pace")).fetchone()
        assert row is not None  # a SELECT without FROM returns its one row
        return str(row[0]), str(row[1])

    def _our_turn(self, conn: psycopg.Connection[Any]) -> bool:
        """Once per interval across the fleet (the maintenance record). On a direct session
        the advisory lock is also held for the whole vacuum; behind a transaction pooler no
        session lock can be, and VACUUM (SKIP_LOCKED) itself skips a table another vacuum
        holds."""
        host = self.host
        if not host.config.database.pooled and not maintenance.try_lock(conn, locks.VACUUM):
            return False
        claimed = maintenance.claim_turn(
            conn, locks.VACUUM, "vacuum", host.supervisor_id, self.interval
        )
        return claimed is not None

    # -- the loop's side: the result arrives ----------------------------------------------

    def fileno(self) -> int | None:
        return self.fd if self.pending is not None else self.session.fileno()

    def on_readable(self) -> None:
        pending = self.pending
        if pending is None or not pending.poll():
            return
        took = time.monotonic() - self.started
        self._close()
        if pending.error:
            error = scrub(pending.error, self.host.dsn)
            log.warning("vacuum of pgq.jobs failed after %.1fs: %s", took, error)
            return
        # A skip of pgq.wakeup_flags (a role granted MAINTAIN on pgq.jobs before 0071 added it)
        # leaves the vacuum of pgq.jobs done.
        skipped = next((w for w in pending.warnings if "skipping" in w and '"jobs"' in w), None)
        if skipped:
            log.info("vacuum: %s", skipped)
            return
        self.host.counters.vacuums += 1
        self.vacuumed_at = self.horizon
        log.info(
            "vacuum: pgq.jobs vacuumed in %.2fs (%d dead rows before%s)",
            took,
            self.dead_before,
            self.paced,
        )

    def close(self) -> None:
        """On the way out: stop a vacuum that is still running (it is safe to cut short)."""
        if self.pending is not None:
            if psycopg.capabilities.has_cancel_safe():
                with contextlib.suppress(Exception):
                    self.pending.conn.cancel_safe(timeout=2.0)
            else:
                self._cancel_from_the_master()
        self._close()

    def _cancel_from_the_master(self) -> None:
        """Only a libpq of 17 or later cancels within a timeout. On an older one psycopg's
        cancel_safe falls back on its cancel, which waits for the server without a limit (in C,
        with the GIL held: the master would hang on a cut link); the psycopg-binary 3.2.0 and
        3.2.1 wheels bundle libpq 16, a system libpq may be older. So the master's own session
        asks the server, within its bounded wait. Not behind a pooler: the backend pid the
        vacuum's session knows is the pooler's, and no session lock is held there anyway."""
        pid = self.pending.conn.info.backend_pid if self.pending is not None else 0
        if not pid or self.host.config.database.pooled:
            return
        self.host.db.run(
            "vacuum cancel", lambda conn: conn.execute("SELECT pg_cancel_backend(%s)", (pid,))
        )

    def _close(self) -> None:
        if self.pending is None:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.fd)
        self.session.close()  # releases the advisory lock with the session
        self.pending = None
