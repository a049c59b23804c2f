"""Claims that start past the child's last job in each tenant (supervisor/child/cursors.py):
the order still holds, a job that arrives below a cursor is still claimed by the claim from the
head within the refresh (the pool's poll interval), and while a snapshot holds the xmin horizon
a claim does not read again the entries of the jobs already consumed."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, complete, enqueue_many
from supervisor.child.cursors import HEAD_AT_MOST, ClaimCursors
from supervisor.child.weights import TenantRotation
from supervisor.queue.claim_builder import FLAT
from supervisor.queue.job import Job
from supervisor.queue.jobs import claim, claim_params
from supervisor.queue.queries import query
from tests.integration.test_claims import _generic_plan, sorts_run, without_aged


class Child:
    """A child's claims on one queue, with its cursors and its clock in the test's hands."""

    def __init__(self, conn: psycopg.Connection[Any], refresh: float = 1.0) -> None:
        self.conn = conn
        self.cursors = ClaimCursors(refresh)
        self.tenants = TenantRotation()
        self.now = 0.0

    def claim(self, limit: int) -> list[Job]:
        resume = [self.tenants.resume("q")]
        cursors = self.cursors.for_claim(["q"], self.now)
        head_claim = not cursors
        jobs = claim(self.conn, ["q"], worker="w", limit=limit, resume=resume, cursors=cursors)
        # As if each claim from the head were dear (a held horizon): the next comes only at
        # the refresh, so the claims between start past the cursors (the dearest walk that
        # still comes then: dearer ones come HEAD_AT_MOST walks apart), or from near them
        # (a millisecond each: twenty of them apart).
        head = self.cursors.refresh / HEAD_AT_MOST
        self.cursors.observe(jobs, self.now, took=head if head_claim else 0.001)
        self.tenants.advance("q", resume[0], jobs)
        complete(self.conn, jobs)
        return jobs


def test_claims_past_the_cursor_keep_the_claim_order(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(
        conn,
        [NewJob("k", queue="q", priority=p) for p in (0, 5, 0, -3, 5, 0, -3, 0, 5, 0)] * 3,
    )
    child = Child(conn)
    got: list[Job] = []
    for n in range(12):
        got.extend(child.claim(3))
        if n == 3:  # a later arrival of the lowest priority: its key is past every cursor
            enqueue_many(conn, [NewJob("k", queue="q", priority=-3) for _ in range(2)])
    assert len(got) == 32
    assert [j.sort_key for j in got] == sorted(j.sort_key for j in got)
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_a_job_below_the_cursor_is_claimed_within_the_refresh(
    conn: psycopg.Connection[Any],
) -> None:
    """Jobs that become available with a key below the cursor (a higher priority, a run_at in
    the past: a staged scheduled job, a producer's late commit) are skipped by the claims past
    the cursor, and claimed by the claim from the head, which comes within the refresh."""
    enqueue_many(conn, [NewJob("k", queue="q") for _ in range(40)])
    child = Child(conn, refresh=1.0)
    child.claim(5)
    assert child.cursors.due_in(child.now) == 1.0
    old = conn.execute("SELECT now() - interval '1 hour'").fetchone()[0]
    urgent, late = enqueue_many(
        conn, [NewJob("urgent", queue="q", priority=10), NewJob("late", queue="q", run_at=old)]
    )
    claimed_at: dict[int, float] = {}
    while len(claimed_at) < 2 and child.now < 5.0:
        child.now += 0.25
        for job in child.claim(2):
            if job.id in (urgent, late):
                claimed_at[job.id] = child.now
    # Both found by the first claim from the head, at the refresh and not later.
    assert claimed_at == {urgent: 1.0, late: 1.0}


def test_a_late_commit_just_below_the_cursor_is_claimed_from_near_it(
    conn: psycopg.Connection[Any],
) -> None:
    """A producer's transaction that began before a sibling claimed past it commits its jobs
    below the cursors (their run_at is its start): the claims from near the cursors, twenty of
    their own walks apart, find it long before the refresh brings the claim from the head."""
    start = conn.execute("SELECT now() - interval '10 seconds'").fetchone()[0]
    enqueue_many(
        conn, [NewJob("k", queue="q", run_at=start + timedelta(seconds=n / 10)) for n in range(60)]
    )
    child = Child(conn, refresh=1.0)
    child.claim(20)  # from the head: the cursor is at the 20th job, 2 s after the first
    late = enqueue_many(conn, [NewJob("late", queue="q", run_at=start + timedelta(seconds=1.5))])[0]
    claimed_at = None
    while claimed_at is None and child.now < 2.0:
        child.now += 0.01
        if any(job.id == late for job in child.claim(1)):
            claimed_at = child.now
    # The first claim from near comes twenty cheap walks after the head's (0.1 s); the next
    # claim from the head would come at the refresh.
    assert claimed_at is not None and claimed_at < 0.15, claimed_at


def test_an_idle_child_waits_no_longer_than_the_refresh(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, [NewJob("k", queue="q") for _ in range(3)])
    child = Child(conn, refresh=1.0)
    assert child.cursors.due_in(0.0) is None  # no cursor yet: every claim is from the head
    child.claim(10)
    child.now = 0.4
    assert child.claim(10) == []
    assert child.cursors.due_in(child.now) == 0.6


def test_cursors_follow_each_tenant_and_rotation_still_shares(
    conn: psycopg.Connection[Any],
) -> None:
    enqueue_many(
        conn,
        [NewJob("k", queue="q", tenant=t) for t in ("a", "b", "c") for _ in range(20)]
        + [NewJob("k", queue="q") for _ in range(20)],
    )
    child = Child(conn, refresh=3600.0)
    tenants = [j.tenant for _ in range(40) for j in child.claim(1)]
    # One job per claim, tenant after tenant (no tenant, '', sorts first), every tenant's jobs
    # in order: the cursors change where each tenant's claim starts, not who is visited.
    assert tenants == [None, "a", "b", "c"] * 10
    keys = {c[1] for c in child.cursors.for_claim(["q"], 0.0)}
    assert keys == {"", "a", "b", "c"}
    # A tenant with nothing past its cursor is stepped over; a new tenant is found between.
    conn.execute("DELETE FROM pgq.jobs WHERE tenant = 'b'")
    enqueue_many(conn, [NewJob("k", queue="q", tenant="b2")])
    assert [j.tenant for _ in range(4) for j in child.claim(1)] == [None, "a", "b2", "c"]


def _entries_read(
    conn: psycopg.Connection[Any], params: dict[str, Any], variant: str = "claim"
) -> int:
    """Entries of the claim indexes one claim reads (live or not), run and rolled back: the
    walk's jobs_claim_tenant, the flat claim's jobs_claim."""

    def read() -> int:
        conn.execute("SELECT pg_stat_force_next_flush()")
        row = conn.execute(
            "SELECT sum(idx_tup_read) FROM pg_stat_user_indexes "
            "WHERE indexrelname IN ('jobs_claim_tenant', 'jobs_claim')"
        ).fetchone()
        return int(row[0])

    before = read()
    with conn.transaction(force_rollback=True):
        conn.execute(query(variant), params)
    return read() - before


@pytest.mark.parametrize("variant", ["claim", FLAT])
def test_while_the_horizon_is_held_a_claim_past_the_cursor_does_not_grow(
    dsn: str, variant: str
) -> None:
    """Every consumed job leaves an entry in the claim index that no one may remove while an
    older snapshot is open; a claim from the head visits all of them, one past the cursor only
    the few after it, however many were consumed. The flat claim (flat.sql) too: past the
    cursor of the jobs without a tenant (issue 36)."""
    with (
        psycopg.connect(dsn, autocommit=True) as conn,
        psycopg.connect(dsn) as reader,
    ):
        enqueue_many(conn, [NewJob("k", queue="q") for _ in range(4000)])
        conn.execute("VACUUM ANALYZE pgq.jobs")
        reader.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        reader.execute("SELECT count(*) FROM pgq.jobs")  # the snapshot, held from here
        child = Child(conn, refresh=3600.0)
        cost: dict[int, tuple[int, int]] = {}
        consumed = 0
        for target in (500, 3000):
            while consumed < target:
                consumed += len(child.claim(100))
            past = claim_params(
                "q", worker="w", limit=10, cursors=child.cursors.for_claim(["q"], 0.0)
            )
            head = claim_params("q", worker="w", limit=10)
            cost[target] = (
                _entries_read(conn, past, variant),
                _entries_read(conn, head, variant),
            )
        reader.rollback()
    (past_500, head_500), (past_3000, head_3000) = cost[500], cost[3000]
    assert head_3000 > 3 * head_500, cost  # from the head: grows with what was consumed
    assert past_3000 <= past_500 + 5, cost  # past the cursor: flat
    assert past_3000 * 10 < head_3000, cost


def test_a_prepared_claim_with_cursors_reads_indexes_in_order(
    conn: psycopg.Connection[Any],
) -> None:
    enqueue_many(conn, [NewJob("k", queue="q", tenant=f"t{n % 5}") for n in range(2000)])
    conn.execute("VACUUM ANALYZE pgq.jobs")
    jobs = claim(conn, "q", worker="w", limit=10)
    cursors = [("q", j.tenant or "", j.priority, j.run_at, j.id) for j in jobs]
    cursors.sort(key=lambda c: c[1])
    # The generic plan PostgreSQL may settle on once psycopg prepares the claim, for a pool of
    # a hundred queues with the busy one last: index reads in order, no sort, no sequential scan.
    pool = [f"empty-{n}" for n in range(99)] + ["q"]
    params = claim_params(pool, worker="w", limit=10, lease_seconds=60.0, cursors=cursors[:3])
    generic = _generic_plan(conn, "claim", params)
    assert "Seq Scan" not in generic, generic
    assert not sorts_run(generic), generic
    assert "rows=10 " in generic.split("Update on jobs")[1], generic
    plan = json.dumps(
        without_aged(conn.execute(f"EXPLAIN (FORMAT JSON) {query('claim')}", params).fetchone())
    )
    assert "jobs_claim_tenant" in plan


def test_a_prepared_flat_claim_past_its_cursor_reads_jobs_claim_in_order(
    conn: psycopg.Connection[Any],
) -> None:
    enqueue_many(conn, [NewJob("k", queue="q", priority=n % 3) for n in range(2000)])
    conn.execute("VACUUM ANALYZE pgq.jobs")
    job = claim(conn, "q", worker="w", limit=10)[-1]
    pool = [f"empty-{n}" for n in range(99)] + ["q"]
    cursors = [("q", "", job.priority, job.run_at, job.id)]
    params = claim_params(pool, worker="w", limit=10, lease_seconds=60.0, cursors=cursors)
    generic = _generic_plan(conn, FLAT, params)
    assert "Seq Scan" not in generic, generic
    assert not sorts_run(generic), generic
    assert "jobs_claim_tenant" not in generic, generic
    assert "rows=10 " in generic.split("Update on jobs")[1], generic
