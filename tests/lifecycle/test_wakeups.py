"""The wake-up flags with a real supervisor (supervisor/runtime/wakeups.py): up while children
sleep, taken by the first enqueue, up again when children go back to sleep; a job enqueued to
sleeping children is picked up at once on every way in, and one whose wake-up was never sent
soon after the master raises the flag again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg

from supervisor import NewJob, enqueue, enqueue_async, enqueue_many, enqueue_many_async
from tests.lifecycle.harness import Supervisor, scalar, wait_for
from tests.lifecycle.test_metrics import free_port, scrape

POLL = """
handlers: {record: tests.handlers:record, sleep: tests.handlers:sleep}
pools:
  main: {processes: 2, batch: 1, queues: {default: 1}, poll_interval: %s}
"""


def _flag_up(dsn: str) -> bool:
    return bool(
        scalar(
            dsn,
            "SELECT up FROM pgq.wakeup_flags WHERE queue = 'default' ORDER BY seq DESC LIMIT 1",
        )
    )


def _started(dsn: str, job_id: int) -> datetime | None:
    return scalar(dsn, "SELECT min(at) FROM test_ledger WHERE job_id = %s", (job_id,))


def _state(dsn: str, job_id: int) -> str | None:
    return scalar(dsn, "SELECT state FROM pgq.jobs WHERE id = %s", (job_id,))


def _by_async(dsn: str, many: bool) -> int:
    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            if many:
                return (await enqueue_many_async(aconn, [NewJob("record")]))[0]
            return await enqueue_async(aconn, "record")

    return asyncio.run(go())


def _by_sql(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT pgq.enqueue('record')").fetchone()
    assert row is not None
    return int(row[0])


def test_sleeping_children_are_woken_at_once_on_every_way_in(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(POLL % "30s").start()
    sup.wait_children(2)
    paths: dict[str, Callable[[psycopg.Connection[Any]], int]] = {
        "enqueue": lambda c: enqueue(c, "record"),
        "enqueue_many": lambda c: enqueue_many(c, [NewJob("record")])[0],
        "pgq.enqueue": _by_sql,
        "enqueue_async": lambda c: _by_async(ledger, many=False),
        "enqueue_many_async": lambda c: _by_async(ledger, many=True),
    }
    latencies = {}
    with psycopg.connect(ledger, autocommit=True) as conn:
        for path, enqueue_by in paths.items():
            # Both children asleep after an empty claim: the master has raised the flag.
            wait_for(lambda: _flag_up(ledger), 15, interval=0.01, what=f"flag up before {path}")
            job_id = enqueue_by(conn)
            (committed,) = conn.execute("SELECT clock_timestamp()").fetchone()
            started = wait_for(
                lambda j=job_id: _started(ledger, j), 10, interval=0.005, what=f"{path} pickup"
            )
            latencies[path] = (started - committed).total_seconds()
    # The poll is 15-30 s away: only the NOTIFY the enqueue sent explains these.
    assert max(latencies.values()) < 1.0, latencies
    sup.stop()


def test_the_flag_is_down_while_children_are_busy_and_up_when_they_sleep(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(POLL % "30s").start()
    sup.wait_children(2)
    wait_for(lambda: _flag_up(ledger), 15, interval=0.01, what="flag up at start")
    with (
        psycopg.connect(ledger, autocommit=True) as listener,
        psycopg.connect(ledger, autocommit=True) as conn,
    ):
        listener.execute("LISTEN pgq_jobs")
        # Two long jobs occupy both children (batch 1: the first child wakes its sibling).
        busy = enqueue_many(conn, [NewJob("sleep", {"seconds": 3}) for _ in range(2)])
        wait_for(
            lambda: all(_started(ledger, j) for j in busy), 10, interval=0.01, what="both busy"
        )
        list(listener.notifies(timeout=0.2, stop_after=50))  # the two long jobs' wake-up
        # The first enqueue to busy children takes the flag (a master may still have raised it
        # for the second child before that one claimed); nothing raises it again meanwhile.
        first = enqueue(conn, "record")
        assert not _flag_up(ledger)
        later = [enqueue(conn, "record") for _ in range(5)]
        assert not _flag_up(ledger)
        heard = [n.payload for n in listener.notifies(timeout=0.5, stop_after=10)]
        assert heard in ([], ["default"]), heard  # at most the one that took the flag
        # The busy children claim the waiting jobs when their batch ends, not at the poll.
        done = time.monotonic()
        wait_for(
            lambda: all(_started(ledger, j) for j in [first, *later]),
            10,
            interval=0.01,
            what="the waiting jobs run after the long ones",
        )
        assert time.monotonic() - done < 6.0
        # Asleep again after their empty claims: the flag is back up.
        wait_for(lambda: _flag_up(ledger), 5, interval=0.01, what="flag up again")
    sup.stop()


def test_a_job_whose_wake_up_was_never_sent_is_claimed_soon_after_the_flag_goes_up(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(POLL % "30s").start()
    sup.wait_children(2)
    wait_for(lambda: _flag_up(ledger), 15, interval=0.01, what="flag up")
    with psycopg.connect(ledger, autocommit=True) as conn:
        # The race the flags leave open: an enqueue that read the flag down as a master raised
        # it. Taken down behind the master's back, and no NOTIFY sent.
        conn.execute("INSERT INTO pgq.wakeup_flags (queue, up) VALUES ('default', false)")
        job_id = enqueue(conn, "record", notify=False)
        (committed,) = conn.execute("SELECT clock_timestamp()").fetchone()
        started = wait_for(lambda: _started(ledger, job_id), 10, interval=0.01, what="pickup")
    # The poll is 15-30 s away: only the master explains this. It re-asserts its flags every
    # second, and when one actually goes up and no claim of the queue follows within RECHECK
    # (50 ms), it wakes a child for one.
    assert (started - committed).total_seconds() < 1.6
    wait_for(lambda: _flag_up(ledger), 5, interval=0.05, what="flag re-asserted")
    sup.stop()


def test_a_job_to_idle_children_costs_one_child_its_claims_not_every_child(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    # Two children asleep, a job every 50 ms: the woken child claims it, then carries its
    # completion in a claim that finds nothing. The other stays asleep (the master watches the
    # raised flag instead of waking it for an empty claim), and no child is woken early for a
    # claim from the head while nothing is held back.
    # Batch 10: a claim of one job is not a full batch (which would wake a sibling).
    port = free_port()
    sup = supervisor(
        (POLL % "30s").replace("batch: 1", "batch: 10")
        + f"metrics: {{port: {port}}}\nhistory: {{enabled: true}}\n"
    ).start()
    sup.wait_children(2)
    wait_for(lambda: _flag_up(ledger), 15, interval=0.01, what="flag up")

    def claims() -> float:
        return scrape(port).value("pgq_claims_total", pool="main")

    before, jobs = claims(), 40
    with psycopg.connect(ledger, autocommit=True) as conn:
        ids = []
        for _ in range(jobs):
            ids.append(enqueue(conn, "record"))
            time.sleep(0.05)
    wait_for(lambda: all(_started(ledger, j) for j in ids), 10, interval=0.01, what="all ran")
    time.sleep(0.5)
    per_job = (claims() - before) / jobs
    # Before: 3.1-3.6 a job (a second child's empty claim, early claims from the head).
    assert per_job < 2.6, per_job
    sup.stop()


def test_a_job_enqueued_while_the_woken_child_runs_a_long_one_goes_to_the_sleeping_child(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    # The master raises a taken flag again only a little after the wake-up (AFTER_TAKE), so
    # that the write stays off the woken child's claim. A job enqueued in that gap is not
    # notified; the raise finds it waiting and wakes the other child at once (batch 10: one job
    # is not a full batch, so nothing else wakes the sibling). Without that, the job would wait
    # for the master's once-a-second re-assert: the median over five rounds tells them apart.
    sup = supervisor((POLL % "30s").replace("batch: 1", "batch: 10")).start()
    sup.wait_children(2)
    waits = []
    with psycopg.connect(ledger, autocommit=True) as conn:
        for _ in range(5):
            wait_for(lambda: _flag_up(ledger), 15, interval=0.01, what="flag up")
            long = enqueue(conn, "sleep", {"seconds": 1.5})
            wait_for(
                lambda: _state(ledger, long) == "running",  # noqa: B023 (called at once)
                10,
                interval=0.001,
                what="the long job claimed",
            )
            short = enqueue(conn, "record")
            (committed,) = conn.execute("SELECT clock_timestamp()").fetchone()
            started = wait_for(
                lambda: _started(ledger, short),  # noqa: B023
                10,
                interval=0.005,
                what="pickup",
            )
            waits.append((started - committed).total_seconds())
            wait_for(
                lambda: _state(ledger, long) != "running",  # noqa: B023
                10,
                interval=0.01,
                what="the long job done",
            )
    assert sorted(waits)[2] < 0.25, waits
    sup.stop()


def _listener_pid(dsn: str) -> int | None:
    return scalar(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgq-supervisor listener'"
        " AND datname = current_database()",
    )


def test_a_listener_whose_session_the_server_ended_listens_again_and_wakes_children(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    # The master reads its notifications straight from libpq (master/listener.py, arrived):
    # a session ended under it must be noticed there, opened again, and heard from at once.
    sup = supervisor(POLL % "30s").start()
    sup.wait_children(2)
    first = wait_for(lambda: _listener_pid(ledger), 15, what="the listener's session")
    with psycopg.connect(ledger, autocommit=True) as conn:
        wait_for(lambda: _flag_up(ledger), 15, interval=0.01, what="flag up")
        conn.execute("SELECT pg_terminate_backend(%s)", (first,))
        again = wait_for(
            lambda: (pid := _listener_pid(ledger)) not in (None, first) and pid,
            30,
            interval=0.05,
            what="the listener's new session",
        )
        latencies = []
        for _ in range(3):
            wait_for(lambda: _flag_up(ledger), 15, interval=0.01, what="flag up again")
            job_id = enqueue(conn, "record")
            (committed,) = conn.execute("SELECT clock_timestamp()").fetchone()
            started = wait_for(lambda j=job_id: _started(ledger, j), 10, interval=0.005)
            latencies.append((started - committed).total_seconds())
        assert _listener_pid(ledger) == again  # the new session was not lost in turn
    # The poll is 15-30 s away and the master writes its flags again each second (which would
    # find the job waiting): pickups in milliseconds are the NOTIFY heard on the new session.
    assert max(latencies) < 0.5, latencies
    sup.stop()
