"""Priority aging under a real supervisor (issue 33): a low-priority job under a steady flood of
higher-priority work starts within its aging bound, not after the flood."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from supervisor import NewJob, enqueue, enqueue_many
from tests.lifecycle.harness import Supervisor, scalar, wait_for

CONFIG = """
handlers:
  sleep: tests.handlers:sleep
  record: tests.handlers:record
pools:
  work:
    processes: 2
    batch: 5
    queues: {default: 1}
aging: {every: 1s}
"""


def test_a_job_under_a_flood_of_higher_priority_work_starts_within_its_aging_bound(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    with psycopg.connect(ledger, autocommit=True) as conn:
        low = enqueue(conn, "record", {}, priority=0)
        # Then 4,000 jobs of 20 ms at priority 5, which keep two children busy for 40 s or
        # more: strict priority would start the low job last. Aged five levels (5 s), it
        # reaches the top, where its earlier run_at goes first.
        enqueue_many(conn, [NewJob("sleep", {"seconds": 0.02}, priority=5) for _ in range(4000)])
    supervisor(CONFIG).start()
    started = time.monotonic()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE job_id = %s", (low,)),
        timeout=60,
        what="the low-priority job",
    )
    took = time.monotonic() - started
    left = scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE kind = 'sleep'")
    # Five levels at a second each, plus the supervisor's start and a batch in hand (the
    # machine is shared: generous); and the flood was far from drained.
    assert took < 15, took
    assert left > 1000, left
