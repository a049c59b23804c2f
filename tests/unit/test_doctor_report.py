"""The doctor's pure parts: the report's shape, the thresholds in the YAML, the reading of the
children's claim histogram as the metrics render it."""

from __future__ import annotations

import pytest

from supervisor.config import ConfigError, parse_config
from supervisor.doctor import Check
from supervisor.doctor.claim import parse_histogram, quantile
from supervisor.doctor.render import render, to_json
from supervisor.observability.exposition import Family
from supervisor.observability.exposition import render as exposition
from supervisor.shared.board import CLAIM_BUCKETS

BASE = """
handlers: {render_pdf: tests.handlers:noop}
pools: {pdf: {processes: 1, queues: {pdf: 1}}}
"""


def test_problems_come_first_with_their_fix_then_one_line_per_passed_check() -> None:
    checks = [
        Check(
            "horizon.backends", "warn", "held by pid 42 " + "x" * 150, "pg_terminate_backend(42)"
        ),
        Check("vacuum.dead_rows", "ok", "12 dead rows"),
        Check("claim.plan[pdf]", "fail", "reads pgq.jobs sequentially", "recreate jobs_claim"),
    ]
    lines = render(checks, "db")
    assert lines[0] == "pgq doctor on db: 1 ok, 1 warn, 1 fail"
    text = "\n".join(lines)
    assert text.index("FAIL  claim.plan[pdf]") < text.index("WARN  horizon.backends")
    assert "  fix pg_terminate_backend(42)" in text
    assert all(len(line) <= 100 for line in lines)  # wrapped for a terminal
    assert lines[-1].startswith("ok    vacuum.dead_rows") and "12 dead rows" in lines[-1]
    assert to_json(checks)["checks"][0] == {
        "name": "horizon.backends",
        "status": "warn",
        "detail": checks[0].detail,
        "fix": "pg_terminate_backend(42)",
    }


def test_thresholds_are_read_and_checked_with_their_key_path() -> None:
    config = parse_config(
        BASE + "doctor: {notify_queue: 0.5%, queue_share: 0.8, horizon_age: 90s, slot_wal: 2GiB}",
        source="q.yaml",
    )
    assert config.doctor.notify_queue == pytest.approx(0.005)
    assert config.doctor.queue_share == 0.8
    assert config.doctor.horizon_age == 90
    assert config.doctor.slot_wal == 2 * 1024**3
    with pytest.raises(ConfigError) as caught:
        parse_config(BASE + "doctor: {notify_queue: 150%, dead_rows: 0, sampel: 1s}", source="q")
    message = str(caught.value)
    assert "doctor.notify_queue: must be more than 0% and at most 100%" in message
    assert "doctor.dead_rows: must be a positive integer" in message
    assert "doctor.sampel: unknown key" in message


def test_the_claim_histogram_is_read_as_the_metrics_render_it() -> None:
    family = Family("pgq_claim_latency_seconds", "histogram", "Round trip of one claim.")
    # 90 claims under 1 ms, 9 under 5 ms, one at 0.3 s.
    buckets = [0] * (len(CLAIM_BUCKETS) + 1)
    buckets[1], buckets[3], buckets[9] = 90, 9, 1
    family.add_histogram(CLAIM_BUCKETS, buckets, 0.4, pool="pdf")
    pools = parse_histogram(exposition([family]))
    assert set(pools) == {"pdf"}
    h = pools["pdf"]
    assert h["count"] == 100 and h["sum"] == pytest.approx(0.4)
    assert quantile(h["buckets"], h["count"], 0.5) == "1 ms"
    assert quantile(h["buckets"], h["count"], 0.99) == "5 ms"
    assert quantile(h["buckets"], h["count"], 1.0) == "500 ms"
