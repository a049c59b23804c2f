"""Stops that are not a clean drain, and recycling (issue 11, item 10: promises with no test).

The fast stop (a second SIGTERM or SIGINT, or SIGQUIT) kills every child at once and gives
their jobs back; a drain that outlives ``shutdown_timeout`` is cut short the same way; a child
recycles itself after ``max_jobs``. The real CLI, real signals, a real database.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import psutil
import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

CONFIG = """
handlers:
  sleep: tests.handlers:sleep
  record: tests.handlers:record
pools:
  main:
    processes: 2
    queues: {default: 1}
shutdown_timeout: SHUTDOWN
"""


def _enqueue(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, jobs)


def _started(dsn: str) -> int:
    return scalar(dsn, "SELECT count(*) FROM test_ledger WHERE event = 'started'")


def _assert_given_back(dsn: str, ids: list[int]) -> None:
    """Both jobs were running when their children were killed: back in the queue, the attempt
    spent (the job may be what had to be killed), nothing left running."""
    rows = query(dsn, "SELECT id, state, attempts FROM pgq.jobs ORDER BY id")
    assert rows == [(i, "available", 1) for i in sorted(ids)]


@pytest.mark.parametrize(
    "signals",
    [(signal.SIGTERM, signal.SIGTERM), (signal.SIGINT, signal.SIGINT), (signal.SIGQUIT,)],
    ids=["second-sigterm", "second-sigint", "sigquit"],
)
def test_the_fast_stop_kills_every_child_and_gives_their_jobs_back(
    supervisor: Callable[..., Supervisor], ledger: str, signals: tuple[signal.Signals, ...]
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 120}) for _ in range(2)])
    sup = supervisor(CONFIG.replace("SHUTDOWN", "120s")).start()
    children = sup.wait_children(2)
    wait_for(lambda: _started(ledger) == 2, what="both jobs started")
    began = time.monotonic()
    first, *then = signals
    sup.send(first)
    for signum in then:
        sup.wait_log("draining 2 children")  # the first one was taken as a drain
        sup.send(signum)
    assert sup.wait(30) == 0
    # Neither the jobs' 120 s nor the 120 s shutdown_timeout: stopped now.
    assert time.monotonic() - began < 20
    assert not [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    _assert_given_back(ledger, ids)
    assert "stopping now; killing 2 children" in sup.log()


def test_shutdown_timeout_running_out_kills_and_gives_back(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 120}) for _ in range(2)])
    sup = supervisor(CONFIG.replace("SHUTDOWN", "2s")).start()
    sup.wait_children(2)
    wait_for(lambda: _started(ledger) == 2, what="both jobs started")
    began = time.monotonic()
    sup.send(signal.SIGTERM)
    assert sup.wait(30) == 0
    took = time.monotonic() - began
    assert 2 <= took < 20  # the drain was waited for, up to shutdown_timeout, then cut short
    _assert_given_back(ledger, ids)
    assert "still running at the end of the shutdown timeout" in sup.log()


def test_max_jobs_recycles_the_child(supervisor: Callable[..., Supervisor], ledger: str) -> None:
    ids = _enqueue(ledger, [NewJob("record") for _ in range(30)])
    config = CONFIG.replace("SHUTDOWN", "10s").replace(
        "processes: 2", "processes: 1\n    max_jobs: 5"
    )
    sup = supervisor(config).start()
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, 60, what="drain")
    pids = query(ledger, "SELECT pid, count(*) FROM test_ledger GROUP BY pid")
    # 30 jobs at about 5 per child (jittered by up to 10%): six children or so, none past 6.
    assert len(pids) >= 5
    assert max(n for _, n in pids) <= 6
    assert scalar(ledger, "SELECT count(DISTINCT job_id) FROM test_ledger") == len(ids)
    assert sup.stop() == 0
    assert "max_jobs" in sup.log()
