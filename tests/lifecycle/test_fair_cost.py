"""Fair share by cost on a real supervisor (scripts/benchmarks/fair_cost_bench.py holds the run
and its verdict): two tenants whose jobs cost 1 and 10 units of CPU share a queue 1 : 10 in CPU by
count, and within 10% of equal with `fairness: cost`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.lifecycle.harness import ROOT


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_tenants_share_a_queue_by_cpu_with_fairness_cost(dsn: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "benchmarks" / "fair_cost_bench.py"),
            "--dsn",
            dsn,
            "--seconds",
            "35",
            "--cheap",
            "0.005",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert result.stdout, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["ok"], json.dumps(report, indent=1)
