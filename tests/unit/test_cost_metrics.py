"""The cost families of /metrics, from what the stats session read of pgq.attempt_costs."""

from __future__ import annotations

from supervisor.observability.families import QueueSnapshot, cost_families


def test_cost_families_carry_each_kind_and_tenant() -> None:
    snapshot = QueueSnapshot(
        [],
        0.0,
        kind_costs=[("pdf", 2, 20.0), ("mail", 9, 1.5)],
        tenant_costs=[("q", "acme", 20.0), ("q", "", 1.5)],
    )
    found = {
        f.name: {
            dict(s.labels).get("kind") or dict(s.labels).get("tenant"): s.value for s in f.samples
        }
        for f in cost_families(snapshot)
    }
    assert found["pgq_kind_cpu_seconds_last_hour"] == {"pdf": 20.0, "mail": 1.5}
    assert found["pgq_kind_attempts_last_hour"] == {"pdf": 2, "mail": 9}
    assert found["pgq_tenant_cpu_seconds_last_hour"] == {"acme": 20.0, "": 1.5}
    assert all(not f.samples for f in cost_families(None))
