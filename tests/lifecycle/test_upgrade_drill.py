"""The rolling-upgrade drill (scripts/drills/upgrade_drill.py) as a slow test: the previous
release's supervisors drain a stream while this release migrates behind an application's open
transaction and starts beside them; nothing lost, nothing run twice, no job waiting over 1 s."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.commands import ROOT


@pytest.mark.slow
def test_a_rolling_upgrade_loses_nothing_runs_nothing_twice_and_stalls_no_claim(
    pg_server: str,
) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/drills/upgrade_drill.py", "--dsn", pg_server, "--seconds", "14"],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and figures["ok"], done.stdout + done.stderr[-3000:]
    assert figures["migrations_applied"][-2:] == [
        "9901_drill_add_column",
        "9902_drill_index_concurrently",
    ]
