"""The master's session never waits on a database that stopped answering (issue 24: /livez
answers throughout a network cut).

A forwarder stands between the session and the server and can go silent, as a cut link does:
it keeps its sockets open and stops passing bytes, so nothing errors and nothing answers.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from psycopg import conninfo

from supervisor.config import Config, MetricsConfig, parse_config
from supervisor.observability.metrics import MetricsServer
from supervisor.observability.view import MasterCounters
from supervisor.services.metrics_feed import QueueStatsRefresh
from supervisor.services.vacuum import QueueVacuum
from supervisor.sessions.database import MasterDatabase
from supervisor.sessions.loop_session import LOOP_WAIT
from tests.master_session import connected, vacuum_started

CONFIG = """
handlers: {noop: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
vacuum: {dead_rows: 1}
"""


class SilentLink:
    """127.0.0.1:port -> the server; ``cut`` stops every byte both ways until ``restore``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.flowing = threading.Event()
        self.flowing.set()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.flowing.wait()  # a connect during the cut is not answered either
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.flowing.wait()
                data = src.recv(65536)
                self.flowing.wait()
                if not data:
                    break
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.flowing.clear()

    def restore(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self.restore()
        self.server.close()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def link(dsn: str) -> Iterator[tuple[SilentLink, str]]:
    params = conninfo.conninfo_to_dict(dsn)
    host = str(params.get("host") or "127.0.0.1")
    if host.startswith("/"):
        pytest.skip("the forwarder speaks TCP")
    forwarder = SilentLink((host, int(params.get("port") or 5432)))
    yield forwarder, conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(forwarder.port))
    forwarder.close()


def _timed(fn: Any) -> tuple[Any, float]:
    started = time.monotonic()
    return fn(), time.monotonic() - started


def test_a_statement_the_database_never_answers_ends_within_the_loop_s_wait(
    link: tuple[SilentLink, str],
) -> None:
    forwarder, through = link
    db = connected(MasterDatabase(through, name="master", connect_timeout=5))
    # Before: the loop waited until the link came back (tcp_user_timeout, 15 s, on a real
    # network); here the link comes back after 8 s, so the wait would be 8 s.
    back = threading.Timer(8.0, forwarder.restore)
    try:
        assert db.run("look", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        forwarder.cut()
        back.start()
        result, took = _timed(lambda: db.run("look", lambda c: c.execute("SELECT 1").fetchone()))
        assert result is None
        assert took < LOOP_WAIT + 0.5, took
        # Counted as an outage, which /readyz reports; the session is gone.
        assert db.in_outage and not db.reachable and db.conn is None
        # Reconnecting through the silent link: every call returns at once.
        longest, cut_at = 0.0, time.monotonic()
        while (got := _timed(db.connection))[0] is None:
            longest = max(longest, got[1])
            assert time.monotonic() - cut_at < 60, "never reconnected"
            time.sleep(0.05)  # the rest of a turn of the loop
        assert longest < 0.5, longest
        # Back: the service's next try works, on a new session.
        assert db.run("look", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        assert not db.in_outage and db.reachable
    finally:
        back.cancel()
        db.close()


def test_a_transaction_cut_off_mid_way_is_not_half_applied(
    link: tuple[SilentLink, str], conn: psycopg.Connection[Any]
) -> None:
    forwarder, through = link
    conn.execute("CREATE TABLE drill_ticks (name text PRIMARY KEY, ticks int NOT NULL)")
    conn.execute("INSERT INTO drill_ticks VALUES ('a', 0)")
    db = connected(MasterDatabase(through, name="master", connect_timeout=5))

    def tick(c: psycopg.Connection[Any]) -> bool:
        with c.transaction():
            c.execute("UPDATE drill_ticks SET ticks = ticks + 1 WHERE name = 'a'")
            forwarder.cut()  # the link goes between the transaction's statements
            c.execute("UPDATE drill_ticks SET ticks = ticks + 100 WHERE name = 'a'")
        return True

    try:
        assert db.run("look", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
        result, took = _timed(lambda: db.run("tick", tick))
        assert result is None and took < LOOP_WAIT + 0.5, (result, took)
        # The server still holds the first update's row lock, in a transaction nobody will
        # finish: it ends it (idle_in_transaction_session_timeout) instead of keeping the lock
        # until the connection is noticed dead, and nothing of it stays.
        conn.execute("SET lock_timeout = '15s'")
        _, waited = _timed(
            lambda: conn.execute("SELECT ticks FROM drill_ticks FOR UPDATE").fetchone()
        )
        assert waited < 10, waited
        assert conn.execute("SELECT ticks FROM drill_ticks").fetchone() == (0,)
    finally:
        forwarder.restore()
        db.close()


@dataclass
class Host:
    """The master as its side sessions see it: its own session is fine, and theirs (``dsn``)
    go through the link that is cut."""

    db: MasterDatabase
    config: Config
    dsn: str
    supervisor_id: str = "test-supervisor"
    counters: MasterCounters = field(default_factory=MasterCounters)


def test_the_side_sessions_connect_without_holding_the_loop(
    link: tuple[SilentLink, str], dsn: str
) -> None:
    forwarder, through = link
    forwarder.cut()
    db = connected(MasterDatabase(dsn, name="master", connect_timeout=5))
    host = Host(db, parse_config(CONFIG, source="test.yaml"), through)
    server = MetricsServer(MetricsConfig(port=0))
    with selectors.DefaultSelector() as selector:
        stats, vacuum = QueueStatsRefresh(host, server, selector), QueueVacuum(host, selector)
        vacuum.configure(host.config.vacuum)
        vacuum.dead_rows = 0  # due at every check, dead rows or none
        try:
            assert db.run("look", lambda c: c.execute("SELECT 1").fetchone()) == (1,)
            # Before: each connected blocking, for libpq's shortest timeout (2 s) at the least.
            for service in (stats, vacuum, stats, vacuum):
                _, took = _timed(service.run_once)
                assert took < 0.5, (service.name, took)
            assert stats.pending is None and vacuum.pending is None
            forwarder.restore()
            vacuum_started(vacuum, timeout=30)  # the connect goes on at each check, and is made
        finally:
            stats.close()
            vacuum.close()
            server.close()
            db.close()


def test_a_vacuum_stopped_while_its_link_is_cut_returns_at_once_on_any_libpq(
    link: tuple[SilentLink, str], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on the psycopg-binary 3.2.0-3.2.1 wheels (libpq 16). Before: psycopg's cancel then
    # waited for the server without a limit, holding the GIL: here the forwarder could not even
    # run, and the stop hung for good.
    monkeypatch.setattr(psycopg.capabilities, "has_cancel_safe", lambda: False)
    forwarder, through = link
    db = connected(MasterDatabase(dsn, name="master", connect_timeout=5))
    host = Host(db, parse_config(CONFIG, source="test.yaml"), through)
    with selectors.DefaultSelector() as selector:
        vacuum = QueueVacuum(host, selector)
        vacuum.configure(host.config.vacuum)
        vacuum.dead_rows = 0
        try:
            vacuum_started(vacuum, timeout=30)
            forwarder.cut()
            _, took = _timed(vacuum.close)
            assert took < LOOP_WAIT + 0.5, took
            assert vacuum.pending is None and not selector.get_map()
        finally:
            forwarder.restore()
            vacuum.close()
            db.close()
