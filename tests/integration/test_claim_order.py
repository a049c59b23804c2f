"""The claim order (docs/claim-order.md): one statement for a pool whatever its number of queues,
the queues' weights, tenants in fair rotation inside a queue, then priority, run_at, id."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, complete, enqueue_many
from supervisor.child.cursors import ClaimCursors
from supervisor.child.weights import TenantRotation, WeightedQueues
from supervisor.queue.job import Job
from supervisor.queue.jobs import claim


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The statements sent through every cursor, of any class (the claim goes through a
    psycopg.RawCursor of its own), while the test runs."""
    found: list[object] = []
    real = psycopg.Cursor.execute

    def execute(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        found.append(query)
        return real(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", execute)
    return found


class Child:
    """What a child does around each claim: the weights' order, the tenants' rotation, the
    cursors (past its last job in each tenant; from the head only at the first claim here), one
    claim statement, and what the claim teaches all three."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        weights: Mapping[str, int],
        tenants: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self.conn = conn
        self.queues = WeightedQueues(weights)
        self.tenants = TenantRotation(tenants)
        self.cursors = ClaimCursors(refresh=3600.0)

    def claim(self, limit: int = 1) -> list[Job]:
        now = time.monotonic()
        order = self.queues.order(now)
        resume = self.tenants.resume_all(order)
        jobs = claim(
            self.conn,
            order,
            worker="w",
            limit=limit,
            resume=resume,
            tenant_weights=self.tenants.weights,
            cursors=self.cursors.for_claim(order, now),
        )
        self.queues.observe(order, jobs, limit, now)
        self.cursors.observe(jobs, now, took=3600.0)  # every later claim past the cursors
        self.tenants.advance_all(order, resume, jobs)
        complete(self.conn, jobs)
        return jobs


def _jobs(queue: str, count: int, **fields: Any) -> list[NewJob]:
    return [NewJob("k", queue=queue, **fields) for _ in range(count)]


@pytest.mark.parametrize("empty_queues", [0, 9, 99, 999])
def test_one_statement_claims_for_a_pool_whatever_its_queue_count(
    conn: psycopg.Connection[Any], sent: list[object], empty_queues: int
) -> None:
    enqueue_many(conn, _jobs("busy", 30))
    pool = [f"empty-{n}" for n in range(empty_queues)] + ["busy"]
    sent.clear()
    jobs = claim(conn, pool, worker="w", limit=10)
    assert len(sent) == 1
    assert [j.queue for j in jobs] == ["busy"] * 10
    # The busy queue listed last still fills the batch, and a short queue is topped up
    # from the next one in the same statement.
    enqueue_many(conn, _jobs("empty-0", 3)) if empty_queues else None
    sent.clear()
    jobs = claim(conn, pool, worker="w", limit=10)
    assert len(sent) == 1
    assert len(jobs) == 10


def test_weights_share_claims_and_empty_queues_change_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    weights = {"flood": 3, "trickle": 1, **{f"idle-{n}": 1 for n in range(50)}}
    enqueue_many(conn, _jobs("flood", 500) + _jobs("trickle", 500))
    child = Child(conn, weights)
    got = Counter(j.queue for _ in range(400) for j in child.claim())
    # Smooth weighted round-robin among the queues with work; the idle ones rest at the back
    # and take no turn: 3 to 1 within a few claims (the first claims probe the idle ones).
    assert got["flood"] + got["trickle"] == 400
    assert 95 <= got["trickle"] <= 110, got


def test_a_flood_tenant_does_not_hold_up_quiet_tenants(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, _jobs("q", 2000, tenant="flood"))
    quiet = [NewJob("k", queue="q", tenant=f"quiet-{n}") for n in range(20) for _ in range(3)]
    enqueue_many(conn, quiet + _jobs("q", 3))  # and three jobs without a tenant
    child = Child(conn, {"q": 1})
    order: list[str | None] = [j.tenant for _ in range(100) for j in child.claim()]
    # 22 tenants with work: each claim visits the next, so the quiet tenants' 60 jobs and the
    # three without a tenant are all done within three rounds (66 claims), beside the flood's
    # one job per round; then the flood has the queue to itself (work-conserving).
    assert sum(1 for t in order[:66] if t != "flood") == 63
    assert order[66:] == ["flood"] * 34


def test_tenant_weights_share_a_queue(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, _jobs("q", 600, tenant="big") + _jobs("q", 600, tenant="small"))
    child = Child(conn, {"q": 1}, {"q": {"big": 3}})
    got = Counter(j.tenant for _ in range(40) for j in child.claim())
    assert got == {"big": 30, "small": 10}
    # In a batch each tenant's share is rounded up (8 and 3 of 10 here, cut at 10).
    child = Child(conn, {"q": 1}, {"q": {"big": 3}})
    got = Counter(j.tenant for _ in range(20) for j in child.claim(10))
    assert 2.5 <= got["big"] / got["small"] <= 4.0, got


def test_batches_fill_across_tenants_and_stay_full(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, _jobs("q", 300, tenant="flood") + _jobs("q", 1, tenant="one"))
    child = Child(conn, {"q": 1})
    sizes = [len(child.claim(limit=100)) for _ in range(3)]
    assert sizes == [100, 100, 100]
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (1,)


def test_priority_orders_jobs_inside_a_tenant_without_starving_other_tenants(
    conn: psycopg.Connection[Any],
) -> None:
    enqueue_many(
        conn,
        _jobs("q", 50, tenant="loud", priority=100)
        + _jobs("q", 5, tenant="loud", priority=-5)
        + _jobs("q", 5, tenant="low", priority=-10),
    )
    child = Child(conn, {"q": 1})
    seen: list[tuple[str | None, int]] = [
        (j.tenant, j.priority) for _ in range(20) for j in child.claim()
    ]
    # The low-priority tenant gets every other claim; inside "loud", priority 100 goes first.
    assert [p for t, p in seen if t == "low"] == [-10] * 5
    assert seen.index(("low", -10)) <= 1
    assert all(p == 100 for t, p in seen if t == "loud")


def test_paused_queues_and_due_times_still_hold(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, _jobs("paused", 5) + _jobs("open", 5, tenant="t"))
    enqueue_many(conn, _jobs("open", 5, delay=3600))
    conn.execute("INSERT INTO pgq.queue_pauses (queue) VALUES ('paused')")
    jobs: Sequence[Job] = claim(conn, ["paused", "open"], worker="w", limit=20)
    assert [j.queue for j in jobs] == ["open"] * 5
