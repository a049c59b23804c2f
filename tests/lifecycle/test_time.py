"""Time with real supervisors: delayed jobs and retries start at their run_at whatever the poll
interval, and a periodic schedule enqueues one job per tick across two supervisors, also
when one of them is killed."""

from __future__ import annotations

import itertools
import re
import signal
from collections.abc import Callable
from datetime import datetime

import psycopg

from supervisor import enqueue
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

# Polls so rare that only the stager's wake-up can start a job on time.
SLOW_POLL = """
handlers: {record: tests.handlers:record, retry_soon: tests.handlers:retry_soon}
pools:
  main: {processes: 1, queues: {default: 1}, poll_interval: 60s}
"""


def test_a_delayed_job_starts_at_its_run_at_whatever_the_poll_interval(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(SLOW_POLL).start()
    sup.wait_children(1)
    with psycopg.connect(ledger, autocommit=True) as conn:
        # The last is due past the stagers' notice (10 s, pgq.wakes_stagers): no NOTIFY, found
        # by the look the stager takes every second, then waited for to the millisecond.
        jobs = [enqueue(conn, "record", delay=delay) for delay in (1.5, 2.5, 11.0)]
        run_ats = dict(conn.execute("SELECT id, run_at FROM pgq.jobs WHERE id = ANY(%s)", (jobs,)))
    for job_id in jobs:
        started: datetime = wait_for(
            lambda j=job_id: scalar(
                ledger, "SELECT min(at) FROM test_ledger WHERE job_id = %s", (j,)
            ),
            timeout=15,
            interval=0.01,
            what=f"job {job_id} ran",
        )
        late = (started - run_ats[job_id]).total_seconds()
        # Never early; and on time, where a 60 s poll would have made it up to a minute late.
        assert 0 <= late < 0.5, late
    sup.stop()


def test_a_retry_starts_when_its_backoff_ends_whatever_the_poll_interval(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(SLOW_POLL).start()
    sup.wait_children(1)
    with psycopg.connect(ledger, autocommit=True) as conn:
        job_id = enqueue(conn, "retry_soon")
    attempts = wait_for(
        lambda: (
            len(
                rows := query(
                    ledger, "SELECT at FROM test_ledger WHERE job_id = %s ORDER BY at", (job_id,)
                )
            )
            == 2
            and rows
        ),
        timeout=15,
        interval=0.01,
        what="the retry ran",
    )
    gap = (attempts[1][0] - attempts[0][0]).total_seconds()
    # Retry(0.1): the child tells its master, whose stager wakes at the new run_at.
    assert 0.1 <= gap < 1.0, gap
    sup.stop()


TICKING = """
handlers: {record: tests.handlers:record}
pools:
  main: {processes: 1, queues: {default: 1}}
schedules:
  tick: {every: 2s, kind: record, args: {}}
"""


def _ticks_run(ledger: str) -> list[datetime]:
    return [row[0] for row in query(ledger, "SELECT at FROM test_ledger ORDER BY at")]


def test_two_supervisors_enqueue_one_job_per_tick_also_when_one_is_killed(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    first, second = supervisor(TICKING).start(), supervisor(TICKING).start()
    first.wait_children(1)
    second.wait_children(1)
    wait_for(lambda: len(_ticks_run(ledger)) >= 3, timeout=20, what="three ticks")
    first.send(signal.SIGKILL)  # the master dies mid-run; its child follows (parent-death signal)
    first.wait(10)
    seen = len(_ticks_run(ledger))
    wait_for(lambda: len(_ticks_run(ledger)) >= seen + 3, timeout=20, what="three more ticks")
    logs = first.log() + second.log()
    enqueued = {
        datetime.fromisoformat(tick): int(job)
        for job, tick in re.findall(
            r"enqueued record job (\d+) on queue \S+ for the tick at (\S+)", logs
        )
    }
    ticks = sorted(enqueued)
    # One job per 2 s tick, whichever supervisor enqueued it: none twice (the log would name a
    # tick twice, or two jobs for it), none missed (a step of 4 s). A master held up past a tick
    # enqueues it late, so run times may bunch; the ticks may not.
    assert len(ticks) == len(re.findall("enqueued record job", logs)), logs
    assert all((b - a).total_seconds() == 2.0 for a, b in itertools.pairwise(ticks)), (ticks, logs)
    wait_for(
        lambda: (
            set(enqueued.values())
            <= {r[0] for r in query(ledger, "SELECT job_id FROM test_ledger")}
        ),
        timeout=10,
        what="every tick's job ran",
    )
    assert scalar(ledger, "SELECT count(*) FROM pgq.schedules") == 1
    second.stop()


def test_a_reload_picks_up_a_new_schedule(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(SLOW_POLL).start()
    sup.wait_children(1)
    sup.config.write_text(SLOW_POLL + "schedules:\n  added: {every: 1s, kind: record}\n")
    sup.send(signal.SIGHUP)
    # First seen at the reload, then one job per second.
    wait_for(lambda: len(_ticks_run(ledger)) >= 2, timeout=15, what="the new schedule's jobs")
    sup.stop()
