"""The database's own limit (scripts/benchmarks/benchlib/limit.py) fills every parameter of the
claim it sends through pgbench: it takes them from the child's own claim_params, so a parameter
the claim gains cannot leave a %(name)s in the script (it raised KeyError for 'queues' once the
claim took its queues as an array)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts" / "benchmarks"))

from benchlib.limit import SHAPES, pgbench_script, sql_literal


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("protocol", ["prepared", "simple"])
def test_every_claim_parameter_is_filled(shape: str, protocol: str) -> None:
    script = pgbench_script(10, shape=shape, protocol=protocol, history=True)
    assert "%(" not in script
    assert "'{\"default\"}'" in script  # the queue, as the child sends it
    assert ":ids" in script and ":lease_ids" in script
    assert script.count("\\gset") == 1


def test_literals_quote_text_and_keep_numbers_and_booleans() -> None:
    assert sql_literal("it's") == "'it''s'"
    assert sql_literal(True) == "true"
    assert sql_literal(60.0) == "60.0"
    assert sql_literal(10) == "10"
