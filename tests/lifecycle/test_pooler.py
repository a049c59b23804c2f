"""The supervisor through a real PgBouncer in transaction mode (`database.pooler: transaction`).

Each transaction may run on a different server session there, so nothing may rely on session
state: the supervisor prepares nothing server-side, takes only transaction-scoped advisory
locks, and LISTENs only on `database.listen_dsn` (or polls). The supervisor, the operator verbs
and the enqueues below all go through PgBouncer; only the tests' ledger and their checks use a
direct connection.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.config import load_config
from supervisor.observability.view import MasterCounters
from supervisor.queue.dsn import connect
from supervisor.queue.jobs import claim
from supervisor.services.purge import Purger
from supervisor.sessions.database import MasterDatabase
from tests.commands import ROOT, run_cli
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for
from tests.master_session import connected
from tests.pgbouncer import through

CONFIG = """
database:
  pooler: transaction
  {listen}
handlers:
  record: tests.handlers:record
  retry_soon: tests.handlers:retry_soon
  crash_once: tests.handlers:crash_once
pools:
  main: {{processes: 2, batch: 5, queues: {{default: 1}}, poll_interval: {poll}}}
  # Batch 1: a crash must not take a finished job's buffered outcome down with it.
  crashy: {{processes: 1, batch: 1, queues: {{crashy: 1}}, poll_interval: {poll}}}
lease: {{duration: 3s, renew_every: 1s}}
rescue: {{interval: 1s}}
vacuum: {{enabled: true, interval: 1s, dead_rows: 50}}
"""


def _config(listen: str = "", poll: str = "200ms") -> str:
    return CONFIG.format(listen=f"listen_dsn: {listen}" if listen else "", poll=poll)


def _env(sup: Supervisor) -> dict[str, str]:
    return {k: v for k, v in sup.env.items() if k != "PGQ_LEDGER_DSN"}


def _runs(dsn: str) -> dict[int, list[int]]:
    """job id -> the attempts recorded in the ledger, in order."""
    found: dict[int, list[int]] = {}
    for job_id, attempt in query(dsn, "SELECT job_id, attempt FROM test_ledger ORDER BY at"):
        found.setdefault(job_id, []).append(attempt)
    return found


def test_drain_retries_requeue_rescue_status_and_enqueue_through_pgbouncer(
    supervisor: Callable[..., Supervisor], dsn: str, bouncer_port: int
) -> None:
    pooled = through(dsn, bouncer_port)
    with connect(pooled, pooled=True) as conn:
        # A host that died holding a job: claimed with a lease that has already run out.
        enqueue_many(conn, [NewJob("record")])
        orphan = claim(conn, "default", worker="gone-host:1:dead", lease_seconds=0.001)[0]
        ids = enqueue_many(
            conn,
            [NewJob("record", {"n": n}) for n in range(300)]
            + [NewJob("retry_soon") for _ in range(20)]
            + [NewJob("crash_once", queue="crashy") for _ in range(3)],
        )
    sup = supervisor(_config(), extra_env={"PGQ_LEDGER_DSN": dsn})
    sup.dsn = pooled
    sup.env["PGQ_DSN"] = pooled
    sup.start()
    one = run_cli(sup.config, "enqueue", "record", '{"from": "cli"}', env=_env(sup))
    assert one.returncode == 0, one.stderr
    wait_for(
        lambda: scalar(dsn, "SELECT count(*) FROM pgq.jobs") == 0,
        timeout=60,
        what=f"the queue to drain\n{sup.log()}",
    )
    # Every job completed exactly once, retried and crashed ones after the attempts planned.
    runs = _runs(dsn)
    assert len(runs) == 325
    assert runs.pop(orphan.id) == [2]  # rescued from the dead host, then run once
    assert [runs.pop(i) for i in ids[300:]] == [[1, 2]] * 23  # retried; requeued after a crash
    assert set(map(tuple, runs.values())) == {(1,)}  # the rest: once each, first time
    log = sup.log()
    assert log.count("requeued after attempt 1: worker crashy#1") == 3
    assert "rescuer: 1 jobs with expired leases returned" in log
    assert "idle children poll every poll_interval" in log
    assert "prepared statement" not in log and "Traceback" not in log

    def pools_in_status() -> list[str]:
        status = run_cli(sup.config, "status", "--json", env=_env(sup))
        assert status.returncode == 0, status.stderr
        hosts = json.loads(status.stdout)["hosts"]
        return sorted(w["pool"] for h in hosts for s in h["supervisors"] for w in s["workers"])

    # The registry heartbeats every 5 s: wait for one taken with every child up.
    wait_for(lambda: pools_in_status() == ["crashy", "main", "main"], timeout=20, what="status")
    # Both singletons ran, through the pooler. Each on its own schedule: the vacuum's session
    # connects without waiting (a step per turn) and its turn comes at its next check.
    wait_for(
        lambda: (
            {"rescue", "vacuum"}
            <= {row[0] for row in query(dsn, "SELECT task FROM pgq.maintenance_runs")}
        ),
        timeout=20,
        what=f"the rescue and vacuum turns\n{sup.log()[-3000:]}",
    )
    assert sup.stop() == 0


def test_wake_ups_come_from_listen_dsn_behind_a_pooler(
    supervisor: Callable[..., Supervisor], dsn: str, bouncer_port: int
) -> None:
    pooled = through(dsn, bouncer_port)
    # Idle children would poll only once a minute: a prompt pick-up needs the NOTIFY.
    sup = supervisor(_config(listen=f"'{dsn}'", poll="60s"), extra_env={"PGQ_LEDGER_DSN": dsn})
    sup.dsn = pooled
    sup.env["PGQ_DSN"] = pooled
    sup.start()
    wait_for(
        lambda: scalar(dsn, "SELECT count(*) FROM pgq.workers WHERE state = 'idle'") == 3,
        timeout=30,
        what="three idle children in the registry",
    )
    listening = query(
        dsn,
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query LIKE 'LISTEN pgq_jobs%%'",
    )
    assert listening == [(1,)]
    done = run_cli(sup.config, "enqueue", "record", env=_env(sup))
    assert done.returncode == 0, done.stderr
    wait_for(
        lambda: scalar(dsn, "SELECT count(*) FROM test_ledger") == 1,
        timeout=20,
        what=f"the job to run long before the next poll\n{sup.log()}",
    )
    assert sup.stop() == 0


@dataclass
class _Host:
    """The part of the master the purge uses, reaching the database through PgBouncer."""

    db: MasterDatabase
    config: Any
    dsn: str
    supervisor_id: str = "pooled-host:1:purge"
    host_name: str = "pooled-host"
    counters: MasterCounters = field(default_factory=MasterCounters)


def test_purge_through_pgbouncer(dsn: str, bouncer_port: int, tmp_path: Path) -> None:
    pooled = through(dsn, bouncer_port)
    path = tmp_path / "purge.yaml"
    path.write_text(_config())
    config = load_config(path, env={})
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [NewJob("record") for _ in range(3)])
        conn.execute(
            "UPDATE pgq.jobs SET state = 'discarded', finished_at = %s",
            (datetime.now(timezone.utc) - timedelta(days=30),),
        )
    db = connected(MasterDatabase(pooled, name="master", connect_timeout=5, pooled=True))
    try:
        purger = Purger(_Host(db, config, pooled))
        purger.run_once()  # takes the turn and deletes the first slice
        while purger.running:  # the run's later steps, one per turn of the master's loop
            purger.run_once()
        assert purger.host.counters.purged == 3
        purger.run_once()  # within the interval: another run is refused by the record
        assert not purger.running and purger.host.counters.purged == 3
    finally:
        db.close()
    assert scalar(dsn, "SELECT count(*) FROM pgq.jobs") == 0
    assert query(dsn, "SELECT task, run_by FROM pgq.maintenance_runs") == [
        ("purge", "pooled-host:1:purge")
    ]


def test_a_bad_pooler_setting_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(_config().replace("pooler: transaction", "pooler: statement"))
    result = run_cli(path, "check", env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert "database.pooler: must be one of none, session, transaction" in result.stderr


@pytest.mark.parametrize("value", ["a:b", "", "x" * 65])
def test_a_bad_host_name_is_a_config_error(tmp_path: Path, value: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(_config())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PGQ_HOST": value}
    result = run_cli(path, "check", env=env)
    assert result.returncode == 2
    assert "host: PGQ_HOST must be 1-64 letters" in result.stderr


def test_the_dashboard_through_pgbouncer(
    supervisor: Callable[..., Supervisor], dsn: str, bouncer_port: int
) -> None:
    """`web` with `pooler: transaction` prepares nothing server-side. PgBouncer hands a client
    the server session released last; a second client holding a transaction over every other
    page load takes that one, so the dashboard's statements alternate between two sessions, and
    a statement psycopg prepared on one (after 5 runs) would be missing on the other."""
    pytest.importorskip("uvicorn")
    httpx = pytest.importorskip("httpx")
    pooled = through(dsn, bouncer_port)
    (job_id,) = enqueue_many_direct(dsn, [NewJob("record", queue="web")])
    port = _free_port()
    web = supervisor(_config(), args=["web", "--port", str(port)])
    web.dsn = pooled
    web.env["PGQ_DSN"] = pooled
    web.start()
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/static/style.css", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(up, 30, what=f"the dashboard\n{web.log()}")
    with httpx.Client(base_url=url, timeout=10) as client, psycopg.connect(pooled) as other:
        for n in range(16):
            if n % 2:
                other.execute("SELECT 1")  # holds a server session until the commit below
            for page in ("/", f"/jobs/{job_id}", "/queues/web"):
                response = client.get(page)
                assert response.status_code == 200, f"{page}: {response.text}\n{web.log()}"
            other.commit()
        # An action through the pooler too: pause the queue, with the forgery token.
        client.get("/queues/web/pause")
        done = client.post("/queues/web/pause", data={"csrf": client.cookies["pgq_csrf"]})
        assert done.status_code == 303, done.text
    assert query(dsn, "SELECT queue FROM pgq.queue_pauses") == [("web",)]
    assert "prepared statement" not in web.log()


def enqueue_many_direct(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, jobs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
