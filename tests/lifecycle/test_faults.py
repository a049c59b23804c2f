"""The fault matrix: a real supervisor against a database that is down, goes away, or refuses a
write, and handlers that hang, crash or eat memory. Tests that stop the database use a server
of their own (tests/lifecycle/own_server.py), never the shared one."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from supervisor import NewJob, claim, enqueue, enqueue_many
from supervisor.embedded.server import EmbeddedPostgres, available
from supervisor.queue.queries import query as named_query
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for
from tests.lifecycle.own_server import own_server
from tests.lifecycle.test_metrics import free_port, scrape

needs_embedded = pytest.mark.skipif(not available(), reason="needs the embedded PostgreSQL")


def _enqueue(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, jobs)


def _events(dsn: str, job_id: int, event: str) -> list[tuple[int, int]]:
    """(attempt, pid) of each ledger row of that job and event."""
    return query(
        dsn,
        "SELECT attempt, pid FROM test_ledger WHERE job_id = %s AND event = %s ORDER BY at",
        (job_id, event),
    )


def _discarded(dsn: str, job_id: int, timeout: float = 60.0) -> tuple[int, str]:
    """Wait until the job is a dead letter; its attempts and last error."""
    rows = wait_for(
        lambda: query(
            dsn,
            "SELECT attempts, last_error FROM pgq.jobs WHERE id = %s AND state = 'discarded'",
            (job_id,),
        ),
        timeout,
        what=f"job {job_id} discarded",
    )
    return rows[0]


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    if not available():
        pytest.skip("needs the embedded PostgreSQL")
    with own_server() as srv:
        yield srv


@pytest.fixture
def own_supervisor(tmp_path: Path, server: EmbeddedPostgres) -> Iterator[Callable[..., Supervisor]]:
    made: list[Supervisor] = []

    def make(yaml_text: str) -> Supervisor:
        sup = Supervisor(tmp_path, server.dsn, yaml_text, name=f"own{len(made)}")
        made.append(sup)
        return sup

    yield make
    for sup in made:
        sup.kill_everything()


RECORD = """
handlers:
  record: tests.handlers:record
  sleep: tests.handlers:sleep
pools:
  main:
    processes: 2
    batch: 4
    queues: {default: 1}
jobs:
  record: {backoff: {base: 100ms, cap: 500ms}}
  sleep: {backoff: {base: 100ms, cap: 500ms}}
shutdown_timeout: 10s
"""


# -- the database --------------------------------------------------------------------------------


@needs_embedded
def test_database_unreachable_at_start_is_waited_for(
    server: EmbeddedPostgres, own_supervisor: Callable[..., Supervisor]
) -> None:
    ids = _enqueue(server.dsn, [NewJob("record") for _ in range(20)])
    server.stop()
    sup = own_supervisor(RECORD).start()
    sup.wait_log("retrying in", timeout=30)
    time.sleep(2.0)
    assert sup.proc is not None and sup.proc.poll() is None, sup.log()
    log = sup.log()
    # Clear: says what it cannot reach and that it keeps trying; names no password.
    assert "cannot connect to postgres@socket" in log
    server.start()
    wait_for(lambda: scalar(server.dsn, "SELECT count(*) FROM pgq.jobs") == 0, 60, what="drain")
    ran = dict(query(server.dsn, "SELECT job_id, count(*) FROM test_ledger GROUP BY job_id"))
    assert sorted(ran) == sorted(ids)
    assert sup.stop() == 0


@needs_embedded
def test_database_lost_mid_run_loses_nothing_and_recovers(
    server: EmbeddedPostgres, own_supervisor: Callable[..., Supervisor]
) -> None:
    ids = _enqueue(server.dsn, [NewJob("sleep", {"seconds": 0.05}) for _ in range(150)])
    sup = own_supervisor(RECORD).start()
    wait_for(
        lambda: (
            scalar(server.dsn, "SELECT count(*) FROM test_ledger WHERE event = 'finished'") >= 20
        ),
        what="some jobs done",
    )
    server.stop()
    # Children and master find the database gone, and keep trying.
    sup.wait_log("database unreachable (master)")
    for slot in (1, 2):
        wait_for(
            lambda slot=slot: re.search(rf"main#{slot}: .*; retrying", sup.log()),
            what=f"main#{slot} reconnecting\n{sup.log()}",
        )
    assert sup.proc is not None and sup.proc.poll() is None, sup.log()
    server.start()
    wait_for(lambda: scalar(server.dsn, "SELECT count(*) FROM pgq.jobs") == 0, 90, what="drain")
    assert sup.proc.poll() is None, sup.log()
    finished = dict(
        query(
            server.dsn,
            "SELECT job_id, count(*) FROM test_ledger WHERE event = 'finished' GROUP BY job_id",
        )
    )
    # Every job finished; none went missing while the database was away.
    assert sorted(finished) == sorted(ids)
    log = sup.log()
    assert "cannot boot" not in log
    assert "crashed in the worker loop" not in log
    assert sup.stop() == 0


def _sessions(dsn: str) -> dict[str, int]:
    """application_name -> backend pid of the supervisor's sessions."""
    return dict(
        query(
            dsn,
            "SELECT application_name, pid FROM pg_stat_activity"
            " WHERE application_name IN ('pgq-supervisor master', 'pgq-supervisor main#1')",
        )
    )


def _read_only(dsn: str, on: bool) -> None:
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SET default_transaction_read_only = off")  # this session may still write
        if on:
            admin.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            admin.execute("ALTER SYSTEM RESET default_transaction_read_only")
        admin.execute("SELECT pg_reload_conf()")


@needs_embedded
def test_a_server_turned_read_only_makes_master_and_child_reconnect(
    server: EmbeddedPostgres, own_supervisor: Callable[..., Supervisor]
) -> None:
    """As after a failover that demoted the server: every write is refused (SQLSTATE 25006).
    Before: the child retried its claim and the master its heartbeat on the same sessions for
    good, so a multi-host DSN never got the chance to reach the new primary."""
    sup = own_supervisor(RECORD.replace("processes: 2", "processes: 1")).start()
    first = wait_for(lambda: len(s := _sessions(server.dsn)) == 2 and s, 30, what="sessions")
    _read_only(server.dsn, True)
    try:
        # The child's new session lives between its polls, long enough to be seen. The master's
        # lives a moment each second (reopened, refused at once, dropped again), so sampling
        # pg_stat_activity would have to hit that moment: its log says when it reopened.
        child = "pgq-supervisor main#1"
        wait_for(
            lambda: _sessions(server.dsn).get(child, first[child]) != first[child],
            30,
            what=f"a new session for {child}",
        )
        sup.wait_log("reachable again")
    finally:
        _read_only(server.dsn, False)
    ids = _enqueue(server.dsn, [NewJob("record") for _ in range(10)])
    wait_for(lambda: scalar(server.dsn, "SELECT count(*) FROM pgq.jobs") == 0, 60, what="drain")
    ran = dict(query(server.dsn, "SELECT job_id, count(*) FROM test_ledger GROUP BY job_id"))
    assert sorted(ran) == sorted(ids)
    assert sup.stop() == 0


# -- handlers that hang, crash, or eat memory ----------------------------------------------------


HANGS = """
handlers:
  hang: tests.handlers:sleep
  hang_native: tests.handlers:hang_native
  hang_lock: tests.handlers:hang_lock
  spawn_and_hang: tests.handlers:spawn_and_hang
pools:
  main:
    processes: 1
    queues: {default: 1}
jobs:
  hang: {timeout: 1s, max_attempts: 2, backoff: {base: 100ms, cap: 100ms}}
  hang_native: {timeout: 1s, max_attempts: 2, backoff: {base: 100ms, cap: 100ms}}
  hang_lock: {timeout: 1s, max_attempts: 2, backoff: {base: 100ms, cap: 100ms}}
  spawn_and_hang: {timeout: 1s, max_attempts: 1}
shutdown_timeout: 10s
"""


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        ("hang", {"seconds": 120}),  # Python code: the TERM interrupts it
        ("hang_native", {"seconds": 120}),  # a native sleep: returns early on the TERM
        ("hang_lock", {}),  # a native wait no signal ends: only the KILL does
    ],
)
def test_hanging_handler_is_stopped_retried_then_discarded(
    supervisor: Callable[..., Supervisor], ledger: str, kind: str, args: dict[str, Any]
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob(kind, args)])
    port = free_port()
    sup = supervisor(HANGS + f"metrics: {{port: {port}}}\n").start()
    attempts, last_error = _discarded(ledger, job_id, timeout=60)
    assert scrape(port).value("pgq_job_timeouts_total") == 2
    assert attempts == 2
    assert "timeout of 1s" in last_error or "timed out after 1s" in last_error, last_error
    runs = _events(ledger, job_id, "started")
    assert [a for a, _ in runs] == [1, 2]
    assert runs[0][1] != runs[1][1]  # the stuck child did not survive its job
    log = sup.log()
    assert f"job {job_id} ({kind}) exceeded its timeout of 1s" in log
    if kind == "hang_lock":
        assert "did not stop within 5s; killing its process group" in log
    assert sup.stop() == 0


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_timeout_kill_takes_the_handlers_subprocesses(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("spawn_and_hang", {"seconds": 120})])
    sup = supervisor(HANGS).start()
    _discarded(ledger, job_id, timeout=30)
    ((_, helper),) = _events(ledger, job_id, "helper")
    # The helper ignores SIGTERM: the child leaving on the TERM must not leave it behind.
    wait_for(lambda: _gone(helper), 10, what=f"helper {helper} of the timed-out job gone")
    assert sup.stop() == 0


def test_killed_child_leaves_no_subprocess_behind(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("spawn_and_hang", {"seconds": 120})])
    sup = supervisor(HANGS.replace("timeout: 1s, max_attempts: 1", "max_attempts: 1")).start()
    wait_for(lambda: _events(ledger, job_id, "started"), what="job started")
    ((_, helper),) = _events(ledger, job_id, "helper")
    ((_, child),) = _events(ledger, job_id, "started")
    psutil.Process(child).kill()  # an OOM kill, say: the child gets no say
    _discarded(ledger, job_id, timeout=30)
    wait_for(lambda: _gone(helper), 10, what=f"helper {helper} of the killed child gone")
    assert sup.stop() == 0


CRASHES = """
handlers:
  crash: tests.handlers:crash
pools:
  main:
    processes: 1
    queues: {default: 1}
jobs:
  crash: {max_attempts: 2}
"""


@pytest.mark.parametrize(
    ("how", "said"), [("segfault", "killed by SIGSEGV"), ("exit", "exited with code 13")]
)
def test_crashing_handler_is_retried_then_discarded(
    supervisor: Callable[..., Supervisor], ledger: str, how: str, said: str
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("crash", {"how": how})])
    sup = supervisor(CRASHES).start()
    attempts, last_error = _discarded(ledger, job_id, timeout=60)
    assert attempts == 2
    assert said in last_error
    assert [a for a, _ in _events(ledger, job_id, "ran")] == [1, 2]
    # Logged just after the discard commits.
    sup.wait_log(
        f"job {job_id} (crash) on queue default discarded after attempt 2 (no attempts left)"
    )
    assert sup.stop() == 0


def test_memory_hog_is_killed_at_the_hard_limit_and_retried(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("hog", {"megabytes": 160})])
    port = free_port()
    sup = supervisor(f"""
        metrics: {{port: {port}}}
        handlers:
          hog: tests.handlers:hog
        pools:
          main:
            processes: 1
            memory_hard_limit: 96MiB
            queues: {{default: 1}}
        jobs:
          hog: {{max_attempts: 2}}
    """).start()
    attempts, last_error = _discarded(ledger, job_id, timeout=90)
    assert attempts == 2
    assert "above the hard limit of 96 MiB" in last_error
    assert [a for a, _ in _events(ledger, job_id, "started")] == [1, 2]
    assert scrape(port).value("pgq_hard_memory_kills_total") == 2
    assert scrape(port).value("pgq_child_recycles_total", pool="main", kind="hard") == 2
    assert sup.stop() == 0


# -- a write that fails ----------------------------------------------------------------------


POISON_TRIGGER = """
CREATE FUNCTION refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'refusing to delete job %', OLD.id;
END
$$;
CREATE TRIGGER refuse_delete BEFORE DELETE ON pgq.jobs
FOR EACH ROW WHEN (OLD.args ->> 'poison' = 'yes') EXECUTE FUNCTION refuse_delete();
"""


def test_failing_completion_is_not_done_and_not_lost(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute(POISON_TRIGGER)
    poison, *others = _enqueue(
        ledger, [NewJob("record", {"poison": "yes"})] + [NewJob("record") for _ in range(5)]
    )
    sup = supervisor("""
        handlers:
          record: tests.handlers:record
        pools:
          main:
            processes: 1
            batch: 10
            queues: {default: 1}
    """).start()
    wait_for(lambda: _events(ledger, poison, "ran"), what="poisoned job ran")
    sup.wait_log(f"refusing to delete job {poison}")
    # The refused completion holds up nobody else's.
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = ANY(%s)", (others,)) == 0,
        what="the other jobs completed",
    )
    # Not marked done: its row is still there, held by the live worker.
    assert scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (poison,)) == "running"
    # The database accepts it again: the result is written, the job is done.
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute("DROP TRIGGER refuse_delete ON pgq.jobs")
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, what="completed")
    assert len(_events(ledger, poison, "ran")) == 1
    assert sup.stop() == 0


# -- the clock ---------------------------------------------------------------------------------


def test_run_at_is_compared_on_the_database_clock(conn: psycopg.Connection[Any]) -> None:
    # The claim compares with the server's now(); nothing from the worker's clock goes in.
    sql_text = named_query("claim")
    assert "run_at <= now()" in sql_text
    assert "%(now)s" not in sql_text
    (job_id,) = conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, run_at) VALUES ('clock', 'k', now() + interval "
        "'1.5 seconds') RETURNING id"
    ).fetchone()
    # A worker whose idea of the time is 14 hours ahead (its session's time zone, its own
    # clock) still claims nothing early: timestamptz compares instants on the server.
    conn.execute("SET TIME ZONE 'Pacific/Kiritimati'")
    assert claim(conn, "clock", worker="w-ahead") == []
    wait_for(
        lambda: conn.execute(
            "SELECT now() >= run_at FROM pgq.jobs WHERE id = %s", (job_id,)
        ).fetchone()[0],  # type: ignore[index]
        5,
        what="the database clock to pass run_at",
    )
    (got,) = claim(conn, "clock", worker="w-ahead")
    assert got.id == job_id


def test_delay_is_counted_on_the_database_clock(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "k", queue="later", delay=30)
    ahead = conn.execute(
        "SELECT extract(epoch FROM run_at - now()) FROM pgq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert ahead is not None and 29 <= ahead[0] <= 30
    assert claim(conn, "later", worker="w") == []


def test_sigterm_waits_for_database_then_stops(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """TERM while the supervisor waits for an unreachable database stops it, exit 0."""
    sup = supervisor(RECORD)
    sup.env["PGQ_DSN"] = "postgresql://nobody@127.0.0.1:1/none"
    sup.start()
    sup.wait_log("retrying in")
    sup.send(signal.SIGTERM)
    assert sup.wait(20) == 0


def test_clean_stop_leaves_no_job_running_not_even_a_lost_claim(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """A claim can commit while its connection dies (a restart, a terminated session), so the
    child never hears of it: the job is running under a live child's id, and the master renews
    its lease. When that child leaves, even cleanly, the job must go back to its queue."""
    sup = supervisor(RECORD).start()
    worker_id = wait_for(
        lambda: query(ledger, "SELECT worker_id FROM pgq.workers WHERE pool = 'main' LIMIT 1"),
        what="children registered",
    )[0][0]
    with psycopg.connect(ledger, autocommit=True) as conn:
        (job_id,) = enqueue_many(conn, [NewJob("record", queue="elsewhere")])
        conn.execute(
            "UPDATE pgq.jobs SET state = 'running', attempts = 1, locked_by = %s, "
            "lease_id = nextval('pgq.lease_seq'), lease_until = now() + interval '1 minute', "
            "started_at = now() WHERE id = %s",
            (worker_id, job_id),
        )
    assert sup.stop() == 0
    assert scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (job_id,)) == "available"
