"""The fleet drill, small: three supervisors as three hosts (PGQ_HOST) on the test database,
while one host is SIGKILLed whole, one is frozen past its leases and one is deployed. Every job
completes exactly once, each singleton duty runs on one host per interval (measured from
pgq.maintenance_runs) and an every-2s schedule enqueues each tick once across the fleet
(scripts/fleet.py holds the drill and its verdict)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.lifecycle.harness import ROOT


@pytest.mark.timeout(150)
def test_small_fleet_drill_holds_every_promise(dsn: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "fleet.py"),
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
    assert len(figures["rescue_runs_by_host"]) > 1
