"""Handlers for lifecycle tests. They run in real forked children.

Every execution that matters is recorded in a ledger table (job id, attempt, pid) on the
child's own connection, opened lazily after the fork, so tests can count exactly how many times
each job ran and where.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import time
from typing import Any

import psycopg

from supervisor import JobContext, Retry

_conn: dict[int, psycopg.Connection[Any]] = {}

LEDGER = """
CREATE TABLE IF NOT EXISTS test_ledger (
    job_id   bigint      NOT NULL,
    attempt  integer     NOT NULL,
    pid      integer     NOT NULL,
    event    text        NOT NULL DEFAULT 'ran',
    at       timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def _db() -> psycopg.Connection[Any]:
    pid = os.getpid()
    # A new connection after the old one broke (a database restart in a fault test).
    if pid not in _conn or _conn[pid].closed:
        # PGQ_LEDGER_DSN: a direct connection when the supervisor's own goes through a pooler.
        ledger = os.environ.get("PGQ_LEDGER_DSN") or os.environ["PGQ_DSN"]
        _conn[pid] = psycopg.connect(ledger, autocommit=True)
    return _conn[pid]


def _record(job: JobContext, event: str = "ran") -> None:
    _db().execute(
        "INSERT INTO test_ledger (job_id, attempt, pid, event) VALUES (%s, %s, %s, %s)",
        (job.id, job.attempt, os.getpid(), event),
    )


def noop(**_: Any) -> None:
    pass


def record(*, job: JobContext, **_: Any) -> None:
    _record(job)


def gc_frozen(*, job: JobContext) -> None:
    """Records how many objects the child's collector leaves alone (supervisor/shared/forking)."""
    _record(job, f"frozen {gc.get_freeze_count()}")


def sleep(seconds: float = 0.0, *, job: JobContext, **_: Any) -> None:
    _record(job, "started")
    time.sleep(seconds)
    _record(job, "finished")


def sleep_offline(seconds: float, *, job: JobContext) -> None:
    """Records its start, then needs no database: it finishes fine through an outage."""
    _record(job, "started")
    time.sleep(seconds)


def busy(seconds: float, *, job: JobContext) -> None:
    """A CPU-bound handler: no sleeping, no heartbeats."""
    _record(job, "started")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))
    _record(job, "finished")


def hang_native(seconds: float, *, job: JobContext) -> None:
    """Stuck in native code: no Python bytecode runs, so no signal handler can interrupt it."""
    _record(job, "started")
    libc = ctypes.CDLL(None)
    libc.sleep(int(seconds))


def hang_lock(*, job: JobContext) -> None:
    """Stuck for good in native code: a thread locking a default pthread mutex it already
    holds waits in the kernel, which restarts the wait after any signal handler; no Python
    code runs again, so only SIGKILL ends it."""
    _record(job, "started")
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER on glibc
    libc.pthread_mutex_lock(mutex)
    libc.pthread_mutex_lock(mutex)


def spawn_and_hang(seconds: float, *, job: JobContext) -> None:
    """A renderer that started a helper ignoring SIGTERM, then hung."""
    import subprocess

    helper = subprocess.Popen(["sh", "-c", "trap '' TERM; exec sleep 120"])
    _db().execute(
        "INSERT INTO test_ledger (job_id, attempt, pid, event) VALUES (%s, %s, %s, 'helper')",
        (job.id, job.attempt, helper.pid),
    )
    _record(job, "started")
    time.sleep(seconds)


def hog(megabytes: int, seconds: float = 60.0, *, job: JobContext) -> None:
    """Takes far more memory than it should within one job, then keeps running."""
    _record(job, "started")
    held = b"x" * (megabytes << 20)  # written, not just reserved: it counts in USS
    time.sleep(seconds)
    del held


def leak(megabytes_per_job: int = 64, pause: float = 0.0, *, job: JobContext) -> None:
    """Keeps what it allocates, like a handler with a growing cache."""
    _record(job)
    _leaked.append(bytearray(os.urandom(1024)) * (megabytes_per_job * 1024))
    time.sleep(pause)


_leaked: list[bytearray] = []


def crash(how: str = "exit", *, job: JobContext) -> None:
    _record(job)
    if how == "exit":
        os._exit(13)
    if how == "segfault":
        ctypes.string_at(0)
    if how == "kill":
        os.kill(os.getpid(), 9)


def crash_once(*, job: JobContext, **_: Any) -> None:
    """Its first attempt kills its own worker process (SIGKILL); the next one succeeds."""
    _record(job)
    if job.attempt == 1:
        os.kill(os.getpid(), 9)


def fail(times: int = 1, *, job: JobContext) -> None:
    """Fails its first `times` attempts, then succeeds."""
    _record(job)
    if job.attempt <= times:
        raise RuntimeError(f"planned failure {job.attempt} of {times}")


def type_error_inside(seconds: float, *, job: JobContext) -> None:
    """Arguments that fit, then a TypeError raised by the handler's own code: an ordinary
    failure, retried (not a signature mismatch)."""
    _record(job)
    len(seconds)  # type: ignore[arg-type]


def fail_first_run(*, job: JobContext, **_: Any) -> None:
    """Fails the first time this job runs, whatever its attempt number (a replay resets it),
    and succeeds every time after."""
    ran_before = _db().execute("SELECT count(*) FROM test_ledger WHERE job_id = %s", (job.id,))
    first = ran_before.fetchone() == (0,)
    _record(job)
    if first:
        raise RuntimeError(f"planned failure: the first run of job {job.id}")


def retry_soon(*, job: JobContext) -> None:
    _record(job)
    if job.attempt == 1:
        raise Retry(0.1, "try again soon")


def record_queue(*, job: JobContext, **_: Any) -> None:
    """Records which queue each execution came from (the event column holds it)."""
    _record(job, job.queue)


def record_args(*, job: JobContext, **args: Any) -> None:
    """Records the arguments each execution received (the event column holds them, as JSON)."""
    _record(job, json.dumps(args, sort_keys=True))


def cooperative(seconds: float = 60.0, *, job: JobContext) -> None:
    """A threaded handler that stops when its job is cancelled, as the README recommends."""
    _record(job, "started")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if job.cancelled():
            _record(job, "saw_cancel")
            return
        time.sleep(0.05)
    _record(job, "finished")


def ten_steps(step_seconds: float = 0.3, *, job: JobContext) -> None:
    """Ten steps, checking the lease between them and stopping when it is lost, as the README
    says a handler should."""
    for step in range(10):
        if not job.lease_held():
            _record(job, f"stopped before step {step}")
            return
        _record(job, f"step {step}")
        time.sleep(step_seconds)
    _record(job, "all steps")


def chatty(asks: int = 50, attempts: int = 3, *, job: JobContext) -> None:
    """Asks lease_held() and cancelled() many times (a threaded pool's handler between its
    steps), then asks for a quick retry until its last attempt. Nothing is ever cancelled
    or lost in the test that runs it: any other answer is wrong."""
    _record(job)
    for _ in range(asks):
        if not job.lease_held() or job.cancelled():
            _record(job, "wrong answer")
            return
    if job.attempt < attempts:
        raise Retry(0, "again")


def wait_for_file(path: str, at_least: float = 0.5, *, job: JobContext, **_: Any) -> None:
    """Runs until ``path`` exists, and for at least ``at_least`` seconds (the batch it
    belongs to has waited that long when it returns)."""
    _record(job, "started")
    started = time.monotonic()
    while not os.path.exists(path) or time.monotonic() - started < at_least:
        time.sleep(0.02)
    _record(job, "finished")


def spin(loops: int = 2_000_000, *, job: JobContext) -> None:
    """A fixed amount of CPU work (not of wall time: a busy machine stretches that)."""
    _record(job, "started")
    sum(i * i for i in range(loops))


def paged(pages: int = 6, page_seconds: float = 0.5, calls: int = 100, *, job: JobContext) -> None:
    """An export of ``pages`` pages that reports its progress ``calls`` times a page."""
    _record(job, "started")
    for page in range(pages):
        for call in range(calls):
            job.progress((page + call / calls) / pages, f"page {page + 1} of {pages}")
            time.sleep(page_seconds / calls)
    job.progress(1.0, "done")
