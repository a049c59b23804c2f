"""The "read" items of issue 30 that need a real supervisor, each failing before its fix."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from supervisor import enqueue
from tests.lifecycle.harness import Supervisor, scalar, wait_for

LIMITED = """
handlers:
  record: tests.handlers:record
pools:
  main: {processes: 2, queues: {default: 1}}
limits:
  default: {concurrency: 1}
"""


def test_no_child_claims_before_its_limits_are_written(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """pgq.queue_limits cannot be written at start (here another session holds a lock on it that
    blocks writes, past the master's statement timeout; a role without rights is the same). A
    child that claimed meanwhile would start jobs the limits forbid: none may start until the
    write succeeds. Before, the first refused write let the children start without limits."""
    with psycopg.connect(ledger, autocommit=True) as conn:
        for n in range(3):
            enqueue(conn, "record", {"n": n})
    with psycopg.connect(ledger) as blocker:
        blocker.execute("LOCK TABLE pgq.queue_limits IN SHARE MODE")  # reads go on, writes wait
        sup = supervisor(LIMITED).start()
        sup.wait_log("could not be written to pgq.queue_limits", timeout=60)
        time.sleep(2.0)  # time enough for children to start and claim, were any forked
        assert scalar(ledger, "SELECT count(*) FROM test_ledger") == 0
        assert sup.children() == []
        blocker.rollback()
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM test_ledger") == 3, 60, what="3 runs")
    assert scalar(ledger, "SELECT concurrency FROM pgq.queue_limits WHERE queue = 'default'") == 1
    assert sup.stop() == 0
