"""Order keys on workflow steps and a batch's `then` job across two supervisors (issue 33,
migration 0068). Three workflows each chain two steps on key `k` after an unkeyed first step;
plain jobs of `k` are enqueued before and after them, a batch's `then` job joins `k` when the
batch ends, and some attempts fail once. On `k`, attempts never overlap; each workflow's chain
runs back to back (its second step, released into the key by the first one's ending, goes
before the key's later jobs); the plain jobs go in enqueue order; nothing is left of the key."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from supervisor import NewJob, Workflow, enqueue_batch, enqueue_many, enqueue_workflow
from tests.lifecycle.harness import Supervisor, query, wait_for
from tests.lifecycle.test_order_keys import CONFIG


def _hook(seconds: float, fail: bool = False, key: str | None = "k") -> NewJob:
    return NewJob("hook", {"seconds": seconds, "fail_once": fail}, order_key=key)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_steps_and_a_then_job_share_a_key_with_plain_jobs_one_at_a_time(
    supervisor: Callable[..., Supervisor], dsn: str
) -> None:
    chains: list[tuple[int, int]] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = enqueue_many(conn, [_hook(0.05, fail=n == 1) for n in range(4)])
        for n in range(3):
            wf = Workflow(f"w{n}")
            first = wf.add(_hook(0.1 * (n + 1), key=None))
            a = wf.add(_hook(0.05, fail=n == 0), after=[first])
            wf.add(_hook(0.05, fail=n == 2), after=[a])
            ids = enqueue_workflow(conn, wf).job_ids
            chains.append((ids[1], ids[2]))
        batch = enqueue_batch(conn, [_hook(0.1, key=None)] * 3, then=_hook(0.05))
        after = enqueue_many(conn, [_hook(0.05) for _ in range(6)])
        # A key of its own, running meanwhile: keys run in parallel.
        other = enqueue_many(conn, [_hook(0.2, key="other") for _ in range(3)])

    sups = [supervisor(CONFIG, extra_env={"PGQ_HOST": f"host{i}"}).start() for i in range(2)]
    wait_for(
        lambda: query(dsn, "SELECT count(*) FROM pgq.jobs")[0][0] == 0,
        timeout=180,
        what="every job to complete\n" + sups[0].log()[-3000:],
    )
    for sup in sups:
        assert sup.stop() == 0

    (then_id,) = query(dsn, "SELECT then_job_id FROM pgq.batches WHERE id = %s", (batch.id,))[0]
    on_k = {*before, *after, then_id, *(i for chain in chains for i in chain)}
    events = query(dsn, "SELECT job_id, attempt, event FROM test_ledger ORDER BY at")
    seen = [(j, a, e) for j, a, e in events if j in on_k]
    # Every job of k ran, and its attempts never overlapped: start, end, start, end...
    assert {j for j, _, e in seen if e == "finished"} == on_k
    starts = [j for j, _, e in seen if e == "started"]
    assert [e == "started" for _, _, e in seen] == [True, False] * len(starts)
    # Each chain back to back: the start after its first step's finish is its second step's.
    for a, b in chains:
        finished_at = max(i for i, (j, _, e) in enumerate(seen) if j == a and e == "finished")
        assert seen[finished_at + 1][:1] == (b,), (a, b, seen)
    # The plain jobs in enqueue order, before ones first; a retry holds its followers.
    plain = [j for j in starts if j in {*before, *after}]
    assert [j for i, j in enumerate(plain) if j not in plain[:i]] == [*before, *after]
    assert {j for j, _, e in events if e == "finished"} >= set(other)
    assert query(dsn, "SELECT count(*) FROM pgq.order_keys") == [(0,)]
