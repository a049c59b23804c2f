"""The metrics server and what it reports, against a stand-in master (no database, no fork).

The HTTP tests run the server's side of the selector loop on a thread of the test, the way the
master runs it; the clients are plain sockets, some of them deliberately rude.
"""

from __future__ import annotations

import http.client
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from supervisor.config import Config, DatabaseConfig, MetricsConfig, PoolConfig
from supervisor.master.children import Child, Slot
from supervisor.master.loop import Master
from supervisor.master.pools import PoolRuntime
from supervisor.observability import metrics
from supervisor.observability.families import QueueSnapshot
from supervisor.observability.metrics import MetricsError, MetricsServer
from supervisor.observability.view import MasterCounters, MasterView
from supervisor.queue.maintenance import QueueStats
from supervisor.shared.board import Board, Counter, State
from tests.promtext import parse


def fake_master(**processes: int) -> Any:
    pools = {
        name: PoolConfig(name, {name: 1, "shared": 1}, processes=n) for name, n in processes.items()
    }
    config = Config("test.yaml", DatabaseConfig(), {}, pools, {})
    return SimpleNamespace(
        config=config,
        pools={
            name: PoolRuntime(pool, 1, [Slot(name, i + 1) for i in range(pool.processes)])
            for name, pool in pools.items()
        },
        children={},
        counters=MasterCounters(),
        db=SimpleNamespace(reachable=True),
        stopping=False,
        scaling=SimpleNamespace(states={}),
    )


def view_of(master: Any) -> Callable[[], MasterView]:
    """The view the real master hands its metrics, built from the stand-in's state."""
    master.pool_view = lambda runtime: Master.pool_view(master, runtime)
    return lambda: Master.metrics_view(master)


def add_child(master: Any, pool: str, slot: int, pid: int, *, ready: bool = True) -> Child:
    board = Board()
    if ready:
        board.set_ready()
        board.set_state(State.IDLE)
    child = Child(pid, pool, slot, 1, f"worker-{pid}", board, -1, -1)
    master.children[pid] = child
    master.pools[pool].slots[slot - 1].child = child
    return child


def reap(master: Any, server: MetricsServer, child: Child) -> None:
    """What the master does when a child dies: absorb, forget, close the board."""
    del master.children[child.pid]
    master.pools[child.pool].slots[child.slot - 1].child = None
    server.absorb(child.pool, child.board)
    child.board.close()


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    made = MetricsServer(MetricsConfig(port=0))
    yield made
    made.close()


def scrape(server: MetricsServer) -> Any:
    return parse(server.exposition())


def test_counters_and_histograms_survive_a_reaped_child(server: MetricsServer) -> None:
    master = fake_master(pdf=2)
    server.attach(view_of(master), selectors.DefaultSelector())
    first, second = add_child(master, "pdf", 1, 101), add_child(master, "pdf", 2, 102)
    first.board.count(Counter.COMPLETED, 5)
    first.board.observe_job(0.2)
    first.board.observe_claim(0.003)
    second.board.count(Counter.COMPLETED, 2)
    second.board.count(Counter.LOST)
    before = scrape(server)
    assert before.value("pgq_jobs_total", pool="pdf", outcome="completed") == 7
    assert before.value("pgq_jobs_total", pool="pdf", outcome="lost_lease") == 1
    assert before.value("pgq_job_duration_seconds_bucket", pool="pdf", le="0.25") == 1
    assert before.value("pgq_job_duration_seconds_bucket", pool="pdf", le="0.1") == 0

    reap(master, server, first)
    after = scrape(server)
    for name, labels in [
        ("pgq_jobs_total", {"pool": "pdf", "outcome": "completed"}),
        ("pgq_job_duration_seconds_count", {"pool": "pdf"}),
        ("pgq_job_duration_seconds_sum", {"pool": "pdf"}),
        ("pgq_claim_latency_seconds_bucket", {"pool": "pdf", "le": "0.005"}),
    ]:
        assert after.value(name, **labels) == before.value(name, **labels), name

    replacement = add_child(master, "pdf", 1, 103)
    replacement.board.count(Counter.COMPLETED, 1)
    assert scrape(server).value("pgq_jobs_total", pool="pdf", outcome="completed") == 8


def test_master_counters_and_children(server: MetricsServer) -> None:
    master = fake_master(pdf=2, mail=1)
    server.attach(view_of(master), selectors.DefaultSelector())
    add_child(master, "pdf", 1, 101)
    add_child(master, "pdf", 2, 102, ready=False)
    master.counters.restart("pdf", "signal_sigkill")
    master.counters.recycle("pdf", "hard")
    master.counters.rescued, master.counters.discarded_after_crash = 3, 1
    exposition = scrape(server)
    assert exposition.value("pgq_child_restarts_total", pool="pdf", reason="signal_sigkill") == 1
    assert exposition.value("pgq_child_recycles_total", pool="pdf", kind="hard") == 1
    assert exposition.value("pgq_jobs_rescued_total", outcome="requeued") == 3
    assert exposition.value("pgq_jobs_after_crash_total", outcome="discarded") == 1
    assert exposition.value("pgq_children", pool="pdf", state="idle") == 1
    assert exposition.value("pgq_children", pool="pdf", state="booting") == 1
    assert exposition.value("pgq_children", pool="mail", state="idle") == 0
    assert exposition.value("pgq_children_ready", pool="pdf") == 1
    assert exposition.value("pgq_pool_processes", pool="pdf") == 2
    assert exposition.value("pgq_database_up") == 1


def test_queue_figures_come_from_the_snapshot(server: MetricsServer) -> None:
    master = fake_master(pdf=1)
    server.attach(view_of(master), selectors.DefaultSelector())
    assert scrape(server).series("pgq_queue_jobs") == {}  # unknown is not zero
    server.snapshot = QueueSnapshot(
        [
            QueueStats("pdf", 4, 1, 2, 3, 12.5, cancelled=5, paused=True),
            QueueStats("gone", 0, 0, 0, 1, 0.0),
        ],
        time.monotonic() - 2,
    )
    exposition = scrape(server)
    assert exposition.value("pgq_queue_jobs", queue="pdf", state="available") == 4
    assert exposition.value("pgq_queue_jobs", queue="pdf", state="scheduled") == 1
    assert exposition.value("pgq_queue_jobs", queue="pdf", state="running") == 2
    assert exposition.value("pgq_queue_jobs", queue="pdf", state="discarded") == 3
    assert exposition.value("pgq_queue_jobs", queue="pdf", state="cancelled") == 5
    assert exposition.value("pgq_queue_paused", queue="pdf") == 1
    assert exposition.value("pgq_queue_paused", queue="gone") == 0
    assert exposition.value("pgq_queue_oldest_ready_age_seconds", queue="pdf") == 12.5
    assert exposition.value("pgq_queue_jobs", queue="gone", state="discarded") == 1
    # A configured queue with no jobs at all reports zeros instead of vanishing.
    assert exposition.value("pgq_queue_jobs", queue="shared", state="available") == 0
    assert 2 <= exposition.value("pgq_queue_stats_age_seconds") < 10


def test_readiness_says_why_not(server: MetricsServer) -> None:
    master = fake_master(pdf=2)
    server.attach(view_of(master), selectors.DefaultSelector())
    add_child(master, "pdf", 1, 101)
    assert server.not_ready() == ["queue stats not read yet", "pool pdf: 1 of 2 children ready"]
    add_child(master, "pdf", 2, 102)
    server.snapshot = QueueSnapshot([], time.monotonic())
    assert server.not_ready() == []
    master.children[102].board.set_state(State.CONNECTING)  # lost its database connection
    assert server.not_ready() == ["pool pdf: 1 of 2 children ready"]
    master.children[102].board.set_state(State.IDLE)
    server.snapshot = QueueSnapshot([], time.monotonic() - 3 * metrics.STATS_INTERVAL - 1)
    assert server.not_ready() == ["queue stats last read 16s ago"]
    master.db.reachable = False
    assert server.not_ready() == ["database unreachable"]
    assert scrape(server).value("pgq_database_up") == 0
    master.db.reachable, master.stopping = True, True
    server.snapshot = QueueSnapshot([], time.monotonic())
    assert server.not_ready() == ["stopping"]


def test_a_port_in_use_is_a_clear_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(MetricsError, match=f"^metrics.port {port} is in use$"):
            MetricsServer(MetricsConfig(port=port))


# -- HTTP -----------------------------------------------------------------------------------


class Loop:
    """The master's side: select, hand metrics events to the server, sweep once a second."""

    def __init__(self, server: MetricsServer, master: Any) -> None:
        self.server = server
        self.master = master
        self.selector = selectors.DefaultSelector()
        server.attach(view_of(master), self.selector)
        self.stop = threading.Event()
        self.longest_turn = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        next_sweep = time.monotonic()
        while not self.stop.is_set():
            for key, _ in self.selector.select(0.05):
                started = time.monotonic()
                self.server.handle(key)
                self.longest_turn = max(self.longest_turn, time.monotonic() - started)
            if time.monotonic() >= next_sweep:
                self.server.expire(time.monotonic())
                next_sweep = time.monotonic() + 0.1

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.fixture
def loop(server: MetricsServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Loop]:
    monkeypatch.setattr(metrics, "IDLE_TIMEOUT", 1.0)
    master = fake_master(pdf=1)
    add_child(master, "pdf", 1, 101)
    server.snapshot = QueueSnapshot([], time.monotonic() + 3600)
    running = Loop(server, master)
    yield running
    running.close()


def get(server: MetricsServer, path: str, method: str = "GET") -> tuple[int, str, str]:
    conn = http.client.HTTPConnection(*server.address, timeout=5)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        conn.close()


def raw(server: MetricsServer, data: bytes) -> bytes:
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(data)
        return read_all(sock)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def test_endpoints(server: MetricsServer, loop: Loop) -> None:
    status, content_type, body = get(server, "/metrics")
    assert (status, content_type) == (200, "text/plain; version=0.0.4; charset=utf-8")
    assert parse(body).value("pgq_children_ready", pool="pdf") == 1
    assert get(server, "/livez")[::2] == (200, "ok\n")
    assert get(server, "/readyz?verbose")[::2] == (200, "ready\n")
    assert get(server, "/metrics", "HEAD")[2] == ""
    assert get(server, "/")[0] == 404
    assert get(server, "/metrics/x")[0] == 404
    assert get(server, "/metrics", "POST")[0] == 405
    assert raw(server, b"hello\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert raw(server, b"GET /livez\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    # A request trickling in, one byte at a time.
    with socket.create_connection(server.address, timeout=5) as sock:
        for byte in b"GET /livez HTTP/1.0\r\nHost: x\r\n\r\n":
            sock.send(bytes([byte]))
        assert read_all(sock).endswith(b"\r\n\r\nok\n")


def test_readyz_is_503_with_the_reason(server: MetricsServer, loop: Loop) -> None:
    loop.master.db.reachable = False
    assert get(server, "/readyz")[::2] == (503, "database unreachable\n")
    assert get(server, "/livez")[0] == 200


def test_an_endless_request_is_cut_off(server: MetricsServer, loop: Loop) -> None:
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        with pytest.raises(OSError):  # the server answers and closes while we still send
            for _ in range(100):
                sock.sendall(b"X-Padding: " + b"x" * 1000 + b"\r\n")
                time.sleep(0.01)
        assert read_all(sock).startswith(b"HTTP/1.1 431 ")


def test_silent_clients_are_dropped_and_never_block_the_loop(
    server: MetricsServer, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics, "MAX_CONNECTIONS", 4)
    silent = [socket.create_connection(server.address, timeout=5) for _ in range(10)]
    half = socket.create_connection(server.address, timeout=5)
    half.sendall(b"GET /metr")
    try:
        started = time.monotonic()
        assert get(server, "/livez")[0] == 200
        assert time.monotonic() - started < 3.0  # generous: the real figure is a benchmark's
        assert len(server.connections) <= 4
        # Every silent connection is closed: pushed out by newer ones, or timed out.
        for sock in [*silent, half]:
            assert read_all(sock) == b""
        assert time.monotonic() - started < 5.0
        assert server.connections == {}
    finally:
        for sock in [*silent, half]:
            sock.close()


def test_a_client_that_does_not_read_its_response_does_not_block(
    server: MetricsServer, loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = "x" * (64 << 20)  # more than the socket buffers hold
    monkeypatch.setattr(server, "exposition", lambda: big)
    with socket.create_connection(server.address, timeout=5) as lazy:
        lazy.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        # Not reading yet: wait until the response is pending on the server's side.
        deadline = time.monotonic() + 10
        while not any(c.outgoing for c in list(server.connections.values())):
            assert time.monotonic() < deadline, "the server never started answering"
            time.sleep(0.01)
        assert server.filenos() == [server.listener.fileno(), lazy_fd(server)]  # type: ignore[union-attr]
        assert get(server, "/livez")[0] == 200
        response = read_all(lazy)
    assert response.endswith(b"\r\n\r\n" + big.encode())
    assert loop.longest_turn < 2.0  # a 64 MiB write in one go would take far longer here


def lazy_fd(server: MetricsServer) -> int:
    (fd,) = server.connections
    return fd


def test_close_releases_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    server = MetricsServer(MetricsConfig(port=0))
    selector = selectors.DefaultSelector()
    server.attach(view_of(fake_master(pdf=1)), selector)
    with socket.create_connection(server.address, timeout=5) as sock:
        deadline = time.monotonic() + 5
        while not server.connections and time.monotonic() < deadline:
            for key, _ in selector.select(0.1):
                server.handle(key)
        assert len(server.filenos()) == 2
        server.close()
        assert read_all(sock) == b""
    assert server.filenos() == []
    assert selector.get_map() == {}
