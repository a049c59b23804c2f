"""Lease renewal by key (services/leases.py): the master renews the claims each child shows on
its board, so every job a child holds keeps its lease: the one running, the ones of its batch
waiting to start, and the finished ones whose outcome is not written yet."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

pytestmark = pytest.mark.slow


def test_the_jobs_of_a_batch_waiting_to_start_keep_their_leases(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    with psycopg.connect(ledger, autocommit=True) as conn:
        ids = enqueue_many(conn, [NewJob("busy", {"seconds": 2.5}) for _ in range(3)])
    sup = supervisor("""
        handlers: {busy: tests.handlers:busy}
        pools:
          cpu: {processes: 1, batch: 3, queues: {default: 1}}
        lease: {duration: 2s, renew_every: 500ms}
        rescue: {interval: 1s}
    """).start()
    # The third waits 5 s to start, more than twice its lease.
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE event = 'finished'") == 3,
        timeout=60,
        what="the batch finished",
    )
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, what="completed")
    runs = query(
        ledger,
        "SELECT job_id, count(*) FROM test_ledger WHERE event = 'started'"
        " GROUP BY job_id ORDER BY job_id",
    )
    assert runs == [(i, 1) for i in ids]
    log = sup.log()
    assert "lease expired" not in log and "lease lost" not in log
    sup.stop()
