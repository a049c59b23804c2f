"""Elastic pools on real supervisors (scripts/benchmarks/elastic_bench.py holds the scenarios
and their verdict): a burst of 2 s jobs grows a {min: 1, max: 6} pool within seconds, it
drains and is back at 1 after the quiet period, never above the host's memory budget; two
supervisors as two hosts on one database share a backlog without both growing to max. The
steady load is the benchmark's (a minute) and the unit tests' queue simulation
(tests/unit/test_scaling.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.lifecycle.harness import ROOT


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_elastic_pools_grow_drain_keep_the_budget_and_share_a_backlog(dsn: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "benchmarks" / "elastic_bench.py"),
            "--dsn",
            dsn,
            "--scenarios",
            "burst,budget,hosts",
            "--burst",
            "30",
            "--quiet",
            "3",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert result.stdout, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"], json.dumps(report, indent=1)
    burst = report["results"]["burst"]
    assert burst["grew_after_seconds"] <= 5.0
    assert burst["peak_children"] == 6
    assert burst["back_at_1_after_seconds"] is not None
    assert any("growing from 1 to" in line for line in burst["decisions"])
    assert any("shrinking from" in line for line in burst["decisions"])
    hosts = report["results"]["hosts"]
    assert max(hosts["peak_children_each"]) < 6 and min(hosts["peak_children_each"]) > 1
