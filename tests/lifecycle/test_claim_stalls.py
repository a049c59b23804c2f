"""A claim from the head that stalls behind a row lock (issue 30, item 4).

The child carries a finished job's outcome in its next claim. Someone holds that job's row (an
operator's open transaction), so the claim waits; a higher-priority job committed during the
wait lies below the cursor the claim then leaves. Before the change the claim waited out the
whole 15 s lock, and the next claim from the head came four times that later: the job stayed
hidden for about 60 s. Now the child's lock_timeout cuts the claim short, the outcome waits its
turn in the completer (written once the lock is gone: nothing lost), and the job below the
cursor is claimed within seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

pytestmark = pytest.mark.slow

LOCK_HELD = 15.0


def _started(dsn: str, job_id: int) -> float | None:
    """When the job's handler started (the database's clock, epoch seconds)."""
    value = scalar(
        dsn,
        "SELECT extract(epoch FROM min(at))::float8 FROM test_ledger"
        " WHERE job_id = %s AND event = 'started'",
        (job_id,),
    )
    return float(value) if value is not None else None


def test_a_job_below_the_cursor_is_found_within_seconds_through_a_stalled_claim(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor("""
        handlers: {sleep: tests.handlers:sleep}
        pools:
          main: {processes: 1, batch: 1, poll_interval: 1s, queues: {default: 1}}
    """).start()
    with psycopg.connect(ledger, autocommit=True) as conn:
        (first,) = enqueue_many(conn, [NewJob("sleep", {"seconds": 3})])
        wait_for(lambda: _started(ledger, first), what="the first job started")
        # Waits while the first runs; the stalled claim takes it, and leaves its cursor there.
        (later,) = enqueue_many(conn, [NewJob("sleep", {"seconds": 0})])
        locker = psycopg.connect(ledger)
        locker.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", (first,))
        locked_at = time.monotonic()
        # The first finishes; the claim that carries its outcome waits on the row lock.
        wait_for(
            lambda: scalar(
                ledger,
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND application_name LIKE 'pgq-supervisor main%%'",
            ),
            timeout=15,
            interval=0.02,
            what="the child's claim waiting on the row lock",
        )
        # Committed while that claim waits (its snapshot does not see it), ahead of the
        # cursor it leaves: only a claim from the head finds it.
        (urgent,) = enqueue_many(conn, [NewJob("sleep", {"seconds": 0}, priority=10)])
        enqueued = float(scalar(ledger, "SELECT extract(epoch FROM now())::float8"))
        try:
            started = wait_for(
                lambda: _started(ledger, urgent), timeout=10, what="the job below the cursor"
            )
        finally:
            time.sleep(max(0.0, LOCK_HELD - (time.monotonic() - locked_at)))
            locker.close()  # the operator's transaction ends
        assert started - enqueued < 8.0  # before: about 60 s
        # Nothing lost: the first job's outcome is written once its row is free, and every
        # job ran once.
        wait_for(
            lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0,
            timeout=60,
            what="every outcome written",
        )
    runs = query(
        ledger,
        "SELECT job_id, count(*) FROM test_ledger WHERE event = 'started'"
        " GROUP BY job_id ORDER BY job_id",
    )
    assert runs == [(first, 1), (later, 1), (urgent, 1)]
    assert "cut short" in sup.log() or "trying again" in sup.log()
    sup.stop()
