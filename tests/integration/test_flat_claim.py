"""A child's claims go flat (claim_builder.FLAT: no tenant walk) until one returns a tenant's
job, and share among tenants from the next claim on (issue 29, item 6)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, enqueue, enqueue_many
from supervisor.queue.claim_builder import FLAT_HEAD_FRESH, UNRECORDED, VARIANTS
from tests.child_worker import in_process_worker, spy_on_claim_variants

# Past the cursors, from the head (with or without completions, with or without history).
FLATS = tuple(name for name, v in VARIANTS.items() if v[3] != "walk")

CONFIG = """
handlers:
  sleep: tests.handlers:sleep
pools:
  main: {processes: 1, batch: 2, queues: {default: 1}}
"""


def _claimer(dsn: str, tmp_path: Path, config: str = CONFIG) -> Any:
    return in_process_worker(dsn, tmp_path, config).parts.claimer


@pytest.fixture
def variants(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The variant of every claim a child sends, in order."""
    return spy_on_claim_variants(monkeypatch)


def test_a_child_that_saw_no_tenant_claims_without_the_walk(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, variants: list[str]
) -> None:
    """The idle pickup's claims (no tenant, no limit, no aging) are the flat claim: the walk cost
    an idle child's claim of one job 1,158 us against 772 before tenants (idle_claim_cost.py)."""
    claimer = _claimer(dsn, tmp_path)
    try:
        assert claimer.claim(2) == []
        job = enqueue(conn, "sleep")
        assert [j.id for j in claimer.claim(2)] == [job]
        assert claimer.claim(2) == []
        assert len(variants) == 3 and set(variants) <= set(FLATS)
        # Idle, with nothing to complete: from the head, without the completions' steps.
        assert variants[0] == FLAT_HEAD_FRESH
    finally:
        claimer.session.discard()


def test_the_first_tenant_job_makes_the_next_claim_share_among_tenants(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, variants: list[str]
) -> None:
    """The flat claim takes a tenant's jobs in the global claim order; the first it takes
    switches the child to the walk, so its next claim is fair across tenants again."""
    claimer = _claimer(dsn, tmp_path)
    try:
        plain = enqueue(conn, "sleep")
        assert [j.id for j in claimer.claim(2)] == [plain]
        # Tenant a's jobs first (an earlier run_at), then b's: in the global order, all of a's
        # come before any of b's.
        a = enqueue_many(conn, [NewJob("sleep", tenant="a") for _ in range(4)])
        b = enqueue_many(conn, [NewJob("sleep", tenant="b") for _ in range(4)])
        assert [j.id for j in claimer.claim(2)] == a[:2]  # flat: the first two of a
        assert len(variants) == 2 and set(variants) <= set(FLATS)
        # From here on, the walk: a and b each give their share of the batch.
        shared = claimer.claim(2)
        assert sorted(j.tenant for j in shared) == ["a", "b"]
        assert variants[-1] == "claim_unlimited_unaged" + UNRECORDED  # CONFIG keeps no history
        assert {j.id for j in shared} <= set(a[2:]) | set(b)
        assert sorted(j.tenant for j in claimer.claim(2)) == ["a", "b"]
    finally:
        claimer.session.discard()


def test_a_pool_with_tenant_weights_walks_from_its_first_claim(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path, variants: list[str]
) -> None:
    weighted = CONFIG + "tenants:\n  default:\n    weights: {a: 2}\n"
    claimer = _claimer(dsn, tmp_path, weighted)
    try:
        claimer.claim(2)
        assert variants == ["claim_unlimited_unaged" + UNRECORDED]
    finally:
        claimer.session.discard()
