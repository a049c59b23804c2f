"""scripts/benchmarks/bench.py runs whole: each of its scenarios on a tiny size (``--tiny``),
against the test server, with no peers. The figures mean nothing here; what is checked is that
the suite behind docs/benchmarks.md still runs and reports every scenario it was asked for (its
limit step crashed for a release on a claim parameter it did not fill)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "scripts" / "benchmarks" / "bench.py"
sys.path.insert(0, str(BENCH.parent))

from bench import SCENARIOS  # noqa: E402

# Sizes for the scenarios the command line sizes (the others take --tiny's).
SMALL = [
    "--jobs=200",
    "--batches=1,10",
    "--repeats=1",
    "--processes=2",
    "--history-rows=500",
    "--long-jobs=1000",
    "--future-jobs=500",
]


# Each takes 2-8 s on a loaded two-core machine; the drain (every batch, and pgbench's limit in
# both shapes) about 25 s, so it is the slow one.
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "scenario",
    [pytest.param(s, marks=pytest.mark.slow) if s == "drain" else s for s in SCENARIOS],
)
def test_each_scenario_runs_on_a_tiny_size(pg_server: str, scenario: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH),
            f"--dsn={pg_server}",
            f"--only={scenario}",
            "--tiny",
            "--no-peers",
            *SMALL,
        ],
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, f"bench.py --only {scenario} failed:\n{done.stderr[-4000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert scenario in report, f"no {scenario!r} in the report: {sorted(report)}"
    if scenario == "drain":
        # Ours and the database's own limit, in both statement shapes, at each batch.
        rates = report["drain"]["jobs_per_s"]
        for system in (
            "pgq-supervisor",
            "limit (pgbench)",
            "limit, one commit per batch (pgbench)",
        ):
            assert set(rates[system]) == {"1", "10"} or set(rates[system]) == {1, 10}, rates
            assert all(v > 0 for v in rates[system].values()), rates
