"""The fault matrix, the child's side: faults that overlap (an outage during a deploy or a
reload), a hung handler among threaded siblings, a claim whose reply was lost, and a child that
fails before its loop begins. Tests that stop the database use a server of their own."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.embedded.server import EmbeddedPostgres, available
from supervisor.queue.claim_builder import VARIANTS, statement
from supervisor.queue.job import Job
from supervisor.shared.exits import ChildExit
from tests.child_worker import in_process_worker
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for
from tests.lifecycle.own_server import own_server
from tests.lifecycle.test_faults import POISON_TRIGGER


def _enqueue(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, jobs)


def _count(dsn: str, job_id: int, event: str) -> int:
    return int(
        scalar(
            dsn,
            "SELECT count(*) FROM test_ledger WHERE job_id = %s AND event = %s",
            (job_id, event),
        )
    )


def _pid_of(dsn: str, job_id: int) -> int:
    """The pid of the child that started the job (first attempt)."""
    rows = wait_for(
        lambda: query(
            dsn,
            "SELECT pid FROM test_ledger WHERE job_id = %s AND event = 'started' ORDER BY at",
            (job_id,),
        ),
        what=f"job {job_id} started",
    )
    return int(rows[0][0])


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _title(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


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


ONE_CHILD = """
handlers:
  sleep: tests.handlers:sleep
  sleep_offline: tests.handlers:sleep_offline
pools:
  main:
    processes: 1
    batch: 1
    queues: {default: 1}
shutdown_timeout: 30s
"""


# -- item 1: draining through an outage ----------------------------------------------------------


def test_drain_during_an_outage_waits_without_spinning_then_records_the_job_once(
    server: EmbeddedPostgres, own_supervisor: Callable[..., Supervisor]
) -> None:
    """A deploy during a database restart: the job finishes while the database is down and
    the master is stopping. The draining child waits for the database (without burning a
    core), writes the outcome when it is back, and the job is done once."""
    dsn = server.dsn
    (job_id,) = _enqueue(dsn, [NewJob("sleep_offline", {"seconds": 2})])
    # Two children: the idle one leaves at once, the busy one waits for the database.
    sup = own_supervisor(ONE_CHILD.replace("processes: 1", "processes: 2")).start()
    child = _pid_of(dsn, job_id)
    server.stop("fast")
    sup.send(signal.SIGTERM)
    # The handler returns, the write fails: the child waits for the database.
    wait_for(lambda: "connecting" in _title(child), 20, what=f"child {child} reconnecting")
    sup.wait_children(1)
    waiting = {"child": psutil.Process(child), "master": psutil.Process(sup.pid)}
    before = {name: sum(p.cpu_times()[:2]) for name, p in waiting.items()}
    time.sleep(3.0)  # the outage goes on; a spinning process burns most of a core meanwhile
    for name, process in waiting.items():
        used = sum(process.cpu_times()[:2]) - before[name]
        assert used < 0.5, f"the waiting {name} used {used:.2f}s of CPU in 3s"
    server.start()
    assert sup.wait(40) == 0, sup.log()
    # Recorded once: completed (the row is gone), run once.
    assert scalar(dsn, "SELECT count(*) FROM pgq.jobs WHERE id = %s", (job_id,)) == 0, sup.log()
    assert _count(dsn, job_id, "started") == 1
    assert "still running at the end of the shutdown timeout" not in sup.log()


def test_children_retired_by_a_reload_get_the_shutdown_deadline(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """A child retired by SIGHUP drains under shutdown_timeout like a stopping one: a job that
    never ends must not keep it (and its job, leased and renewed) alive after the reload."""
    (job_id,) = _enqueue(ledger, [NewJob("sleep", {"seconds": 300})])
    sup = supervisor(ONE_CHILD.replace("30s", "2s")).start()
    child = _pid_of(ledger, job_id)
    sup.config.write_text(sup.config.read_text().replace("batch: 1", "batch: 2"))
    sup.send(signal.SIGHUP)
    wait_for(lambda: _gone(child), 30, what=f"retired child {child} stopped\n{sup.log()}")
    sup.wait_log("did not stop within 2s; killing its process group")
    # Its job was running when it was killed: the attempt is spent, and it runs again.
    wait_for(lambda: _count(ledger, job_id, "started") == 2, what="job started again")
    assert scalar(ledger, "SELECT attempts FROM pgq.jobs WHERE id = %s", (job_id,)) == 2
    assert sup.stop() == 0


# -- item 2: one hung handler among threaded siblings --------------------------------------------


THREADED = """
handlers:
  hang: tests.handlers:sleep
  sleep: tests.handlers:sleep
pools:
  web:
    processes: 1
    threads: 4
    batch: 4
    queues: {default: 1}
jobs:
  hang: {timeout: TIMEOUT, max_attempts: 3, backoff: {base: 60s, cap: 60s}}
shutdown_timeout: SHUTDOWN
"""


@pytest.mark.parametrize("stopped_by", ["timeout", "shutdown"])
def test_a_hung_threaded_job_costs_its_finished_siblings_nothing(
    supervisor: Callable[..., Supervisor], ledger: str, stopped_by: str
) -> None:
    """threads: 4, one job that hangs and three that take 3 s. Whether the child is stopped
    because the hung job passed its timeout or because the supervisor stops and the hung job
    outlives shutdown_timeout, the three are recorded as done once (never given back as
    "not running", never run again) and only the hung job spends an attempt."""
    hang, *siblings = _enqueue(
        ledger,
        [NewJob("hang", {"seconds": 120})] + [NewJob("sleep", {"seconds": 3}) for _ in range(3)],
    )
    timeout, shutdown = ("1s", "30s") if stopped_by == "timeout" else ("0s", "5s")
    yaml_text = THREADED.replace("TIMEOUT", timeout).replace("SHUTDOWN", shutdown)
    if stopped_by == "shutdown":
        yaml_text = yaml_text.replace("timeout: 0s, ", "")
    sup = supervisor(yaml_text).start()
    for job_id in [hang, *siblings]:
        _pid_of(ledger, job_id)
    if stopped_by == "shutdown":
        sup.send(signal.SIGTERM)
        assert sup.wait(30) == 0, sup.log()
    wait_for(
        lambda: (
            scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = ANY(%s)", (siblings,)) == 0
        ),
        30,
        what=f"the three siblings recorded as done\n{sup.log()}",
    )
    for job_id in siblings:
        assert _count(ledger, job_id, "started") == 1, sup.log()
        assert _count(ledger, job_id, "finished") == 1
    attempts, last_error = wait_for(
        lambda: query(
            ledger,
            "SELECT attempts, last_error FROM pgq.jobs WHERE id = %s AND state <> 'running'",
            (hang,),
        ),
        30,
        what=f"the hung job given back\n{sup.log()}",
    )[0]
    assert attempts == 1  # spent by the hung job alone
    if stopped_by == "timeout":
        assert "timed out after 1s" in last_error, last_error
    else:
        assert "shutdown timeout" in last_error, last_error
    log = sup.log()
    assert "claimed, not running" not in log
    assert "lease lost" not in log
    assert sup.stop() == 0


def test_a_job_that_ran_but_was_never_recorded_is_not_called_unstarted(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """The database refuses a finished job's completion until the child leaves: the master
    gives the job back (without spending the attempt: it succeeded), saying it ran and was
    not recorded, never that it was "claimed, not running"."""
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute(POISON_TRIGGER)
    (poison,) = _enqueue(ledger, [NewJob("record", {"poison": "yes"})])
    sup = supervisor("""
        handlers:
          record: tests.handlers:record
        pools:
          main:
            processes: 1
            queues: {default: 1}
    """).start()
    sup.wait_log(f"refusing to delete job {poison}")
    assert sup.stop() == 0
    log = sup.log()
    assert f"job {poison} (record) on queue default ran, but its outcome was not recorded" in log
    assert "claimed, not running" not in log
    assert _count(ledger, poison, "ran") == 1
    row = query(ledger, "SELECT state, attempts FROM pgq.jobs WHERE id = %s", (poison,))
    assert row == [("available", 0)]


# -- item 5: a claim whose reply was lost -------------------------------------------------------


def test_a_claim_lost_with_the_connection_is_given_back_by_the_live_child(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """The claim committed as the connection died: the job is running under a live child's
    worker id, but the child never received it. After reconnecting, the child gives it back
    (attempt refunded) and it runs, instead of staying `running` for as long as the child
    lives while the master renews its lease."""
    sup = supervisor("""
        handlers:
          record: tests.handlers:record
        pools:
          main:
            processes: 1
            poll_interval: 200ms
            queues: {default: 1}
    """).start()
    worker_id = wait_for(
        lambda: query(ledger, "SELECT worker_id FROM pgq.workers WHERE pool = 'main' LIMIT 1"),
        what="child registered",
    )[0][0]
    # The child is in its loop: it has claimed once (its session's last statement, known by
    # its start: pg_stat_activity keeps only the first 1,024 characters of a query). The master
    # registers a child as it forks it; staged before the child's first connect is done, the
    # terminate below can land on the very give-back under test, whose reply is then lost
    # after it committed, so the job goes back unannounced.
    # Each variant's start: an idle child's claim from the head carries no completions and
    # begins otherwise than one that does.
    starts = sorted({statement(name)[:20] for name in VARIANTS})
    wait_for(
        lambda: scalar(
            ledger,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
            "'pgq-supervisor main#1' AND left(query, 20) = ANY(%s)",
            (starts,),
        ),
        what=f"the child's first claim\n{sup.log()}",
    )
    with psycopg.connect(ledger, autocommit=True) as conn:
        # What the lost claim left behind: the job is the child's on paper only (written in
        # one transaction, so the child cannot claim it for real in between).
        with conn.transaction():
            (job_id,) = enqueue_many(conn, [NewJob("record")])
            conn.execute(
                "UPDATE pgq.jobs SET state = 'running', attempts = 1, locked_by = %s, "
                "lease_id = nextval('pgq.lease_seq'), "
                "lease_until = now() + interval '10 minutes', started_at = now() WHERE id = %s",
                (worker_id, job_id),
            )
        # ... and the connection died.
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'pgq-supervisor main#1'"
        )
    wait_for(lambda: _count(ledger, job_id, "ran") == 1, 30, what=f"job ran\n{sup.log()}")
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = %s", (job_id,)) == 0,
        what=f"job completed\n{sup.log()}",
    )
    # Ran on its first attempt: the lost claim did not spend one.
    assert query(ledger, "SELECT attempt FROM test_ledger WHERE job_id = %s", (job_id,)) == [(1,)]
    sup.wait_log(f"job {job_id} (record) on queue default given back without spending an attempt")
    assert sup.stop() == 0


# -- item 6: from the fork on, the child leaves only through os._exit --------------------------


def test_a_child_failing_before_its_loop_never_returns_into_the_parent(
    tmp_path: Path, dsn: str
) -> None:
    """An exception while the child builds its spec (right after the fork) must end the child
    with os._exit, not unwind into a second copy of the caller (the master's loop)."""
    from supervisor.config import load_config
    from supervisor.master.children import spawn

    path = tmp_path / "q.yaml"
    path.write_text(ONE_CHILD)
    config = load_config(path)
    parent = os.getpid()

    def broken_fds() -> list[int]:
        raise RuntimeError("failed while building the child's spec")

    try:
        child = spawn(
            config=config,
            pool=config.pools["main"],
            slot=1,
            generation=1,
            host="test-host",
            dsn=dsn,
            handlers={},
            kinds=[],
            inherited_fds=broken_fds,
        )
    except RuntimeError:
        if os.getpid() != parent:
            os._exit(99)  # the old code unwound here, into a copy of this test run
        raise
    _, status = os.waitpid(child.pid, 0)
    child.close()
    assert os.waitstatus_to_exitcode(status) == ChildExit.CRASHED


def test_a_signal_raises_only_into_the_handlers_own_code(dsn: str, tmp_path: Path) -> None:
    """The timeout and the master's death are raised into the handler from a signal handler.
    Raised into our own frames around it (the handler already returned, or not yet called),
    they would turn a success into a failure; only the handler's own frames may take them."""
    import sys

    from supervisor.config import load_config
    from tests.executors import claimed_job, one_kind_executor

    seen: dict[str, bool] = {}

    def handler_func(**_: Any) -> None:
        here = sys._getframe()
        seen["handler"] = executor.in_handler(here)
        seen["handler call"] = executor.in_handler(here.f_back)
        seen["executor"] = executor.in_handler(here.f_back.f_back)  # type: ignore[union-attr]

    path = tmp_path / "q.yaml"
    path.write_text(ONE_CHILD)
    config = load_config(path)
    executor = one_kind_executor(config, handler_func, wants_context=False)
    assert executor.run(claimed_job()) is None
    assert seen == {"handler": True, "handler call": False, "executor": False}
    assert not executor.in_handler(sys._getframe())  # after the run: never


def test_an_exception_raised_mid_call_discards_the_childs_connection(
    dsn: str, tmp_path: Path
) -> None:
    """A timeout raised out of the signal handler while the handler's lease check waits on
    the child's own connection leaves that connection mid-protocol: it is discarded (and
    reopened later), never used again for the outcome writes or the next claim."""
    from supervisor.child.executor import JobTimeout

    worker = in_process_worker(dsn, tmp_path, ONE_CHILD)
    session = worker.parts.session
    session.conn = psycopg.connect(dsn, autocommit=True)
    now = datetime.now(timezone.utc)
    job = Job(1, "default", "k", {}, 0, now, 1, 3, 1, now, now)

    def timeout(signum: int, frame: Any) -> None:
        raise JobTimeout

    previous = signal.signal(signal.SIGALRM, timeout)
    try:
        with psycopg.connect(dsn) as locker:
            # The lease check now waits on the lock: the timeout lands mid-call.
            locker.execute("LOCK TABLE pgq.jobs IN ACCESS EXCLUSIVE MODE")
            signal.setitimer(signal.ITIMER_REAL, 0.3)
            with pytest.raises(JobTimeout):
                worker.parts.lease_held(job)
            locker.rollback()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert session.conn is None
