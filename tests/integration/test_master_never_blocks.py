"""The master never waits on the database for more than a moment (issue 11, items 3 and 4).

Against a real server: its sessions carry statement and lock timeouts, every connection carries
TCP keepalives, the nightly purge advances in slices across turns, a busy history table makes
the partition drop give up at once instead of queueing completions, the queue figures are
counted without the loop waiting for them, and a session the server made read-only is reopened.
"""

from __future__ import annotations

import ast
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from supervisor.config import Config, MetricsConfig, parse_config
from supervisor.observability.exposition import render
from supervisor.observability.families import master_families
from supervisor.observability.metrics import MetricsServer
from supervisor.observability.view import MasterCounters
from supervisor.queue import dsn as dsn_module
from supervisor.queue import maintenance
from supervisor.services.metrics_feed import QueueStatsRefresh
from supervisor.services.purge import DROP_RETRY_AFTER, Purger
from supervisor.services.rescuer import Rescuer
from supervisor.sessions.database import MasterDatabase
from supervisor.sessions.loop_session import LOOP_WAIT
from tests.commands import ROOT
from tests.master_session import connected
from tests.promtext import parse

CONFIG = """
handlers: {noop: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
purge: {discarded_after: 1d, batch: 400}
rescue: {interval: 60s, batch: 400}
history: {enabled: true, keep: 1d}
"""


@dataclass
class Host:
    """The part of the master the purge and the queue figures use."""

    db: MasterDatabase
    config: Config
    dsn: str
    supervisor_id: str = "test-supervisor"
    counters: MasterCounters = field(default_factory=MasterCounters)


@pytest.fixture
def host(dsn: str) -> Iterator[Host]:
    db = connected(MasterDatabase(dsn, name="master", connect_timeout=5))
    yield Host(db, parse_config(CONFIG, source="test.yaml"), dsn)
    db.close()


@pytest.fixture
def other(host: Host, dsn: str) -> Iterator[Host]:
    """A second supervisor on the same database."""
    db = connected(MasterDatabase(dsn, name="master", connect_timeout=5))
    yield Host(db, host.config, dsn, supervisor_id="other-supervisor")
    db.close()


def _old_dead_letters(conn: psycopg.Connection[Any], count: int) -> None:
    conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, args, state, attempts, finished_at)"
        " SELECT 'default', 'noop', '{}', 'discarded', 1, now() - interval '30 days'"
        " FROM generate_series(1, %s)",
        (count,),
    )


def _expired_leases(conn: psycopg.Connection[Any], count: int) -> None:
    """Jobs a host that died was running: their leases ran out a minute ago."""
    conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, args, state, attempts, lease_id, locked_by,"
        " lease_until, started_at)"
        " SELECT 'default', 'noop', '{}', 'running', 1, g, 'gone-host:1:x',"
        " now() - interval '1 minute', now() - interval '2 minutes'"
        " FROM generate_series(1, %s) AS g",
        (count,),
    )


def _turns_until_done(service: Purger | Rescuer) -> int:
    """Run a sliced service turn after turn until its run ends; how many turns it took."""
    turns = 0
    while service.running:
        assert turns < 200, f"the {service.name} does not finish"
        service.run(time.monotonic())
        turns += 1
    return turns


def _metric(counters: MasterCounters, name: str, **labels: str) -> float:
    """A master counter as /metrics shows it."""
    return parse(render(master_families(counters))).value(name, **labels)


def _count(conn: psycopg.Connection[Any], sql: str) -> int:
    row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def test_master_sessions_carry_statement_and_lock_timeouts(host: Host) -> None:
    # Before: both were 0 (no limit): a statement stuck behind a lock held the loop for good.
    conn = host.db.connection()
    assert conn is not None
    # Below the loop's own wait (LOOP_WAIT): the server cuts a slow statement short first.
    assert conn.execute("SHOW statement_timeout").fetchone() == ("1s",)
    assert conn.execute("SHOW lock_timeout").fetchone() == ("500ms",)
    assert conn.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("5s",)
    # A statement past the timeout is cut short, and the session stays in use.
    started = time.monotonic()
    assert host.db.run("slow", lambda c: c.execute("SELECT pg_sleep(10)")) is None
    assert time.monotonic() - started < LOOP_WAIT
    assert host.db.conn is conn and host.db.reachable


def test_every_connection_sets_tcp_keepalives(dsn: str) -> None:
    # Before: none were set; a half-open connection was noticed after the kernel's 2 hours.
    with dsn_module.connect(dsn) as conn:
        params = conn.info.get_parameters()
    assert params["keepalives"] == "1"
    assert params["keepalives_idle"] == "10"
    assert params["tcp_user_timeout"] == "15000"
    # An operator's own setting in the DSN wins.
    own = conninfo.make_conninfo(dsn, keepalives_idle=42)
    assert dsn_module.connection_options(own, 5)["keepalives_count"] == 3
    assert "keepalives_idle" not in dsn_module.connection_options(own, 5)


def test_nothing_in_the_package_opens_a_connection_but_the_dsn_helper() -> None:
    """The children's, the master's and the verbs' connections all get the TCP settings only
    if they all go through supervisor.queue.dsn.connect."""
    offenders = []
    for path in (ROOT / "supervisor").rglob("*.py"):
        if path == ROOT / "supervisor" / "queue" / "dsn.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "connect"
                and isinstance(node.value, ast.Name)
                and node.value.id == "psycopg"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_the_nightly_purge_advances_in_slices_across_turns(
    host: Host, conn: psycopg.Connection[Any]
) -> None:
    _old_dead_letters(conn, 3000)
    purger = Purger(host)
    purger.run(time.monotonic())
    # Before: the first turn deleted all 3000 (a million took 8.9 s of the master's loop).
    left = _count(conn, "SELECT count(*) FROM pgq.jobs")
    assert 0 < left < 3000
    assert purger.running and purger.next_due <= time.monotonic() + 0.1
    turns = 1 + _turns_until_done(purger)
    assert _count(conn, "SELECT count(*) FROM pgq.jobs") == 0
    assert host.counters.purged == 3000
    assert _metric(host.counters, "pgq_purged_jobs_total") == 3000
    assert turns >= 3000 // 400  # no slice was larger than purge.batch
    # Done: the next run is at the next purge.at, not at the next turn.
    assert abs(purger.next_due - purger.next_run(time.monotonic())) < 5


def test_the_purge_counts_its_cutoff_on_the_database_s_clock(
    host: Host, conn: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import supervisor.services.purge as purge_module

    class TwoHoursAhead(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime.now(tz) + timedelta(hours=2)

    # Dead letters 23 hours old (discarded_after is 1d) on a host whose clock is 2 hours ahead.
    conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, args, state, attempts, finished_at)"
        " SELECT 'default', 'noop', '{}', 'discarded', 1, now() - interval '23 hours'"
        " FROM generate_series(1, 50)"
    )
    _old_dead_letters(conn, 10)
    monkeypatch.setattr(purge_module, "datetime", TwoHoursAhead)
    purger = Purger(host)
    purger.run(time.monotonic())
    _turns_until_done(purger)
    # Only the 30-day-old ones went: the host's clock would have taken the 23-hour-old too.
    assert _count(conn, "SELECT count(*) FROM pgq.jobs") == 50
    assert host.counters.purged == 10


def test_the_rescuer_advances_in_slices_across_turns(
    host: Host, conn: psycopg.Connection[Any]
) -> None:
    _expired_leases(conn, 3000)
    rescuer = Rescuer(host, 60.0)
    rescuer.run(time.monotonic())
    # Before: the first turn moved all 3000, batch after batch, while the loop waited.
    running = "SELECT count(*) FROM pgq.jobs WHERE state = 'running'"
    assert 0 < _count(conn, running) < 3000
    assert rescuer.running and rescuer.next_due <= time.monotonic() + 0.1
    turns = 1 + _turns_until_done(rescuer)
    assert _count(conn, running) == 0
    assert turns >= 3000 // 400  # no slice was larger than rescue.batch
    assert host.counters.rescued == 3000
    assert _metric(host.counters, "pgq_rescuer_runs_total") == 1  # one run, many slices
    # Done: the next run is an interval away, not at the next turn.
    assert rescuer.next_due > time.monotonic() + 50


def test_a_rescue_run_stops_when_another_supervisor_starts_the_next(
    host: Host, other: Host, conn: psycopg.Connection[Any]
) -> None:
    _expired_leases(conn, 3000)
    first, second = Rescuer(host, 60.0), Rescuer(other, 60.0)
    first.run(time.monotonic())
    second.run(time.monotonic())
    # Same interval: the run under way on the first keeps the second from starting one.
    assert first.running and not second.running
    first.run(time.monotonic())
    assert first.running and not second.running
    # The first's run outlasted its interval: the second starts the next one...
    conn.execute("UPDATE pgq.maintenance SET last_run_at = now() - interval '1 hour'")
    second.run(time.monotonic())
    assert second.running
    # ...and the first's run stops instead of running beside it.
    moved = host.counters.rescued
    first.run(time.monotonic())
    assert not first.running and host.counters.rescued == moved
    _turns_until_done(second)
    assert _count(conn, "SELECT count(*) FROM pgq.jobs WHERE state = 'running'") == 0
    assert host.counters.rescued + other.counters.rescued == 3000
    runs = conn.execute("SELECT run_by FROM pgq.maintenance_runs ORDER BY started_at").fetchall()
    assert runs == [("test-supervisor",), ("other-supervisor",)]


def test_only_one_supervisor_starts_the_nightly_purge(
    host: Host, other: Host, conn: psycopg.Connection[Any]
) -> None:
    _old_dead_letters(conn, 1000)
    first, second = Purger(host), Purger(other)
    first.run(time.monotonic())
    second.run(time.monotonic())
    assert first.running and not second.running
    assert host.counters.purged > 0 and other.counters.purged == 0


def test_a_busy_history_table_makes_the_partition_drop_give_up_at_once(
    host: Host, conn: psycopg.Connection[Any], dsn: str
) -> None:
    assert maintenance.ensure_history_partitions(conn, days_ahead=1) == 2
    # A partition from long ago, past history.keep.
    conn.execute(
        "CREATE TABLE pgq.job_history_20200101 PARTITION OF pgq.job_history"
        " FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-02 00:00+00')"
    )
    conn.execute("SET statement_timeout = '10s'")
    with psycopg.connect(dsn) as completer:
        # What a completion that writes history holds until it commits.
        completer.execute("LOCK TABLE pgq.job_history IN ROW EXCLUSIVE MODE")
        later = conn.execute("SELECT now() - interval '1 day'").fetchone()[0]
        started = time.monotonic()
        # Before: DROP queued behind the completer (and every completion queued behind DROP)
        # until the statement timeout: QueryCanceled after 10 s.
        with pytest.raises(psycopg.errors.LockNotAvailable):
            maintenance.drop_history_partition(conn, later)
        assert time.monotonic() - started < 5
        # The purge's own step: it says to try again later instead of failing.
        purger = Purger(host)
        # A stage per turn: dead letters, results, batches, the runs log, partitions ahead,
        # then the old ones.
        for _ in range(10):
            purger.run(time.monotonic())
            if purger.pause == DROP_RETRY_AFTER:
                break
        assert purger.running and purger.pause == DROP_RETRY_AFTER
        completer.rollback()
    assert maintenance.drop_history_partition(conn, later) == 1


def test_queue_figures_are_counted_without_the_loop_waiting(
    host: Host, conn: psycopg.Connection[Any], dsn: str
) -> None:
    server = MetricsServer(MetricsConfig(port=0))
    with selectors.DefaultSelector() as selector, psycopg.connect(dsn) as locker:
        refresh = QueueStatsRefresh(host, server, selector)
        # The count cannot run until the lock goes: a stand-in for a very big table.
        locker.execute("LOCK TABLE pgq.jobs IN ACCESS EXCLUSIVE MODE")
        release = threading.Timer(3.0, locker.rollback)
        release.start()
        try:
            started = time.monotonic()
            refresh.run_once()
            # Before: the count ran on the master's session and the loop waited the 3 s.
            assert time.monotonic() - started < 2
            assert server.snapshot is None
            deadline = time.monotonic() + 30
            while server.snapshot is None:
                assert time.monotonic() < deadline, "the figures never arrived"
                for key, _ in selector.select(0.5):
                    key.data.on_readable()
        finally:
            release.join()
            refresh.close()
            server.close()
    assert [q.queue for q in server.snapshot.queues] == []


def test_a_session_the_server_made_read_only_is_reopened(host: Host) -> None:
    # As after a failover that demoted the server this session was on.
    conn = host.db.connection()
    assert conn is not None
    conn.execute("SET default_transaction_read_only = on")

    def write(c: psycopg.Connection[Any]) -> int:
        return c.execute("UPDATE pgq.jobs SET priority = priority").rowcount

    assert host.db.run("write", write) is None
    # Before: the read-only session was kept, and every write failed the same way for good.
    host.db.next_attempt = 0.0  # skip the reconnect backoff
    assert host.db.run("write", write) == 0
    assert host.db.conn is not conn


def test_a_connect_to_a_silent_host_never_holds_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    # A socket that listens and never answers: the kernel completes the handshake, and the
    # startup packet goes unanswered, as with a host that silently drops traffic.
    with socket.create_server(("127.0.0.1", 0), backlog=1) as silent:
        port = silent.getsockname()[1]
        db = MasterDatabase(
            f"postgresql://postgres:Sekrit-42x@127.0.0.1:{port}/test",
            name="master",
            connect_timeout=3,
        )
        started, longest = time.monotonic(), 0.0
        while not db.in_outage:
            assert time.monotonic() - started < 10, "the connect never gave up"
            call = time.monotonic()
            assert db.connection() is None
            longest = max(longest, time.monotonic() - call)
            time.sleep(0.05)  # the rest of a turn of the loop
        took = time.monotonic() - started
    # Before: each call waited the connect timeout (libpq's shortest, 2 s, at the least) while
    # the loop stood still; now a call takes a moment, and the connect gives up in its time.
    assert longest < 0.5, longest
    assert 2.5 < took < 6, took
    assert not db.reachable
    assert "database unreachable (master)" in caplog.text and "Sekrit" not in caplog.text


def test_a_multi_host_dsn_finds_the_writable_server(dsn: str) -> None:
    params = conninfo.conninfo_to_dict(dsn)
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    # The first host refuses connections (a dead primary); libpq goes on to the next.
    ha = conninfo.make_conninfo(
        dsn, host=f"127.0.0.1,{host}", port=f"1,{port}", target_session_attrs="read-write"
    )
    db = MasterDatabase(ha, name="master", connect_timeout=5)
    try:
        connected(db)  # past the refused first host, however many calls that takes
        assert db.run("write", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
    finally:
        db.close()


def test_a_rescuer_pass_is_counted_and_shown(host: Host, conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, args, state, attempts, lease_id, locked_by,"
        " lease_until, started_at)"
        " VALUES ('default', 'noop', '{}', 'running', 1, 1, 'gone-host:1:x',"
        " now() - interval '1 minute', now() - interval '2 minutes')"
    )
    Rescuer(host, 60.0).run_once()
    assert _metric(host.counters, "pgq_rescuer_runs_total") == 1
    assert _metric(host.counters, "pgq_jobs_rescued_total", outcome="requeued") == 1
    assert conn.execute("SELECT state FROM pgq.jobs").fetchone() == ("available",)
