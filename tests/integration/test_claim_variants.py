"""The claim's variants (supervisor.queue.claim_builder) claim what the claim with every step
claims, and the variants without limits step aside once a limit exists."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from supervisor import NewJob, complete, enqueue_many
from supervisor.queue.claim_builder import VARIANTS, variant
from supervisor.queue.jobs import Claimed, read_claim, send_claim
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


@pytest.mark.parametrize("name", [n for n in VARIANTS if n != "claim"])
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


def test_the_child_chooses_the_leanest_variant_that_is_right() -> None:
    assert variant(limits=True, batch=10, aging=True) == "claim"
    assert variant(limits=True, batch=1, aging=True) == "claim_one"
    assert variant(limits=False, batch=10, aging=True) == "claim_unlimited"
    assert variant(limits=False, batch=1, aging=True) == "claim_one_unlimited"
    assert variant(limits=True, batch=10, aging=False) == "claim_unaged"
    assert variant(limits=False, batch=1, aging=False) == "claim_one_unlimited_unaged"
    assert len(VARIANTS) == 8


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
