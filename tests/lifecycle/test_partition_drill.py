"""The network partition drill (scripts/drills/partition_drill.py) as slow tests: a host cut off
from the database while it holds leases (a network namespace and a veth pair; root only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest

from tests.commands import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("ip") is None, reason="needs root and ip netns"
    ),
]


@pytest.fixture(scope="module")
def drill(pg_server: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "scripts/drills/partition_drill.py", "--dsn", pg_server],
        cwd=ROOT,
        env=os.environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.strip(), done.stderr[-3000:]
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def test_a_cut_off_host_s_jobs_are_rescued_and_its_late_writes_fenced(
    drill: dict[str, Any],
) -> None:
    checks = drill["checks"]
    for name in (
        "a_held_leases_at_cut",
        "rescued_while_cut",
        "each_completed_exactly_once",
        "none_left",
        "no_spin_while_cut",
        "a_back_at_work",
    ):
        assert checks[name], (name, drill)


def test_the_cut_off_host_s_livez_answers_throughout(drill: dict[str, Any]) -> None:
    assert drill["checks"]["livez_answered_throughout"], drill


def test_the_cut_off_host_s_readyz_says_the_database_is_unreachable(
    drill: dict[str, Any],
) -> None:
    # Before: the loop that answers it was blocked on the dead link, and every look timed out.
    assert drill["checks"]["readyz_said_unreachable_while_cut"], drill
