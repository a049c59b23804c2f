"""The chaos drill, short: 300 jobs through a real supervisor while a handful of each fault
hits it (children and masters killed, a master frozen past its leases, a deploy, PostgreSQL
restarted and killed, sessions terminated, a deploy and a reload while PostgreSQL is down, a
read-only period, threaded jobs hanging past their timeout). The drill runs its own embedded
PostgreSQL, whatever PGQ_TEST_DSN says, since it restarts and kills the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from supervisor.embedded.server import available
from tests.lifecycle.harness import ROOT


@pytest.mark.slow
@pytest.mark.timeout(210)
@pytest.mark.skipif(not available(), reason="needs the embedded PostgreSQL binaries")
def test_short_chaos_drill_holds_every_promise() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "drills" / "chaos.py"),
            "--jobs",
            "300",
            "--faults",
            "short",
            "--timeout",
            "150",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=200,
        env={k: v for k, v in os.environ.items() if k != "PGQ_DSN"},
    )
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr
    figures = json.loads(lines[-1])
    failed = [name for name, held in figures.get("checks", {}).items() if not held]
    assert result.returncode == 0 and figures["ok"], (failed, figures, result.stderr[-4000:])
    # 300, and the long jobs the freeze adds so that it has leases to take.
    assert figures["completed"] + figures["discarded"] == figures["jobs"] == 303
    assert figures["faults"] == {
        "child_kill": 3,
        "deploy": 1,
        "master_kill": 1,
        "freeze": 1,
        "pg_restart": 1,
        "pg_kill": 1,
        "terminate": 2,
        "outage_deploy": 1,
        "outage_reload": 1,
        "read_only": 1,
    }
