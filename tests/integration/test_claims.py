"""Claims are disjoint, ordered, index-served and fenced; outcomes write what they promise."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, claim, complete, enqueue, enqueue_many, settle
from supervisor.queue import outcomes
from supervisor.queue.claim_builder import VARIANTS
from supervisor.queue.jobs import (
    LeaseLost,
    claim_params,
    lease_held,
    read_claim,
    renew_leases,
    send_claim,
)
from supervisor.queue.maintenance import rescue
from supervisor.queue.queries import native, query
from supervisor.queue.scheduled import stage_due


def _state(conn: psycopg.Connection[Any], job_id: int) -> tuple[Any, ...]:
    return conn.execute(
        "SELECT state, attempts, last_error, args FROM pgq.jobs WHERE id = %s", (job_id,)
    ).fetchone()


def test_concurrent_claims_are_disjoint(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """The first seed's verification: 8 threads claim 1,000 jobs, each exactly once."""
    enqueue_many(conn, [NewJob("noop", {"i": i}) for i in range(1000)])
    claimed: list[int] = []
    lock = threading.Lock()

    def grab(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as mine:
            while jobs := claim(mine, "default", worker=f"w{n}", limit=25):
                with lock:
                    claimed.extend(j.id for j in jobs)

    threads = [threading.Thread(target=grab, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == 1000
    assert len(set(claimed)) == 1000


def test_claim_order_priority_then_run_at_then_id(conn: psycopg.Connection[Any]) -> None:
    low = enqueue(conn, "k", {"n": "low"}, priority=-1)
    first = enqueue(conn, "k", {"n": "first"})
    second = enqueue(conn, "k", {"n": "second"})
    high = enqueue(conn, "k", {"n": "high"}, priority=10)
    enqueue(conn, "k", {"n": "later"}, priority=100, delay=3600)
    enqueue(conn, "k", {"n": "other queue"}, queue="other", priority=100)
    jobs = claim(conn, "default", worker="w", limit=10)
    assert [j.id for j in jobs] == [high, first, second, low]
    assert all(j.attempts == 1 for j in jobs)


def test_each_claim_gets_a_fresh_fence(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, [NewJob("k") for _ in range(4)])
    a = claim(conn, "default", worker="w", limit=2)
    b = claim(conn, "default", worker="w", limit=2)
    assert len({j.lease_id for j in a}) == 1
    assert a[0].lease_id < b[0].lease_id


def test_claim_refuses_to_run_inside_the_callers_transaction(dsn: str) -> None:
    with (
        psycopg.connect(dsn) as app,
        app.transaction(),
        pytest.raises(RuntimeError, match="own short transaction"),
    ):
        claim(app, "default", worker="w")


def test_stale_worker_cannot_complete_after_rescue_and_reclaim(
    conn: psycopg.Connection[Any],
) -> None:
    """The second seed's ABA-free fence: worker A pauses past its lease, the rescuer hands the
    job to worker B; A's late completion matches nothing and A is told so."""
    job_id = enqueue(conn, "charge", {"order": 1})
    (stale,) = claim(conn, "default", worker="A")
    conn.execute("UPDATE pgq.jobs SET lease_until = now() - interval '1 second'")
    assert [m.id for m in rescue(conn)] == [job_id]
    (fresh,) = claim(conn, "default", worker="B")
    assert fresh.attempts == 2 and fresh.lease_id != stale.lease_id

    result = complete(conn, [stale])
    assert result.lost == [stale] and result.kept == []
    with pytest.raises(LeaseLost, match=f"charge job {job_id}"):
        result.raise_if_lost()
    failed = settle(conn, [outcomes.failure(stale, "late failure")])
    assert failed.lost == [stale]
    assert renew_leases(conn, [stale]).lost == [stale]
    assert not lease_held(conn, stale)
    assert _state(conn, job_id)[:2] == ("running", 2)

    assert lease_held(conn, fresh)
    assert complete(conn, [fresh]).kept == [fresh]
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0] == 0


def test_release_then_reclaim_does_not_reopen_the_old_fence(conn: psycopg.Connection[Any]) -> None:
    """Release gives the attempt back, so attempt numbers repeat; the lease id never does."""
    enqueue(conn, "k")
    (first,) = claim(conn, "default", worker="A")
    assert settle(conn, [outcomes.release(first)]).kept == [first]
    (again,) = claim(conn, "default", worker="A")
    assert again.attempts == first.attempts == 1
    assert complete(conn, [first]).lost == [first]
    assert complete(conn, [again]).kept == [again]


def test_failure_reschedules_with_backoff_and_keeps_the_error(
    conn: psycopg.Connection[Any],
) -> None:
    job_id = enqueue(conn, "k", max_attempts=3)
    (job,) = claim(conn, "default", worker="w")
    settle(conn, [outcomes.failure(job, "ValueError: boom")])
    state, attempts, error, _ = _state(conn, job_id)
    assert (state, attempts, error) == ("scheduled", 1, "ValueError: boom")
    (delay,) = conn.execute(
        "SELECT extract(epoch FROM run_at - now()) FROM pgq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert 0.5 <= float(delay) <= 2.0  # attempt 1: base 2 s, jittered to [1, 2] s
    assert claim(conn, "default", worker="w") == []  # not due yet


def test_discard_after_max_attempts_keeps_args_and_error(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "k", {"invoice": 42}, max_attempts=2)
    for attempt in (1, 2):
        conn.execute("UPDATE pgq.jobs SET run_at = now() WHERE id = %s", (job_id,))
        stage_due(conn)  # the retry waits as scheduled; the stager makes it available
        (job,) = claim(conn, "default", worker="w")
        assert job.attempts == attempt
        settle(conn, [outcomes.failure(job, f"RuntimeError: failure {attempt}")])
    state, attempts, error, args = _state(conn, job_id)
    assert state == "discarded"
    assert attempts == 2
    assert args == {"invoice": 42}
    assert error.startswith("RuntimeError: failure 2")
    assert "no attempts left" in error
    finished = conn.execute("SELECT finished_at FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert finished[0] is not None


def test_policy_max_attempts_wins_over_the_row(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "k", max_attempts=10)
    (job,) = claim(conn, "default", worker="w")
    settle(conn, [outcomes.failure(job, "boom", max_attempts=1)])
    assert _state(conn, job_id)[0] == "discarded"


def test_snooze_spends_no_attempt(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "k")
    (job,) = claim(conn, "default", worker="w")
    settle(conn, [outcomes.settlement_for(job, outcomes.Snooze(30))])
    state, attempts, error, _ = _state(conn, job_id)
    assert (state, attempts, error) == ("scheduled", 0, None)
    (wait,) = conn.execute(
        "SELECT extract(epoch FROM run_at - now()) FROM pgq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert 28 < float(wait) <= 30


def test_release_spends_no_attempt_and_keeps_its_place(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "k")
    (run_at,) = conn.execute("SELECT run_at FROM pgq.jobs").fetchone()
    (job,) = claim(conn, "default", worker="w")
    settle(conn, [outcomes.release(job)])
    assert _state(conn, job_id)[:2] == ("available", 0)
    assert conn.execute("SELECT run_at FROM pgq.jobs").fetchone()[0] == run_at


def test_typed_outcomes(conn: psycopg.Connection[Any]) -> None:
    ids = enqueue_many(conn, [NewJob("k", {"n": n}) for n in range(3)])
    jobs = claim(conn, "default", worker="w", limit=3)
    settle(
        conn,
        [
            outcomes.settlement_for(jobs[0], outcomes.Retry(120, "rate limited")),
            outcomes.settlement_for(jobs[1], outcomes.Discard("customer deleted")),
            outcomes.settlement_for(jobs[2], KeyError("missing")),
        ],
    )
    retried, discarded, failed = (_state(conn, i) for i in ids)
    assert retried[:3] == ("scheduled", 1, "retry requested: rate limited")
    assert discarded[:3] == ("discarded", 1, "discarded by handler: customer deleted")
    assert failed[0] == "scheduled" and "KeyError: 'missing'" in failed[2]


def test_backoff_grows_and_is_capped() -> None:
    import random

    rng = random.Random(7)
    for attempt in range(1, 30):
        delay = outcomes.backoff_delay(attempt, base=2.0, cap=3600.0, rng=rng)
        step = min(2.0 * 2 ** (attempt - 1), 3600.0)
        assert step / 2 <= delay <= step
    assert outcomes.backoff_delay(50, rng=rng) <= 3600.0
    lows = [outcomes.backoff_delay(a, rng=random.Random(0)) for a in (1, 2, 3, 4)]
    assert lows == sorted(lows)


def test_history_records_completions_and_discards(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, [NewJob("k", {"n": n}, max_attempts=1) for n in range(2)])
    done, dead = claim(conn, "default", worker="w", limit=2)
    complete(conn, [done], history=True)
    settle(conn, [outcomes.failure(dead, "boom")], history=True)
    rows = conn.execute("SELECT id, outcome, attempts FROM pgq.job_history ORDER BY id").fetchall()
    assert rows == [(done.id, "completed", 1), (dead.id, "discarded", 1)]


def _plan(conn: psycopg.Connection[Any], statement: str, params: dict[str, Any]) -> str:
    rows = conn.execute(f"EXPLAIN (FORMAT JSON) {statement}", params).fetchone()[0]
    return json.dumps(without_aged(rows))


def sorts_run(plan: str) -> list[str]:
    """The Sort nodes of an EXPLAIN ANALYZE text plan that ran: the aged pick's sort (a queue
    whose jobs age, sql/claim/aging.sql) is behind a one-time filter and never runs when no
    queue ages."""
    nodes = [line.strip().removeprefix("->").strip() for line in plan.splitlines()]
    return [n for n in nodes if n.startswith("Sort  (") and "never executed" not in n]


def without_aged(node: Any) -> Any:
    """A JSON plan without the subplans only a queue whose jobs age runs (the one-time filter
    on pool.aging > 0 gates them)."""
    if isinstance(node, list):
        return [without_aged(n) for n in node if not _aged(n)]
    if isinstance(node, dict):
        return {k: without_aged(v) for k, v in node.items()}
    return node


def _aged(node: Any) -> bool:
    return isinstance(node, dict) and "aging > " in str(node.get("One-Time Filter", ""))


def _generic_plan(conn: psycopg.Connection[Any], name: str, values: dict[str, Any]) -> str:
    """The plan PostgreSQL settles on for a statement psycopg has prepared (a generic plan, made
    without the parameters' values), run and rolled back."""
    statement, names = native(name)
    with conn.transaction(force_rollback=True):
        conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        conn.execute(f"PREPARE generic AS {statement}")
        placeholders = ", ".join(["%s"] * len(names))
        # EXECUTE takes no bound parameters: bind them client-side, as literals.
        explain = psycopg.ClientCursor(conn).execute(
            f"EXPLAIN (ANALYZE) EXECUTE generic({placeholders})", [values[n] for n in names]
        )
        plan = "\n".join(r[0] for r in explain)
    conn.execute("DEALLOCATE generic")
    return plan


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_prepared_claim_reads_the_rows_it_claims_by_key(
    conn: psycopg.Connection[Any], variant: str
) -> None:
    """psycopg prepares the claim after five runs, and PostgreSQL then weighs a generic plan,
    made without the parameters' values, which takes LIMIT for a tenth of the table. It must
    still look the claimed rows up by key, never hash the whole table to join them (it did:
    17 ms a claim at 20,000 jobs, so PostgreSQL kept planning it afresh at every run)."""
    conn.execute("INSERT INTO pgq.jobs (kind) SELECT 'k' FROM generate_series(1, 20000)")
    conn.execute("VACUUM ANALYZE pgq.jobs")
    batch = 1 if "_one" in variant else 10
    params = claim_params("default", worker="w", limit=batch, lease_seconds=60.0)
    generic = _generic_plan(conn, variant, params)
    assert "Seq Scan" not in generic, generic
    assert not sorts_run(generic), generic
    assert f"rows={batch} " in generic.split("Update on jobs")[1], generic


@pytest.mark.parametrize("variant", VARIANTS)
def test_claim_plan_uses_the_partial_index_without_sorting(
    conn: psycopg.Connection[Any], variant: str
) -> None:
    """With 100k discarded rows, a backlog in several queues and many tenants, the claim for a
    pool of a hundred queues reads jobs_claim_tenant in order: index scans, no Sort node, no
    sequential scan, whatever the history (`queue = ANY(...)` would read and sort the backlog).
    The flat claim (flat.sql) reads jobs_claim in order the same way, and never the walk's."""
    conn.execute(
        """
        INSERT INTO pgq.jobs (queue, kind, state, attempts, finished_at, last_error)
        SELECT 'default', 'k', 'discarded', 1, now(), 'old' FROM generate_series(1, 100000)
        """
    )
    conn.execute(
        """
        INSERT INTO pgq.jobs (queue, kind, priority, tenant)
        SELECT (ARRAY['default', 'pdf', 'webhooks'])[1 + g % 3], 'k', ((g / 1000) % 5)::smallint,
               CASE WHEN g % 7 > 0 THEN 'tenant-' || (g % 50) END
        FROM generate_series(1, 20000) AS g
        """
    )
    conn.execute("ANALYZE pgq.jobs")

    pool = [f"empty-{n}" for n in range(99)] + ["pdf"]
    params = claim_params(pool, worker="w", limit=10, lease_seconds=60.0)
    plan = _plan(conn, query(variant), params)
    if VARIANTS[variant][3] != "walk":  # a flat claim (flat.sql), with no tenant walk
        assert '"Index Name": "jobs_claim"' in plan
        assert '"Index Name": "jobs_claim_tenant"' not in plan
    else:
        assert '"Index Name": "jobs_claim_tenant"' in plan
    assert '"Node Type": "Sort"' not in plan
    assert '"Node Type": "Seq Scan"' not in plan
    if "_one" in variant:
        return
    jobs = read_claim(send_claim(conn, pool, worker="w", limit=10, variant=variant)).jobs
    if VARIANTS[variant][3] != "walk":  # a flat claim (flat.sql), with no tenant walk
        # The queue's ten best by the claim order, whatever their tenants.
        best = conn.execute(
            """
            SELECT id FROM pgq.jobs WHERE queue = 'pdf' AND state = 'available'
               OR id = ANY(%s)
            ORDER BY priority DESC, run_at, id LIMIT 10
            """,
            ([j.id for j in jobs],),
        ).fetchall()
        assert sorted(j.id for j in jobs) == sorted(r[0] for r in best)
        return
    # Ten tenants visited in tenant order from the start (no tenant is '', first), each giving
    # its best job: the highest priority it holds.
    assert [j.tenant for j in sorted(jobs, key=lambda j: j.tenant or "")] == [
        None,
        *sorted(f"tenant-{n}" for n in range(50))[:9],
    ]
    assert {j.priority for j in jobs} == {4}


@pytest.mark.parametrize("name", [*VARIANTS, "settle", "renew_leases"])
def test_fenced_writes_look_jobs_up_by_primary_key_even_in_a_generic_plan(
    conn: psycopg.Connection[Any], name: str
) -> None:
    """psycopg prepares statements it runs often, and PostgreSQL then settles on a generic plan.
    A fenced write planned around the small running-jobs index compared every id with every
    running job (measured: 4.6 ms against 0.26 ms for 100 of 200 running); it must stay a
    primary-key lookup per id."""
    enqueue_many(conn, [NewJob("k") for _ in range(2000)])
    conn.execute("ANALYZE pgq.jobs")
    jobs = claim(conn, "default", worker="w", limit=200)
    values = {
        # The claim statement completes finished jobs (and claims none here: limit 0).
        **claim_params("default", worker="w", limit=0, done=jobs),
        "ids": [j.id for j in jobs],
        "lease_ids": [j.lease_id for j in jobs],
        "history": False,
        "states": ["available"] * 200,
        "delays": [1.0] * 200,
        "refunds": [0] * 200,
        "errors": ["e"] * 200,
        "lease_seconds": 60.0,
    }
    plan = _generic_plan(conn, name, values)
    assert "jobs_pkey" in plan, plan
    assert "jobs_lease" not in plan, plan


def test_a_job_holds_a_lease_exactly_while_it_runs(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "k")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE pgq.jobs SET lease_id = 1 WHERE id = %s", (job_id,))
    claim(conn, "default", worker="w")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE pgq.jobs SET state = 'discarded' WHERE id = %s", (job_id,))
