"""Priority aging in the claim (issue 33), on a real database: a due job rises one priority
level per period waited past its run_at, never past its tenant's highest waiting priority, and
among equal effective priorities the earlier run_at goes first. Nothing is written while jobs
wait: the claim computes the effective priority from run_at."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import claim, enqueue
from supervisor.queue.jobs import claim_params
from supervisor.queue.queries import query
from tests.integration.operator_helpers import CONFIG, Cli


def _job(conn: psycopg.Connection[Any], kind: str, priority: int, waited: float, **kw: Any) -> int:
    job_id = enqueue(conn, kind, {}, priority=priority, **kw)
    conn.execute(
        "UPDATE pgq.jobs SET run_at = now() - make_interval(secs => %s) WHERE id = %s",
        (waited, job_id),
    )
    return job_id


def _order(conn: psycopg.Connection[Any], aging: dict[str, float] | None, n: int) -> list[str]:
    """The kinds claimed one claim at a time (the order the claim chose), then given back."""
    kinds = [
        job.kind
        for _ in range(n)
        for job in claim(conn, "default", worker="h:1:a", limit=1, aging=aging)
    ]
    _give_back(conn)
    return kinds


def _give_back(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "UPDATE pgq.jobs SET state = 'available', lease_id = NULL, locked_by = NULL, "
        "lease_until = NULL, attempts = 0, started_at = NULL WHERE state = 'running'"
    )


def test_a_waiting_job_rises_a_level_per_period(conn: psycopg.Connection[Any]) -> None:
    _job(conn, "high", 5, 1)
    _job(conn, "high2", 5, 0)
    _job(conn, "mid", 3, 25)  # 3 + floor(25 / 10) = 5: the top, and older than the highs
    _job(conn, "low", 0, 95)  # 0 + 9, capped at 5: the oldest of the top
    _job(conn, "young", 0, 15)  # 0 + 1
    assert _order(conn, None, 5) == ["high", "high2", "mid", "low", "young"]
    assert _order(conn, {"default": 10.0}, 5) == ["low", "mid", "high", "high2", "young"]
    # Another queue's aging, or a period of 0, leaves this one alone.
    assert _order(conn, {"other": 10.0}, 2) == ["high", "high2"]
    assert _order(conn, {"default": 0.0}, 2) == ["high", "high2"]
    # Nothing was written: the priorities are as enqueued.
    assert conn.execute("SELECT array_agg(priority ORDER BY id) FROM pgq.jobs").fetchone() == (
        [5, 5, 3, 0, 0],
    )


def test_a_job_never_rises_past_the_highest_waiting_priority(
    conn: psycopg.Connection[Any],
) -> None:
    # Uncapped, "fresh_top" (5 + 3 = 8) would beat "old_low" (0 + 7); both are capped at 5,
    # and then the earlier run_at goes first.
    _job(conn, "fresh_top", 5, 30)
    _job(conn, "old_low", 0, 70)
    assert _order(conn, {"default": 10.0}, 2) == ["old_low", "fresh_top"]


def test_partly_aged_jobs_sit_between_the_levels(conn: psycopg.Connection[Any]) -> None:
    _job(conn, "p3", 3, 0)
    _job(conn, "p2", 2, 1)
    _job(conn, "aged_to_2", 0, 25)  # 0 + 2: level 2, older than p2
    _job(conn, "p1", 1, 2)
    assert _order(conn, {"default": 10.0}, 4) == ["p3", "aged_to_2", "p2", "p1"]


def test_aging_stays_inside_a_tenant_and_a_batch_takes_the_best(
    conn: psycopg.Connection[Any],
) -> None:
    for n in range(5):
        _job(conn, f"a_high{n}", 5, 0, tenant="a")
    _job(conn, "a_old", 0, 100, tenant="a")
    _job(conn, "b_one", 0, 0, tenant="b")
    kinds = {j.kind for j in claim(conn, "default", worker="w", limit=4, aging={"default": 10.0})}
    # Two tenants share the batch; inside a, the aged job is among its best.
    assert "a_old" in kinds and "b_one" in kinds


def test_the_aged_claim_reads_the_index(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "INSERT INTO pgq.jobs (kind, priority) "
        "SELECT 'k', (g % 5)::smallint FROM generate_series(1, 20000) AS g"
    )
    conn.execute("ANALYZE pgq.jobs")
    params = claim_params(
        "default", worker="w", limit=10, lease_seconds=60.0, aging={"default": 10.0}
    )
    plan = str(conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + query("claim"), params).fetchone())
    # The levels' skip scan and their heads read jobs_claim_tenant; nothing reads the table.
    assert "Seq Scan" not in plan
    assert "jobs_claim_tenant" in plan


def test_jobs_show_says_how_far_a_waiting_job_has_aged(
    cli: Cli, conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(tmp_path, capsys, CONFIG + "aging: {every: 10s, queues: {webhooks: 0s}}\n", "aged")
    _job(conn, "render_pdf", 5, 0, queue="pdf")
    low = _job(conn, "render_pdf", 0, 25, queue="pdf")
    top = _job(conn, "render_pdf", 1, 100, queue="pdf")
    shown = cli("jobs", "show", str(low)).out
    assert "aging       +2 level(s) (one per 10s waited): effective priority 2, capped at 5" in (
        shown
    )
    assert "at its tenant's highest waiting priority (5)" in cli("jobs", "show", str(top)).out
    document = cli("jobs", "show", str(low), "--json").json()
    assert document["aging"]["levels"] == 2 and document["aging"]["cap"] == 5
    # A queue that does not age, or a job that does not wait, shows no aging.
    hook = _job(conn, "deliver_webhook", 0, 100, queue="webhooks")
    assert "aging" not in cli("jobs", "show", str(hook)).out
    assert cli("jobs", "show", str(hook), "--json").json()["aging"] is None
