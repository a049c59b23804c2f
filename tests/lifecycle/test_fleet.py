"""The fleet drill, small: three supervisors as three hosts (PGQ_HOST) on the test database,
while one host is SIGKILLed whole, one is frozen past its leases and one is deployed. Every job
completes exactly once, each singleton duty runs on one host per interval (measured from
pgq.maintenance_runs) and an every-2s schedule enqueues each tick once across the fleet
(scripts/drills/fleet.py holds the drill and its verdict)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable

import psycopg
import pytest

from supervisor import NewJob, enqueue_many, migrate
from tests.handlers import LEDGER
from tests.lifecycle.harness import ROOT, Supervisor, query, scalar, wait_for


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_small_fleet_drill_holds_every_promise(dsn: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "drills" / "fleet.py"),
            "--jobs",
            "400",
            "--spread",
            "12",
            "--timeout",
            "120",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=140,
        env={**os.environ, "PGQ_DSN": dsn},
    )
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr
    figures = json.loads(lines[-1])
    failed = [name for name, held in figures.get("checks", {}).items() if not held]
    assert result.returncode == 0 and figures["ok"], (failed, figures, result.stderr[-4000:])
    assert figures["faults"] == {"host_kill": 1, "freeze": 1, "deploy": 1}
    # The jobs (with the long ones the faults add) and one job per schedule tick.
    assert figures["completed"] == figures["jobs"] + figures["schedule_ticks"]
    assert figures["jobs"] > 400 and figures["schedule_ticks"] > 0
    # The killed and the frozen hosts held jobs that came back through other hosts' rescuers.
    assert figures["jobs_rescued"] > 0
    # The drill kills the host that ran the rescuer last, so the duty had to move.
    assert figures["checks"].get("rescue_moved_off_the_killed_host") is True, figures
    assert len(figures["rescue_runs_by_host"]) > 1


def test_one_supervisor_per_database_on_one_host(
    supervisor: Callable[..., Supervisor], dsn: str, empty_dsn: str
) -> None:
    """Past one database: queues placed on two databases, one supervisor for each on the same
    host (one host name). Each drains its own database's queue and registers there only."""
    migrate(empty_dsn)
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(LEDGER)
    config = """
    handlers: {record: tests.handlers:record}
    pools:
      main: {processes: 1, batch: 10, queues: {%s: 1}}
    """
    placed = {dsn: "orders", empty_dsn: "reports"}
    ids = {}
    for database, queue in placed.items():
        with psycopg.connect(database, autocommit=True) as conn:
            ids[database] = enqueue_many(conn, [NewJob("record", queue=queue)] * 50)
    sups = [
        supervisor(config % queue, extra_env={"PGQ_DSN": database, "PGQ_HOST": "one-host"})
        for database, queue in placed.items()
    ]
    for sup in sups:
        sup.start()
    for database in placed:
        wait_for(
            lambda database=database: scalar(database, "SELECT count(*) FROM test_ledger") == 50,
            timeout=30,
            what=f"the 50 jobs of {database} to run",
        )
        ran = [row[0] for row in query(database, "SELECT job_id FROM test_ledger ORDER BY 1")]
        assert ran == sorted(ids[database])  # its own jobs, each once
        assert scalar(database, "SELECT count(*) FROM pgq.jobs") == 0
        # Each supervisor registers in its own database only.
        assert query(database, "SELECT host FROM pgq.supervisors") == [("one-host",)]
    for sup in sups:
        assert sup.stop() == 0
