"""Fair share by cost (supervisor.child.fair_cost): tenants' weights from their jobs' cost."""

from __future__ import annotations

from datetime import datetime, timezone

from supervisor.child.fair_cost import CostFairness
from supervisor.child.weights import TenantRotation
from supervisor.queue.costs import Cost
from supervisor.queue.job import Job

NOW = datetime.now(timezone.utc)


def job(tenant: str | None, queue: str = "q") -> Job:
    return Job(1, queue, "k", {}, 0, NOW, 1, 3, 1, NOW, NOW, tenant=tenant)


def test_a_tenant_ten_times_as_costly_gets_a_tenth_of_the_jobs() -> None:
    rotation = TenantRotation({"q": {}})
    fairness = CostFairness(rotation, {"q": {}}, frozenset({"q"}))
    fairness.observe(job("cheap"), Cost(1.0, None))
    fairness.observe(job("dear"), Cost(10.0, None))
    assert rotation.weights["q"] == {"cheap": 20, "dear": 2}
    # Equal CPU per visit: 20 x 1 s against 2 x 10 s.


def test_configured_weights_still_scale_the_shares() -> None:
    rotation = TenantRotation({"q": {"gold": 3}})
    fairness = CostFairness(rotation, {"q": {"gold": 3}}, frozenset({"q"}))
    fairness.observe(job("gold"), Cost(2.0, None))
    fairness.observe(job(None), Cost(2.0, None))
    assert rotation.weights["q"] == {"gold": 6, "": 2}


def test_other_queues_and_idle_jobs() -> None:
    rotation = TenantRotation({"q": {}})
    fairness = CostFairness(rotation, {}, frozenset({"q"}))
    fairness.observe(job("a", queue="other"), Cost(5.0, None))
    assert rotation.weights == {"q": {}}
    fairness.observe(job("io"), Cost(0.0, None))  # waited on I/O: counted as 1 ms
    fairness.observe(job("cpu"), Cost(0.01, None))
    assert rotation.weights["q"] == {"io": 20, "cpu": 2}
