"""The queue vacuum: a statement the master sends without waiting, and the service that decides
when pgq.jobs needs a VACUUM."""

from __future__ import annotations

import contextlib
import selectors
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, claim, complete, enqueue_many
from supervisor.config import Config, parse_config
from supervisor.observability.exposition import render
from supervisor.observability.families import master_families
from supervisor.observability.view import MasterCounters
from supervisor.queue import locks
from supervisor.services.vacuum import QueueVacuum
from supervisor.sessions import loop_session
from supervisor.sessions.database import MasterDatabase
from supervisor.sessions.pending import PendingStatement
from tests.master_session import connected, vacuum_started
from tests.promtext import parse

CONFIG = """
handlers: {noop: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
vacuum: {interval: 1s, dead_rows: 100}
"""


@dataclass
class Host:
    """The part of the master the vacuum uses."""

    db: MasterDatabase
    config: Config
    dsn: str
    counters: MasterCounters = field(default_factory=MasterCounters)
    supervisor_id: str = "test-host:1:vacuum"


def _wait_done(selector: selectors.BaseSelector, on_readable: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for key, _ in selector.select(0.5):
            if key.data is not None:
                on_readable()
        if not selector.get_map():
            return
    raise AssertionError("the statement did not finish")


def test_a_pending_statement_returns_at_once_and_reports_through_its_socket(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        sent = time.monotonic()
        pending = PendingStatement(conn, "SELECT pg_sleep(1)")
        assert time.monotonic() - sent < 0.5  # the caller did not wait for the sleep
        finished = False
        with selectors.DefaultSelector() as selector:
            selector.register(pending.fileno(), selectors.EVENT_READ, pending)
            while not finished:
                assert time.monotonic() - sent < 30
                for _key, _ in selector.select(0.5):
                    finished = pending.poll()
        assert time.monotonic() - sent >= 1.0
        assert pending.error is None
        # The connection is idle again and usable as usual.
        assert conn.execute("SELECT 41 + 1").fetchone() == (42,)

        failing = PendingStatement(conn, "SELECT 1 / 0")
        while not failing.poll():
            time.sleep(0.01)
        assert failing.error is not None and "division by zero" in failing.error


def _dead_rows(dsn: str, count: int) -> None:
    """Leave ``count`` consumed jobs behind in pgq.jobs, as a drain does."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgq.jobs SET (autovacuum_enabled = false)")
        enqueue_many(conn, [NewJob("noop") for _ in range(count)])
        complete(conn, claim(conn, "default", worker="w", limit=count))
        if conn.info.server_version >= 150000:
            conn.execute("SELECT pg_stat_force_next_flush()")  # flushed as the statement ends


def _stat(dsn: str, column: str, table: str = "pgq.jobs") -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT {column} FROM pg_stat_user_tables WHERE relid = %s::regclass", (table,)
        ).fetchone()
    return int(row[0]) if row else 0


def _pages(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_relation_size('pgq.jobs')").fetchone()
    return int(row[0]) if row else 0


def _wait_for_stat(dsn: str, column: str, at_least: int) -> int:
    """Statistics arrive when the backend that counted them flushes them."""
    deadline = time.monotonic() + 15
    while (value := _stat(dsn, column)) < at_least:
        assert time.monotonic() < deadline, f"{column} stayed at {value}"
        time.sleep(0.1)
    return value


@contextlib.contextmanager
def _service(dsn: str, text: str) -> Iterator[tuple[QueueVacuum, selectors.BaseSelector]]:
    """The vacuum service of a master configured by ``text``, its session on ``dsn``."""
    config = parse_config(text, source="test.yaml")
    db = connected(
        MasterDatabase(dsn, name="master", connect_timeout=5, pooled=config.database.pooled)
    )
    with selectors.DefaultSelector() as selector:
        service = QueueVacuum(Host(db, config, dsn), selector)
        service.configure(config.vacuum)
        try:
            yield service, selector
        finally:
            service.close()
            db.close()


@pytest.fixture
def vacuum(dsn: str) -> Iterator[tuple[QueueVacuum, selectors.BaseSelector]]:
    with _service(dsn, CONFIG) as made:
        yield made


def test_vacuums_the_jobs_table_once_dead_rows_reach_the_threshold(
    dsn: str, vacuum: tuple[QueueVacuum, selectors.BaseSelector]
) -> None:
    service, selector = vacuum
    _dead_rows(dsn, 60)
    # The service's own VACUUM must keep the pages, whatever the table's setting (0072 sets it).
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgq.jobs RESET (vacuum_truncate)")
    # Each job leaves its deleted row (and the claim's old version).
    dead = _wait_for_stat(dsn, "n_dead_tup", 60)
    service.dead_rows = dead + 1
    service.run_once()
    assert service.pending is None  # one short of the threshold
    service.dead_rows = dead
    before = _stat(dsn, "vacuum_count")
    # Each wake-up leaves a dead row of pgq.wakeup_flags: the same vacuum reclaims them.
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(20):
            conn.execute("SELECT * FROM pgq.want_wakeups('w', ARRAY['default'])")
            conn.execute("SELECT pgq.take_wakeups('default')")
    flags_before = _stat(dsn, "vacuum_count", "pgq.wakeup_flags")
    pages = _pages(dsn)
    service.run_once()
    assert service.pending is not None
    _wait_done(selector, service.on_readable)
    assert service.host.counters.vacuums == 1
    # Every row is dead, so a truncating VACUUM would give the whole table back; the service's
    # keeps its pages (the truncation's ACCESS EXCLUSIVE lock stalls every claim).
    assert pages > 0 and _pages(dsn) == pages
    shown = parse(render(master_families(service.host.counters)))
    assert shown.value("pgq_vacuums_total") == 1
    assert _stat(dsn, "vacuum_count") == before + 1
    assert _stat(dsn, "n_dead_tup") == 0
    assert _stat(dsn, "vacuum_count", "pgq.wakeup_flags") == flags_before + 1


def test_autovacuum_keeps_the_end_pages_too_and_an_explicit_truncate_gives_them_back(
    dsn: str,
) -> None:
    """A VACUUM with no options is what autovacuum runs: since 0072 it keeps pgq.jobs' empty
    end pages (its truncation's lock stalls every claim); VACUUM (TRUNCATE), the doctor's advice
    for a quiet hour, still gives them back."""
    _dead_rows(dsn, 60)
    _wait_for_stat(dsn, "n_dead_tup", 60)
    pages = _pages(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM pgq.jobs")
        assert pages > 0 and _pages(dsn) == pages
        conn.execute("VACUUM (TRUNCATE) pgq.jobs")
    assert _pages(dsn) < pages


def test_only_one_supervisor_vacuums_at_a_time(
    dsn: str, vacuum: tuple[QueueVacuum, selectors.BaseSelector]
) -> None:
    service, _ = vacuum
    _dead_rows(dsn, 150)
    _wait_for_stat(dsn, "n_dead_tup", 100)
    with psycopg.connect(dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (locks.VACUUM,))
        service.run_once()
        assert service.pending is None  # the other one holds the lock
        other.execute("SELECT pg_advisory_unlock(%s)", (locks.VACUUM,))
    service.run_once()
    assert service.pending is not None


@pytest.mark.parametrize("bounded_cancel", [True, False], ids=["libpq17+", "older-libpq"])
def test_a_vacuum_cut_short_at_stop_leaves_nothing_behind(
    dsn: str,
    vacuum: tuple[QueueVacuum, selectors.BaseSelector],
    bounded_cancel: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not bounded_cancel:  # as on the psycopg-binary 3.2.0-3.2.1 wheels (libpq 16)
        monkeypatch.setattr(psycopg.capabilities, "has_cancel_safe", lambda: False)
    elif not psycopg.capabilities.has_cancel_safe():
        pytest.skip("this libpq has no bounded cancel")
    service, selector = vacuum
    _dead_rows(dsn, 150)
    _wait_for_stat(dsn, "n_dead_tup", 100)
    vacuum_started(service, timeout=15)
    service.close()
    assert service.pending is None and not selector.get_map()
    with psycopg.connect(dsn, autocommit=True) as conn:
        # Its session is gone, and the lock with it: the server ends the backend a moment after
        # the cancel and the session's close (seen still held once in a loaded run).
        deadline = time.monotonic() + 5
        while conn.execute("SELECT pg_try_advisory_lock(%s)", (locks.VACUUM,)).fetchone() != (
            True,
        ):
            assert time.monotonic() < deadline, "the vacuum's lock stayed held"
            time.sleep(0.05)


def test_a_vacuum_whose_connect_takes_many_steps_starts_between_checks(
    dsn: str,
    vacuum: tuple[QueueVacuum, selectors.BaseSelector],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a loaded server a connect needs more than one call's moment of polling. It used to
    advance only at each check (every 5 s), so it ran out its connect_timeout and the vacuum
    never ran (issue 30); the loop now advances it every turn, and the vacuum starts once it is
    made, without waiting for the next check."""
    monkeypatch.setattr("supervisor.sessions.database.CONNECT_STEP", 0.0)
    # The first call makes one poll and every later call at most two, however fast the server
    # answers (a local server answered each step of the handshake before the next look at the
    # socket, and the connect was made in the first call).
    real_step, real_ready = loop_session.Connecting.step, loop_session._ready
    looks = {"call": 0, "left": 0}

    def step(self: loop_session.Connecting, budget: float) -> Any:
        looks["call"] += 1
        looks["left"] = 0 if looks["call"] == 1 else 1
        return real_step(self, budget)

    def ready(fd: int, events: int, end: float) -> bool:
        looks["left"] -= 1
        return looks["left"] >= 0 and real_ready(fd, events, end)

    monkeypatch.setattr(loop_session.Connecting, "step", step)
    monkeypatch.setattr(loop_session, "_ready", ready)
    service, selector = vacuum
    _dead_rows(dsn, 60)
    service.dead_rows = _wait_for_stat(dsn, "n_dead_tup", 60)
    service.run_once()
    assert service.pending is None and service.connecting  # under way after one check
    deadline = time.monotonic() + 10
    while service.pending is None:
        assert time.monotonic() < deadline, "the vacuum's connect never finished"
        service.advance()  # what the master's loop does every turn
        time.sleep(0.01)
    _wait_done(selector, service.on_readable)
    assert service.host.counters.vacuums == 1


def test_no_vacuum_starts_while_the_horizon_the_last_one_saw_is_held(
    dsn: str,
    vacuum: tuple[QueueVacuum, selectors.BaseSelector],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """While a snapshot holds the xmin horizon, a VACUUM can remove nothing the last one left,
    but it still scans the table and its indexes (2.4 s every 5 s after 28 minutes of a hold at
    3,000 jobs/s). One vacuum runs at the horizon the check saw; the next waits until it moves,
    and then runs at once."""
    service, selector = vacuum
    with psycopg.connect(dsn) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM pg_class")  # the snapshot is taken: it holds
        _dead_rows(dsn, 150)
        dead = _wait_for_stat(dsn, "n_dead_tup", 150)
        service.dead_rows = 100
        vacuum_started(service, timeout=15)
        _wait_done(selector, service.on_readable)
        assert service.host.counters.vacuums == 1
        assert _stat(dsn, "n_dead_tup") >= dead  # the hold kept every one of them
        for _ in range(3):
            time.sleep(1.1)  # past the fleet-wide interval (1 s): only the horizon stops it
            with caplog.at_level("INFO", logger="pgq.master"):
                assert service.run_once() == 0
            assert service.pending is None and not service.connecting
        said = [r.getMessage() for r in caplog.records if "horizon has not moved" in r.message]
        assert len(said) == 1, said  # once per hold, not at every check
        holder.rollback()  # the hold ends: the horizon moves
    time.sleep(1.1)
    vacuum_started(service, timeout=15)
    _wait_done(selector, service.on_readable)
    assert service.host.counters.vacuums == 2
    assert _stat(dsn, "n_dead_tup") == 0


def _vacuum_watched(dsn: str, service: QueueVacuum, selector: selectors.BaseSelector) -> set[str]:
    """Start a vacuum and watch its backend until it ends: the wait events it was seen in."""
    service.run_once()
    assert service.pending is not None
    pid = service.pending.conn.info.backend_pid
    waits: set[str] = set()
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as watcher:
        while selector.get_map():
            assert time.monotonic() - started < 60, "the vacuum did not finish"
            row = watcher.execute(
                "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row and row[0]:
                waits.add(row[0])
            for key, _ in selector.select(0):
                if key.data is not None:
                    service.on_readable()
    return waits


def test_a_vacuum_of_many_dead_rows_is_paced_as_autovacuum_and_an_everyday_one_is_not(
    dsn: str, vacuum: tuple[QueueVacuum, selectors.BaseSelector], caplog: pytest.LogCaptureFixture
) -> None:
    """After a long-held horizon the first VACUUM has millions of dead rows to remove; unpaced,
    its burst of WAL forced checkpoints that stalled every claim for 1-3 s. From paced_above on,
    the service sets the server's autovacuum pacing on the vacuum's session, so its backend
    sleeps at cost-based delay points (wait event VacuumDelay); below it, no sleep at all."""
    service, selector = vacuum
    with psycopg.connect(dsn, autocommit=True) as conn:
        delay, limit = conn.execute(
            "SELECT CASE WHEN a.setting::real >= 0 THEN a.setting ELSE v.setting END,"
            "       CASE WHEN l.setting::integer > 0 THEN l.setting ELSE w.setting END"
            "  FROM pg_settings a, pg_settings v, pg_settings l, pg_settings w"
            " WHERE a.name = 'autovacuum_vacuum_cost_delay' AND v.name = 'vacuum_cost_delay'"
            "   AND l.name = 'autovacuum_vacuum_cost_limit' AND w.name = 'vacuum_cost_limit'"
        ).fetchone()
    if float(delay) <= 0:
        pytest.skip("this server's autovacuum is not paced (autovacuum_vacuum_cost_delay 0)")

    with psycopg.connect(dsn, autocommit=True) as conn:
        # Ten times the cost of a dirtied page, for this database's new sessions: the paced
        # vacuum of a few thousand rows sleeps long enough to be seen doing it.
        dbname = conn.info.dbname
        conn.execute(f'ALTER DATABASE "{dbname}" SET vacuum_cost_page_dirty = 200')
    _dead_rows(dsn, 3000)
    dead = _wait_for_stat(dsn, "n_dead_tup", 3000)
    service.dead_rows = 100
    service.paced_above = dead
    caplog.set_level("INFO", logger="pgq.master")
    waits = _vacuum_watched(dsn, service, selector)
    assert service.host.counters.vacuums == 1
    assert "VacuumDelay" in waits, f"the paced vacuum never slept: {waits}"
    assert service.paced == f", paced: cost_delay {delay}ms, cost_limit {limit}"
    assert f"({dead} dead rows before, paced: cost_delay {delay}ms" in caplog.text
    assert _stat(dsn, "n_dead_tup") == 0

    _dead_rows(dsn, 3000)
    dead = _wait_for_stat(dsn, "n_dead_tup", 3000)
    service.paced_above = dead + 1
    time.sleep(service.interval)  # one vacuum per interval across the fleet
    waits = _vacuum_watched(dsn, service, selector)
    assert service.host.counters.vacuums == 2
    assert "VacuumDelay" not in waits
    assert service.paced == ""


def test_behind_a_transaction_pooler_no_vacuum_is_paced(dsn: str) -> None:
    """A session setting sent through a transaction pooler would stay on the server connection
    for other clients, and VACUUM cannot carry a SET LOCAL: behind one, the service's vacuum of
    many dead rows runs unpaced."""
    with _service(dsn, CONFIG + "database: {pooler: transaction}\n") as (service, selector):
        assert service.host.config.database.pooled
        _dead_rows(dsn, 3000)
        service.paced_above = _wait_for_stat(dsn, "n_dead_tup", 3000)
        waits = _vacuum_watched(dsn, service, selector)
        assert service.host.counters.vacuums == 1
        assert "VacuumDelay" not in waits
        assert service.paced == ""
