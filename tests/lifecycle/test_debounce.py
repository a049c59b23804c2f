"""Debounce under a real supervisor (issue 33): a burst of debounced enqueues of one key runs
once, with the last arguments, a moment after the last enqueue."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import psycopg

from supervisor import enqueue
from tests.lifecycle.harness import Supervisor, query, wait_for

CONFIG = """
handlers:
  record_args: tests.handlers:record_args
pools:
  docs:
    processes: 2
    queues: {default: 1}
"""


def test_two_hundred_debounced_enqueues_in_two_seconds_run_once_with_the_last_arguments(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    supervisor(CONFIG).start()
    ids = set()
    with psycopg.connect(ledger, autocommit=True) as conn:
        started = time.monotonic()
        for n in range(200):
            ids.add(enqueue(conn, "record_args", {"n": n}, unique_key="doc:7", debounce=0.5))
            # 200 enqueues spread over two seconds: each well inside the last one's debounce.
            time.sleep(max(0.0, started + (n + 1) * 0.01 - time.monotonic()))
        last = time.monotonic()
    assert len(ids) == 1
    rows = wait_for(
        lambda: query(ledger, "SELECT job_id, event FROM test_ledger"), timeout=30, what="the run"
    )
    ran_after = time.monotonic() - last
    time.sleep(1.5)  # nothing else runs later
    rows = query(ledger, "SELECT job_id, event FROM test_ledger")
    assert rows == [(ids.pop(), json.dumps({"n": 199}))]
    assert ran_after >= 0.3, ran_after  # it waited for the burst to end, not for the first job
