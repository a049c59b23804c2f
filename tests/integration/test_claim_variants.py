"""The claim's variants (supervisor.queue.claim_builder) claim what the claim with every step
claims, and the variants without limits step aside once a limit exists."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, complete, enqueue_many
from supervisor.queue.claim_builder import (
    FLAT,
    FLAT_HEAD,
    FLAT_HEAD_FRESH,
    UNRECORDED,
    VARIANTS,
    carrying,
    variant,
)
from supervisor.queue.jobs import Claimed, Fenced, read_claim, send_claim
from supervisor.queue.limits import Limits, write_limits


def _backlog(conn: psycopg.Connection[Any]) -> None:
    # Three queues, tenants of uneven sizes, three priorities, some jobs not yet due.
    enqueue_many(
        conn,
        [
            NewJob(
                "k",
                queue=("a", "b", "c")[n % 3],
                tenant=None if n % 5 == 0 else f"t{n % 4}",
                priority=n % 3,
                delay=3600.0 if n % 11 == 0 else 0.0,
            )
            for n in range(300)
        ],
    )


def _claim(conn: psycopg.Connection[Any], name: str, limit: int, **kw: Any) -> Claimed:
    with conn.transaction(force_rollback=True):
        return read_claim(
            send_claim(
                conn,
                ["b", "a", "c"],
                worker="w",
                limit=limit,
                variant=name,
                resume=["t2", "", "t1"],
                **kw,
            )
        )


# The variants that walk the tenants (the flat ones claim in the global order instead).
WALKING = [n for n, v in VARIANTS.items() if v[3] == "walk"]


@pytest.mark.parametrize("name", [n for n in WALKING if n != "claim"])
def test_every_variant_claims_what_the_whole_claim_claims(
    conn: psycopg.Connection[Any], name: str
) -> None:
    _backlog(conn)
    limits = [1] if "_one" in name else [1, 7, 10, 40]
    for limit in limits:
        whole = _claim(conn, "claim", limit)
        assert len(whole.jobs) == limit
        mine = _claim(conn, name, limit)
        assert [j.id for j in mine.jobs] == [j.id for j in whole.jobs], (name, limit)
        assert not mine.limits_found
    # Past a cursor too: the key of a job in the middle of tenant t1 of queue b.
    job = _claim(conn, "claim", 40).jobs[5]
    cursor = (job.queue, job.tenant or "", job.priority, job.run_at, job.id)
    for limit in limits:
        whole = _claim(conn, "claim", limit, cursors=[cursor])
        mine = _claim(conn, name, limit, cursors=[cursor])
        assert [j.id for j in mine.jobs] == [j.id for j in whole.jobs], (name, limit, cursor)


@pytest.mark.parametrize("name", [n for n in VARIANTS if "_unlimited" in n])
def test_a_variant_without_limits_claims_nothing_once_a_limit_exists(
    conn: psycopg.Connection[Any], name: str
) -> None:
    _backlog(conn)
    conn.execute(
        "INSERT INTO pgq.queue_limits (queue, concurrency, set_by) VALUES ('elsewhere', 1, 't')"
    )
    got = _claim(conn, name, 1)
    assert got.jobs == [] and got.limits_found
    assert len(_claim(conn, "claim", 1).jobs) == 1


def _in_claim_order(
    conn: psycopg.Connection[Any], queues: list[str], past: Any = None
) -> list[int]:
    """Every due job of ``queues``, queue by queue, each in the claim order across its tenants
    (priority, run_at, id); past ``past`` (a cursor's key) in its queue."""
    ids: list[int] = []
    for queue in queues:
        rows = conn.execute(
            """
            SELECT id, priority, run_at FROM pgq.jobs
            WHERE state = 'available' AND queue = %s AND run_at <= now()
            ORDER BY priority DESC, run_at, id
            """,
            (queue,),
        ).fetchall()
        if past is not None and past[0] == queue:
            key = (-past[2], past[3], past[4])
            rows = [r for r in rows if (-r[1], r[2], r[0]) > key]
        ids += [r[0] for r in rows]
    return ids


def test_the_flat_claim_takes_the_queues_jobs_in_claim_order_across_tenants(
    conn: psycopg.Connection[Any],
) -> None:
    """The claim without the tenant walk (flat.sql) claims each queue's best due jobs whatever
    their tenants, the pool's queues in order; past the cursor of a queue's jobs without a
    tenant when the child sends one (a cursor of another tenant changes nothing)."""
    _backlog(conn)
    everything = _in_claim_order(conn, ["b", "a", "c"])
    for limit in (1, 7, 10, 40, 150):
        for name in (FLAT, FLAT_HEAD, FLAT_HEAD_FRESH):
            mine = _claim(conn, name, limit)
            assert sorted(j.id for j in mine.jobs) == sorted(everything[:limit]), (name, limit)
            assert not mine.limits_found
    jobs = _claim(conn, "claim", 40).jobs
    job = next(j for j in jobs[5:] if j.tenant is None)
    other = next(j for j in jobs if j.tenant is not None)
    cursor = (job.queue, "", job.priority, job.run_at, job.id)
    ignored = (other.queue, other.tenant or "", other.priority, other.run_at, other.id)
    past = _in_claim_order(conn, ["b", "a", "c"], past=cursor)
    assert len(past) < len(everything)
    for limit in (1, 10, 40):
        mine = _claim(conn, FLAT, limit, cursors=sorted([cursor, ignored], key=lambda c: c[1]))
        assert sorted(j.id for j in mine.jobs) == sorted(past[:limit]), limit
    # From near the cursor (cursors.py's NEAR: an earlier run_at, id 0): from that key on.
    near = (job.queue, "", job.priority, job.run_at - timedelta(seconds=2), 0)
    got = _claim(conn, FLAT, 300, cursors=[near]).jobs
    assert {j.id for j in got} == set(_in_claim_order(conn, ["b", "a", "c"], past=near))


@pytest.mark.parametrize("name", [FLAT, FLAT_HEAD, FLAT_HEAD_FRESH])
def test_the_flat_claim_skips_a_paused_queue(conn: psycopg.Connection[Any], name: str) -> None:
    _backlog(conn)
    conn.execute("INSERT INTO pgq.queue_pauses (queue) VALUES ('b')")
    got = _claim(conn, name, 10).jobs
    assert len(got) == 10
    assert {j.queue for j in got} == {"a"}


def test_the_child_chooses_the_leanest_variant_that_is_right() -> None:
    assert variant(limits=True, batch=10, aging=True) == "claim"
    assert variant(limits=True, batch=1, aging=True) == "claim_one"
    assert variant(limits=False, batch=10, aging=True) == "claim_unlimited"
    assert variant(limits=False, batch=1, aging=True) == "claim_one_unlimited"
    assert variant(limits=True, batch=10, aging=False) == "claim_unaged"
    assert variant(limits=False, batch=1, aging=False) == "claim_one_unlimited_unaged"
    # No tenant seen yet: the flat claim, for any batch, only without limits and aging.
    assert variant(limits=False, batch=10, aging=False, tenants=False) == FLAT
    assert variant(limits=False, batch=1, aging=False, tenants=False) == FLAT
    assert variant(limits=False, batch=10, aging=False, tenants=False, cursors=False) == FLAT_HEAD
    assert variant(limits=True, batch=10, aging=False, tenants=False) == "claim_unaged"
    assert variant(limits=False, batch=10, aging=True, tenants=False) == "claim_unlimited"
    # Sent without completions, the claim from the head leaves their steps out (carrying).
    assert carrying(FLAT_HEAD, done=False) == FLAT_HEAD_FRESH
    assert carrying(FLAT_HEAD, done=True) == FLAT_HEAD
    assert carrying(FLAT, done=False) == FLAT
    # A child without history sends each carrying claim without the history's steps.
    assert carrying(FLAT, done=True, history=False) == FLAT + UNRECORDED
    assert carrying("claim_one", done=False, history=False) == "claim_one" + UNRECORDED
    assert carrying(FLAT_HEAD, done=False, history=False) == FLAT_HEAD_FRESH
    assert len(VARIANTS) == 21


def test_the_claim_without_completions_claims_and_says_so(conn: psycopg.Connection[Any]) -> None:
    """Its reply has the same columns: the jobs, then a last row completing nothing."""
    _backlog(conn)
    fresh, head = _claim(conn, FLAT_HEAD_FRESH, 10), _claim(conn, FLAT_HEAD, 10)
    assert [j.id for j in fresh.jobs] == [j.id for j in head.jobs]
    assert fresh.completed == Fenced() and fresh.limit_wait is None and not fresh.limits_found


def test_a_queue_at_its_limit_keeps_the_first_jobs_the_walk_found(
    conn: psycopg.Connection[Any],
) -> None:
    """The caps keep a queue's allowance of what the pick locked, the first in claim order
    (pick.sql's numbered; promises' 3a605e4, carried into the pieces): each claim the next
    jobs by priority, none skipped, none early."""
    write_limits(conn, [Limits("hooks", concurrency=2)], ["hooks"], "test")
    jobs = [NewJob("k", {"n": n}, queue="hooks", priority=p) for n, p in enumerate([0, 5, 3, 9])]
    ids = enqueue_many(conn, jobs)
    seen: list[int] = []
    while len(seen) < 4:
        claimed = read_claim(send_claim(conn, "hooks", worker="w", limit=4))
        assert len(claimed.jobs) <= 2
        seen += [j.id for j in sorted(claimed.jobs, key=lambda j: -j.priority)]
        complete(conn, claimed.jobs)
    assert seen == [ids[3], ids[1], ids[2], ids[0]]
