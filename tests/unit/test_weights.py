"""The order a child's claim tries its queues in, and where each queue's tenant rotation
resumes: pure logic, no database."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from supervisor.child.weights import EMPTY_FOR, TenantRotation, WeightedQueues
from supervisor.queue.job import Job

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def job(queue: str, tenant: str | None = None) -> Job:
    return Job(1, queue, "k", {}, 0, T0, 1, 10, 1, T0, T0, tenant=tenant)


def test_weights_share_the_first_place_while_every_queue_has_work() -> None:
    queues = WeightedQueues({"pdf": 3, "reports": 1})
    firsts = Counter()
    for n in range(400):
        order = queues.order(float(n))
        firsts[order[0]] += 1
        queues.observe(order, [job(order[0])], 1, float(n))
    assert firsts == {"pdf": 300, "reports": 100}


def test_a_queue_found_empty_goes_last_until_it_rests_out() -> None:
    names = {f"q{n}": 1 for n in range(100)}
    queues = WeightedQueues(names)
    order = queues.order(0.0)
    # A full batch from q57 alone: every queue before it was reached and was empty.
    busy = order[57]
    queues.observe(order, [job(busy)], 1, 0.0)
    later = queues.order(0.01)
    # The busy queue and the 42 never reached, then the 57 found empty, resting.
    assert set(later[:43]) == {busy, *order[58:]}
    assert later[43:] == [q for q in names if q in set(order[:57])]
    # Rested out, they are back in the weighted rotation, no longer all at the back.
    back = queues.order(EMPTY_FOR + 0.02)
    assert set(back[43:]) != set(order[:57])


def test_a_short_batch_means_every_queue_was_reached() -> None:
    queues = WeightedQueues({"a": 1, "b": 1, "c": 1})
    order = queues.order(0.0)
    queues.observe(order, [job(order[0])], 10, 0.0)  # 1 job of 10: all were reached
    assert queues.order(0.01) == [order[0], *[q for q in ["a", "b", "c"] if q != order[0]]]
    queues.wake(order[2])
    assert order[2] in queues.order(0.02)[:2]


def test_rotation_resumes_after_the_last_tenant_visited() -> None:
    rotation = TenantRotation()
    assert rotation.resume("q") == ""
    rotation.advance("q", "", [job("q", "b"), job("q", None), job("q", "a")])
    assert rotation.resume("q") == "b\x01"
    # Wrapped: from after "b" the walk went to "c", then around to "" and "a".
    rotation.advance("q", "b\x01", [job("q", "c"), job("q", None), job("q", "a")])
    assert rotation.resume("q") == "a\x01"
    rotation.advance("q", "a\x01", [job("other", "z")])  # nothing from this queue
    assert rotation.resume("q") == "a\x01"


def test_a_weighted_tenant_is_visited_as_many_claims_as_its_weight() -> None:
    rotation = TenantRotation({"q": {"big": 3}})
    visits = []
    start = ""
    tenants = ["big", "small"]
    for _ in range(8):
        start = rotation.resume("q")
        # The claim takes one job from the first tenant at or after start, wrapping.
        nxt = next((t for t in tenants if t >= start), tenants[0])
        visits.append(nxt)
        rotation.advance("q", start, [job("q", nxt)])
    assert visits == ["big", "big", "big", "small", "big", "big", "big", "small"]


def test_a_claim_of_a_large_pool_resumes_and_advances_only_where_it_took_jobs() -> None:
    """The all-queues forms give what one call per queue gives."""
    rotation, each = TenantRotation(), TenantRotation()
    order = [f"q{n}" for n in range(50)]
    jobs = [job("q7", "b"), job("q7", "a"), job("q30", "z")]
    starts = rotation.resume_all(order)
    assert starts == [each.resume(q) for q in order] == [""] * 50
    rotation.advance_all(order, starts, jobs)
    for queue, start in zip(order, starts, strict=True):
        each.advance(queue, start, jobs)
    assert rotation.resume_all(order) == [each.resume(q) for q in order]
    assert rotation.resume("q7") == "b\x01" and rotation.resume("q30") == "z\x01"
