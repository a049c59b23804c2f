"""How children choose and hold work: weights, batches, leases, timeouts, wake-ups, and several
supervisors on one database. Real supervisors, real signals."""

from __future__ import annotations

import itertools
import os
import re
import signal
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import psycopg

from supervisor import NewJob, enqueue, enqueue_many
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for
from tests.lifecycle.test_metrics import free_port, scrape


def _enqueue(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, jobs)


WEIGHTED = """
handlers:
  record_queue: tests.handlers:record_queue
pools:
  mixed:
    processes: 2
    queues: {flood: %d, trickle: 1}
"""


def _share_of_trickle(dsn: str, pids: set[int] | None, first: int) -> float:
    rows = query(dsn, "SELECT event, pid FROM test_ledger ORDER BY at")
    events = [event for event, pid in rows if pids is None or pid in pids][:first]
    assert len(events) == first
    return events.count("trickle") / first


def test_a_flooded_queue_does_not_starve_a_lighter_one(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    # Enough of both that neither runs dry before the reload takes: the children keep claiming
    # while the test waits for the log line, and a loaded machine once let 600 more run then.
    _enqueue(
        ledger,
        [NewJob("record_queue", queue="flood", priority=100) for _ in range(12000)]
        + [NewJob("record_queue", queue="trickle") for _ in range(1200)],
    )
    sup = supervisor(WEIGHTED % 3).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger") >= 400,
        timeout=60,
        what="400 executions",
    )
    # Weights 3:1 -> the trickle queue gets one claim in four while both have work.
    share = _share_of_trickle(ledger, None, 400)
    assert 0.20 <= share <= 0.30, share

    # The operator raises the flood's weight and sends SIGHUP: the same children take the new
    # weights at their next claim (nothing drained or respawned), and the share shrinks.
    old = {c.pid for c in sup.children()}
    sup.config.write_text(WEIGHTED % 9)
    sup.send(signal.SIGHUP)
    sup.wait_log("take the new weights at their next claim, without a restart")
    assert "reload: pool mixed changed (queue flood weight 3 -> 9)" in sup.log()
    seen = scalar(ledger, "SELECT count(*) FROM test_ledger")
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger") >= seen + 300,
        timeout=60,
        what="300 executions after reload",
    )
    left = scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE queue = 'trickle'")
    assert left > 0, f"the trickle ran dry: {seen} executions before the reload took"
    rows = query(ledger, "SELECT event FROM test_ledger ORDER BY at")
    after = [event for (event,) in rows][seen + 20 : seen + 300]  # past claims in flight
    share = after.count("trickle") / len(after)
    assert 0.05 <= share <= 0.16, share  # 1 in 10
    assert {c.pid for c in sup.children()} == old
    assert sup.stop() == 0


def test_drain_gives_back_a_batch_without_spending_attempts(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 1.5}) for _ in range(8)])
    sup = supervisor("""
        handlers: {sleep: tests.handlers:sleep}
        pools:
          pdf: {processes: 1, batch: 8, queues: {default: 1}}
    """).start()
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM test_ledger") >= 1, what="first start")
    assert scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'running'") == 8
    sup.send(signal.SIGTERM)
    assert sup.wait(30) == 0
    (first,) = query(ledger, "SELECT DISTINCT job_id FROM test_ledger")
    assert query(ledger, "SELECT event FROM test_ledger ORDER BY at") == [
        ("started",),
        ("finished",),
    ]
    rows = query(ledger, "SELECT id, state, attempts FROM pgq.jobs ORDER BY id")
    assert [r[0] for r in rows] == sorted(set(ids) - {first[0]})
    assert {(r[1], r[2]) for r in rows} == {("available", 0)}
    assert "gave back 7 claimed jobs it had not started" in sup.log()


def test_a_dead_childs_jobs_return_at_once_and_only_the_running_one_pays(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 60}) for _ in range(4)])
    sup = supervisor("""
        handlers: {sleep: tests.handlers:sleep}
        pools:
          pdf: {processes: 1, batch: 4, queues: {default: 1}}
        lease: {duration: 5m}
    """).start()
    started = wait_for(lambda: query(ledger, "SELECT pid, job_id FROM test_ledger"), what="start")
    victim, running = started[0]
    killed = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    # The lease has five minutes to go; the master knows its child died and does not wait.
    wait_for(
        lambda: (
            scalar(
                ledger,
                "SELECT count(*) FROM pgq.jobs WHERE locked_by IS NULL OR locked_by NOT LIKE %s",
                (f"%:{victim}:%",),
            )
            == 4
        ),
        timeout=10,
        interval=0.02,
        what="jobs back",
    )
    assert time.monotonic() - killed < 3.0
    # The job that was running when the child died keeps its attempt (it may be what killed
    # it); the three claimed behind it never started and get theirs back. The master logs
    # after the requeue commits, so the lines may trail the rows by a moment.
    sup.wait_log(f"job {running} (sleep) on queue default requeued after attempt 1")

    def given_back() -> list[int]:
        found = re.findall(
            r"job (\d+) \(sleep\) on queue default given back without spending an attempt",
            sup.log(),
        )
        return sorted(map(int, found))

    wait_for(
        lambda: given_back() == sorted(set(ids) - {running}),
        timeout=10,
        what="the given-back lines",
    )
    assert scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (running,)).endswith(
        "killed by SIGKILL (perhaps out of memory?)"
    )
    sup.stop()


def test_a_long_cpu_job_keeps_its_lease_while_its_child_lives(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (_job_id,) = _enqueue(ledger, [NewJob("busy", {"seconds": 6})])
    sup = supervisor("""
        handlers: {busy: tests.handlers:busy}
        pools:
          cpu: {processes: 1, queues: {default: 1}}
        lease: {duration: 2s, renew_every: 500ms}
        rescue: {interval: 1s}
        log: {level: debug}
    """).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE event = 'finished'") == 1,
        timeout=30,
        what="job finished",
    )
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, what="completed")
    assert query(ledger, "SELECT DISTINCT attempt FROM test_ledger") == [(1,)]
    log = sup.log()
    assert log.count("rescuer: running") >= 3  # the rescuer ran during the job...
    assert "lease expired" not in log  # ...and never took it
    assert "lease lost" not in log
    sup.stop()


def test_a_stuck_handler_is_killed_at_its_timeout_and_retried(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("sleep", {"seconds": 60}, max_attempts=2)])
    sup = supervisor("""
        handlers: {sleep: tests.handlers:sleep}
        pools:
          main: {processes: 1, queues: {default: 1}}
        jobs:
          sleep: {timeout: 1s, backoff: {base: 100ms, cap: 200ms}}
    """).start()
    wait_for(
        lambda: (
            scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (job_id,)) == "discarded"
        ),
        timeout=40,
        what="discarded after two timeouts",
    )
    starts = query(
        ledger, "SELECT attempt, pid FROM test_ledger WHERE event = 'started' ORDER BY at"
    )
    assert [a for a, _ in starts] == [1, 2]
    assert starts[0][1] != starts[1][1]  # the first child was stopped and replaced
    error = scalar(ledger, "SELECT last_error FROM pgq.jobs WHERE id = %s", (job_id,))
    assert "timed out after 1s" in error
    assert f"job {job_id} (sleep) exceeded its timeout of 1s" in sup.log()
    sup.stop()


def test_idle_children_wake_within_milliseconds_of_the_commit(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor("""
        handlers: {record: tests.handlers:record}
        pools:
          main: {processes: 2, queues: {default: 1}, poll_interval: 10s}
    """).start()
    children = sup.wait_children(2)
    # Both children in their idle wait (their titles say so; refreshed every second).
    wait_for(
        lambda: all(" idle" in " ".join(c.cmdline()) for c in children), 15, what="idle children"
    )
    latencies = []
    with psycopg.connect(ledger, autocommit=True) as conn:
        for _ in range(10):
            with conn.transaction():
                job_id = enqueue(conn, "record")
            (committed,) = conn.execute("SELECT clock_timestamp()").fetchone()
            started: datetime = wait_for(
                lambda j=job_id: scalar(
                    ledger, "SELECT min(at) FROM test_ledger WHERE job_id = %s", (j,)
                ),
                timeout=5,
                interval=0.005,
                what="pickup",
            )
            latencies.append((started - committed).total_seconds())
            time.sleep(0.2)
    # Polling every 5-10 s cannot explain this; the NOTIFY wake-up does.
    assert statistics.median(latencies) < 0.1, latencies
    assert max(latencies) < 1.0, latencies
    sup.stop()


def test_a_threaded_child_with_a_free_thread_is_woken_while_others_run(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    port = free_port()
    sup = supervisor(f"""
        handlers: {{sleep: tests.handlers:sleep, record: tests.handlers:record}}
        pools:
          hooks: {{processes: 1, threads: 4, queues: {{default: 1}}, poll_interval: 30s}}
        metrics: {{port: {port}}}
    """).start()
    sup.wait_children(1)

    def empty_claims() -> float:
        return scrape(port).value("pgq_claims_empty_total", pool="hooks")

    # The child has looked once, found nothing, and waits (its next poll is 15-30 s away).
    wait_for(lambda: empty_claims() >= 1, timeout=15, what="the child's first claim")
    before = empty_claims()
    _enqueue(ledger, [NewJob("sleep", {"seconds": 20})])
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE event = 'started'"),
        timeout=15,
        what="the long job started",
    )
    # After claiming the long job the child claims again with its free threads, finds nothing
    # and goes back to its wait: one thread busy and three free.
    wait_for(lambda: empty_claims() > before, timeout=15, what="the child back in its wait")
    with psycopg.connect(ledger, autocommit=True) as conn:
        job_id = enqueue(conn, "record")
        (committed,) = conn.execute("SELECT clock_timestamp()").fetchone()
    started: datetime = wait_for(
        lambda: scalar(ledger, "SELECT min(at) FROM test_ledger WHERE job_id = %s", (job_id,)),
        timeout=15,
        interval=0.01,
        what="the second job started",
    )
    # Neither the long job's end (20 s) nor the poll (15-30 s) explains this; the wake-up does.
    assert (started - committed).total_seconds() < 5.0
    sup.kill_everything()


def test_two_supervisors_share_the_work_and_one_rescuer(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 0.01}) for _ in range(600)])
    yaml_text = """
        handlers: {sleep: tests.handlers:sleep}
        pools:
          main: {processes: 2, queues: {default: 1}}
        rescue: {interval: 1s}
        log: {level: debug}
    """
    first = supervisor(yaml_text).start()
    second = supervisor(yaml_text).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, timeout=60, what="all done"
    )
    # A few more rescue intervals with both running.
    wait_for(
        lambda: len(_rescue_times(first.log()) + _rescue_times(second.log())) >= 4,
        30,
        what="four rescuer passes",
    )
    assert first.stop() == 0 and second.stop() == 0
    runs = query(
        ledger, "SELECT job_id, count(*) FROM test_ledger WHERE event = 'finished' GROUP BY job_id"
    )
    assert sorted(j for j, _ in runs) == sorted(ids)
    assert {n for _, n in runs} == {1}  # no job completed twice
    by_pid = dict(query(ledger, "SELECT pid, count(*) FROM test_ledger GROUP BY pid"))
    parents = {first.pid: 0, second.pid: 0}
    for pid, n in by_pid.items():
        for sup in (first, second):
            if re.search(rf"spawned main#\d \(pid {pid}\)", sup.log()):
                parents[sup.pid] += n
    assert all(n > 0 for n in parents.values()), parents  # both did work
    stamps = sorted(_rescue_times(first.log()) + _rescue_times(second.log()))
    assert len(stamps) >= 3
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    assert min(gaps) >= 0.85, gaps  # exactly one rescuer per interval across both hosts


def test_the_nightly_purge_runs_at_purge_at_on_exactly_one_of_two_supervisors(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    with psycopg.connect(ledger, autocommit=True) as conn:
        for age, count in (("30 days", 500), ("1 day", 5)):
            conn.execute(
                "INSERT INTO pgq.jobs (queue, kind, args, state, attempts, finished_at)"
                " SELECT 'default', 'noop', '{}', 'discarded', 1, now() - %s::interval"
                " FROM generate_series(1, %s)",
                (age, count),
            )
    # purge.at 15 s away, to the second: the two supervisors start first, so they must be
    # waiting for it, not catching it up.
    at = (datetime.now().astimezone() + timedelta(seconds=15)).replace(microsecond=0)
    yaml_text = f"""
        handlers: {{noop: tests.handlers:noop}}
        pools:
          main: {{processes: 1, queues: {{default: 1}}}}
        purge: {{at: "{at:%H:%M:%S}", discarded_after: 14d}}
        log: {{level: debug}}
    """
    first = supervisor(yaml_text).start()
    second = supervisor(yaml_text).start()
    first.wait_log("started: 1 pools")
    second.wait_log("started: 1 pools")
    assert scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 505  # not before purge.at
    wait_for(lambda: "purge: deleted" in first.log() + second.log(), timeout=90, what="the purge")
    # Both purgers woke at purge.at; the one that did not win says so.
    wait_for(
        lambda: "purge: another supervisor" in first.log() + second.log(),
        timeout=30,
        what="the other supervisor's purger stood down",
    )
    assert first.stop() == 0 and second.stop() == 0
    runs = query(ledger, "SELECT run_by, started_at FROM pgq.maintenance_runs WHERE task = 'purge'")
    assert len(runs) == 1, runs
    (run_by, started_at), logs = runs[0], (first.log(), second.log())
    assert started_at >= at
    ran = [log for log in logs if "purge: deleted 500 dead letters older than 14 days" in log]
    assert len(ran) == 1 and f"supervisor {run_by} started" in ran[0]
    assert sum("purge: deleted" in log for log in logs) == 1
    # The month-old dead letters are gone; the day-old ones stay.
    assert scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 5
    assert scalar(ledger, "SELECT max(now() - finished_at) < interval '2 days' FROM pgq.jobs")


def test_the_master_vacuums_the_queue_table_when_dead_rows_pile_up(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute("ALTER TABLE pgq.jobs SET (autovacuum_enabled = false)")  # ours alone
    _enqueue(ledger, [NewJob("record") for _ in range(1000)])
    sup = supervisor("""
        handlers: {record: tests.handlers:record}
        pools:
          main: {processes: 2, batch: 10, queues: {default: 1}}
        vacuum: {interval: 500ms, dead_rows: 300}
    """).start()
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, what="drained")
    sup.wait_log("vacuum: pgq.jobs vacuumed in")
    assert (
        scalar(
            ledger,
            "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'pgq.jobs'::regclass",
        )
        >= 1
    )
    # The vacuum ran on a connection of its own, opened for it and closed after.
    wait_for(
        lambda: (
            not query(
                ledger,
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgq-supervisor vacuum'",
            )
        ),
        timeout=10,
        what="the vacuum's session gone",
    )
    assert sup.stop() == 0


def _rescue_times(log: str) -> list[float]:
    times = []
    for line in log.splitlines():
        if "rescuer: running" in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")
            times.append(stamp.timestamp())
    return times


def test_a_threaded_pool_runs_io_jobs_side_by_side_and_drains_cleanly(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 0.5}) for _ in range(40)])
    sup = supervisor("""
        handlers: {sleep: tests.handlers:sleep}
        pools:
          hooks: {processes: 1, threads: 8, batch: 8, queues: {default: 1}}
    """).start()
    # Eight handler threads in one child: eight jobs in flight at once.
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'running'") == 8,
        timeout=20,
        what="eight jobs in flight",
    )
    # Claimed is not yet started: each handler thread opens its own connection first.
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE event = 'started'") >= 8,
        timeout=20,
        what="eight handlers started",
    )
    (pids,) = query(ledger, "SELECT count(DISTINCT pid) FROM test_ledger")
    assert pids == (1,)
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM test_ledger WHERE event = 'finished'") >= 8,
        timeout=20,
        what="a first round",
    )
    sup.send(signal.SIGTERM)
    assert sup.wait(30) == 0
    started = {
        j for (j,) in query(ledger, "SELECT job_id FROM test_ledger WHERE event = 'started'")
    }
    finished = {
        j for (j,) in query(ledger, "SELECT job_id FROM test_ledger WHERE event = 'finished'")
    }
    assert started == finished  # every job in flight finished
    rows = query(ledger, "SELECT id, state, attempts FROM pgq.jobs")
    assert {(s, a) for _, s, a in rows} <= {("available", 0)}  # the rest given back, unspent
    assert sorted([r[0] for r in rows] + sorted(finished)) == sorted(ids)
