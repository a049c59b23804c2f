"""The claim protocol's model (scripts/model/protocol.pml) holds its invariants in every
scenario, and each broken variant, a defect fixed in an earlier round, still produces its
counterexample: the model can fail, and fails where the defect was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "model" / "check.py"

sys.path.insert(0, str(CHECK.parent))
import check as model  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def verdicts() -> dict[str, dict]:
    if not model.spin_available():
        if os.environ.get("PGQ_REQUIRE_SPIN"):
            pytest.fail("PGQ_REQUIRE_SPIN is set but spin or gcc is missing (apt-get install spin)")
        pytest.skip("spin is not installed (apt-get install spin)")
    done = subprocess.run(
        [sys.executable, str(CHECK)], capture_output=True, text=True, timeout=1700, check=False
    )
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    found = {row["check"]: row for row in rows if "check" in row}
    assert found, done.stderr
    return found


@pytest.mark.parametrize("scenario", [s.name for s in model.SCENARIOS])
def test_the_protocol_holds_every_invariant(verdicts: dict[str, dict], scenario: str) -> None:
    row = verdicts[scenario]
    assert row["errors"] == 0, row
    assert not row["out_of_memory"], row
    assert row["states"] > 1000, row


@pytest.mark.parametrize("broken", model.BROKEN, ids=lambda b: b.define)
def test_each_broken_variant_breaks_the_invariant_it_is_about(
    verdicts: dict[str, dict], broken: model.Broken
) -> None:
    row = verdicts[broken.define.lower()]
    assert row["errors"] > 0, row
    assert broken.breaks in (row["failed_assertion"] or "").replace(" ", ""), row
