"""The "read" items of issue 30 that need a real supervisor, each failing before its fix."""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg

from supervisor import enqueue
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

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


INLINE = """
handlers:
  sleep: tests.handlers:sleep
pools:
  main: {processes: 1, batch: 1, queues: {default: 1}}
shutdown_timeout: 10s
"""


def test_a_cancel_stop_that_reaches_a_child_on_another_job_stops_nothing(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """The cancel watch named the job on the child's board and then stopped the child's whole
    process group: a child that had moved on to another job in between was stopped on that
    innocent job (drained, its subprocesses signalled, killed past the grace). Now the stop is a
    question the child answers from its board, for the job in hand: here it holds a job nobody
    cancelled, so the job runs to its end and the child stays."""
    from supervisor.services.cancel_watch import CANCEL_SIGNAL

    sup = supervisor(INLINE).start()
    with psycopg.connect(ledger, autocommit=True) as conn:
        innocent = enqueue(conn, "sleep", {"seconds": 2.0})
    events = "SELECT event FROM test_ledger WHERE job_id = %s ORDER BY at"
    wait_for(lambda: scalar(ledger, events, (innocent,)) == "started", what="the job started")
    (child,) = sup.children()
    child.send_signal(CANCEL_SIGNAL)
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, 30, what="completed")
    assert [e for (e,) in query(ledger, events, (innocent,))] == ["started", "finished"]
    assert [c.pid for c in sup.children()] == [child.pid]
    assert sup.stop() == 0
