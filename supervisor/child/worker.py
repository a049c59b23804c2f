"""A child process: claim -> run -> write outcomes, for one pool, until told to stop.

Forked by the master. Right after the fork it arranges to die with the master, takes its own
process group (so a timeout kill takes a renderer's subprocesses with it), drops the master's
descriptors and opens its own database connection: connections never cross a fork. It leaves
with os._exit, so nothing inherited from the master (atexit hooks, buffered files, the master's
connection objects) runs or is closed in the child.

Signals: SIGTERM means "drain": stop claiming, give back claimed jobs not yet started, finish
the one in hand, exit. If the job in hand is past its kind's timeout (the master sends SIGTERM to
the whole process group then), the handler is interrupted with JobTimeout instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import queue as queue_mod
import random
import select
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import psutil
import psycopg

from supervisor.child.execution import (
    Executor,
    JobCancelled,
    JobTimeout,
    Orphaned,
    Results,
    job_fields,
)
from supervisor.child.weights import WeightedQueues
from supervisor.queue import control, maintenance, outcomes
from supervisor.queue import jobs as jobs_api
from supervisor.queue.dsn import RECONNECT_ERRORS, DatabaseError, connect
from supervisor.queue.jobs import Job
from supervisor.shared import memory
from supervisor.shared.board import Board, Counter, State
from supervisor.shared.exits import ChildExit
from supervisor.shared.proctitle import child_title, set_title

if TYPE_CHECKING:
    from supervisor.config import Config, PoolConfig
    from supervisor.config.handlers import Handler

log = logging.getLogger("pgq.worker")

PR_SET_PDEATHSIG = 1
# After the master dies, the kernel kills a child that has not left within this many seconds,
# even one stuck in native code.
ORPHAN_GRACE = 5
MEMORY_CHECK_EVERY = 0.25
RECONNECT_MAX_DELAY = 5.0


class BootFailure(Exception):
    """The child cannot get ready and waiting will not help (e.g. the password is wrong)."""


@dataclass
class ChildSpec:
    """Everything a child needs, handed over by the fork itself (no pickling)."""

    config: Config
    pool: PoolConfig
    slot: int
    worker_id: str
    dsn: str
    handlers: Mapping[str, Handler]
    kinds: list[str]
    board: Board
    wake_fd: int  # read end: the master writes a byte here to wake an idle child
    report_fd: int  # write end: b"R" ready, b"M" a full batch (wake a sibling), b"S" scheduled
    master_pid: int
    max_jobs: int | None  # already jittered by the master
    inherited_fds: list[int]  # the master's descriptors, closed right after the fork


def child_main(make_spec: Callable[[], ChildSpec], close_fds: tuple[int, ...] = ()) -> NoReturn:
    """Everything the child runs from the fork on: whatever happens (building its spec
    included), it leaves through os._exit, never by unwinding into the master's loop."""
    code = ChildExit.CRASHED
    try:
        for fd in close_fds:
            os.close(fd)
        code = Worker(make_spec()).run()
    except BaseException:
        with contextlib.suppress(BaseException):
            log.exception("a child crashed before its worker loop began")
    finally:
        for stream in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


class Worker:
    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.pool = spec.pool
        self.board = spec.board
        self.draining = False
        self.orphaned = False
        self.conn: psycopg.Connection[Any] | None = None
        self.results = Results(
            on_scheduled=lambda: self._report(b"S"), on_unrecorded=self.board.set_unrecorded
        )
        self.jobs_run = 0
        self.last_memory_check = 0.0
        self.process = psutil.Process()
        self.woke_from_idle = False
        self.recycle: ChildExit | None = None
        self.in_hand: Job | None = None
        self.unstarted: list[Job] = []
        # Threaded pools: the jobs handed to handler threads and not yet back.
        self.handed_out: dict[int, Job] = {}
        self.queues = WeightedQueues(self.pool.queues)
        self.queue_names = list(self.pool.queues)
        self.hint: str | None = None
        self.executor = Executor(
            config=spec.config,
            pool=self.pool.name,
            worker_id=spec.worker_id,
            handlers=spec.handlers,
            kinds=spec.kinds,
            board=spec.board,
            lease_check=self._lease_held,
            cancel_check=self._cancel_requested,
            interruptible_thread=0 if self.pool.threads == 1 else None,
        )

    # -- lifecycle -------------------------------------------------------------------------

    def run(self) -> int:
        try:
            self._after_fork()
            if not self._connect():
                return ChildExit.DRAINED
            self.board.set_ready()
            self._report(b"R")
            code = self._loop_inline() if self.pool.threads == 1 else self._loop_threaded()
            # The master died while no handler code ran (no Orphaned raised): leave as orphans do.
            return self._leave_orphaned() if self.orphaned else code
        except BootFailure as exc:
            log.error(
                "%s#%s could not boot: %s",
                self.pool.name,
                self.spec.slot,
                exc,
                extra={"pool": self.pool.name},
            )
            return ChildExit.BOOT_FAILED
        except Orphaned:
            return self._leave_orphaned()
        except Exception:
            log.exception(
                "%s#%s crashed in its worker loop",
                self.pool.name,
                self.spec.slot,
                extra={"pool": self.pool.name},
            )
            return ChildExit.CRASHED

    def _after_fork(self) -> None:
        # The master's signal wake-up pipe must never hear about our signals.
        signal.set_wakeup_fd(-1)
        self._signal_r, self._signal_w = os.pipe()
        for fd in (self._signal_r, self._signal_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._signal_w)
        signal.signal(signal.SIGTERM, self._on_term)
        for ignored in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(ignored, signal.SIG_IGN)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        # Signals were blocked around the fork so none could reach the master's handlers here.
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        except (OSError, AttributeError):
            log.warning("no parent-death signal on this platform; orphans rely on polling")
        if os.getppid() != self.spec.master_pid:
            raise Orphaned  # the master died before the parent-death signal was armed
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        for fd in self.spec.inherited_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        # Children forked from one master share its random state; jitter must differ.
        random.seed()
        self.board.set_state(State.CONNECTING)
        threading.Thread(target=self._refresh_title, name="proctitle", daemon=True).start()

    def _on_term(self, signum: int, frame: Any) -> None:
        self.draining = True
        # Raise only into the handler's own code: a handler that already returned has
        # succeeded, and the success must be recorded as one, not turned into a failure.
        in_handler = self.executor.in_handler(frame)
        if os.getppid() != self.spec.master_pid:
            self.orphaned = True
            signal.alarm(ORPHAN_GRACE)
            if in_handler:
                raise Orphaned
            return
        if not in_handler:
            return
        running = self.board.running_jobs()
        if running and self.board.cancelled_job() == running[0].job_id:
            raise JobCancelled
        deadline = self.executor.deadline
        if deadline is not None and time.monotonic() >= deadline:
            raise JobTimeout

    def _refresh_title(self) -> None:
        kinds = self.spec.kinds
        while True:
            running = self.board.running_jobs()
            state = self.board.state.name.lower()
            if running:
                job = running[0]
                kind = kinds[job.kind_index] if 0 <= job.kind_index < len(kinds) else None
                more = f" +{len(running) - 1}" if len(running) > 1 else ""
                title = child_title(
                    self.pool.name,
                    self.spec.slot,
                    state + more,
                    kind=kind,
                    job_id=job.job_id,
                    started=job.started,
                )
            else:
                title = child_title(self.pool.name, self.spec.slot, state)
            set_title(title)
            time.sleep(1.0)

    def _report(self, message: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self.spec.report_fd, message)

    def _sleep(self, seconds: float) -> None:
        """Wait, but wake at once for a signal (a drain must not wait out a backoff)."""
        ready, _, _ = select.select([self._signal_r], [], [], seconds)
        if ready:
            _drain(self._signal_r)

    # -- the database ----------------------------------------------------------------------

    def _connect(self, *, through_drain: bool = False) -> bool:
        """Connect, retrying with capped backoff while the database is unreachable. False if
        told to stop first; ``through_drain`` (outcomes wait to be written) keeps trying while
        draining too, until the master's deadline ends this process or the master dies."""
        delay, warned = 0.1, 0.0
        self.board.set_state(State.CONNECTING)
        while not self.orphaned and (through_drain or not self.draining):
            try:
                self.conn = connect(
                    self.spec.dsn,
                    application_name=f"pgq-supervisor {self.pool.name}#{self.spec.slot}",
                    connect_timeout=self.spec.config.database.connect_timeout,
                    pooled=self.spec.config.database.pooled,
                )
                self._give_back_lost_claims()
                return True
            except DatabaseError as exc:
                if exc.permanent:
                    raise BootFailure(str(exc)) from None
                if time.monotonic() - warned > 30:
                    log.warning(
                        "%s#%s: %s; retrying",
                        self.pool.name,
                        self.spec.slot,
                        exc,
                        extra={"pool": self.pool.name},
                    )
                    warned = time.monotonic()
            self._sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, RECONNECT_MAX_DELAY)
        return False

    def _reconnect(self, *, through_drain: bool = False) -> bool:
        self._discard_connection()
        return self._connect(through_drain=through_drain)

    def _discard_connection(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()  # our own connection, opened after the fork
            self.conn = None

    def _held(self) -> list[int]:
        """The ids of every job this child holds in hand: running, waiting to start, or
        finished with its outcome not yet written."""
        held = [job.id for job in self.unstarted]
        held += list(self.handed_out)
        if self.in_hand is not None:
            held.append(self.in_hand.id)
        held += [job.id for job in self.results.done]
        held += [s.job.id for s in self.results.settled]
        return held

    def _give_back_lost_claims(self) -> None:
        """After a reconnect: a claim may have committed just as the old connection died, so
        its reply never came. Such jobs are ours on paper only; nobody would run them, and the
        master would renew their leases for as long as this child lives. Give them back
        without spending an attempt."""
        assert self.conn is not None
        try:
            moved = maintenance.requeue_worker(
                self.conn,
                self.spec.worker_id,
                "claim lost with the connection",
                spent=[],
                keep=self._held(),
            )
        except psycopg.Error as exc:
            # The master gives them back when this child leaves; nothing is lost meanwhile.
            log.warning(
                "%s#%s: could not look for claims lost with the connection: %s",
                self.pool.name,
                self.spec.slot,
                exc,
                extra={"pool": self.pool.name},
            )
            return
        for m in moved:
            log.warning(
                "job %s (%s) on queue %s given back without spending an attempt: its claim "
                "committed as the connection died, so this worker never received it",
                m.id,
                m.kind,
                m.queue,
                extra={
                    "job_id": m.id,
                    "kind": m.kind,
                    "queue": m.queue,
                    "attempt": m.attempts,
                    "pool": self.pool.name,
                },
            )

    def _ask_for_handler(self, question: Callable[[psycopg.Connection[Any]], bool]) -> bool:
        """A question a running handler asks on this child's connection; False when it cannot
        be answered (the callers' safe side: ownership unconfirmed, no cancel seen)."""
        if self.conn is None:
            return False
        try:
            return question(self.conn)
        except psycopg.Error:
            return False
        except BaseException:
            # A timeout or the master's death raised into the handler while this call was on
            # the wire: the connection is mid-protocol and must never be used again.
            self._discard_connection()
            raise

    def _lease_held(self, job: Job) -> bool:
        # Unconfirmed ownership behaves as lost.
        return self._ask_for_handler(lambda conn: jobs_api.lease_held(conn, job))

    def _cancel_requested(self, job: Job) -> bool:
        # Cannot tell: keep working; the master still stops a cancelled job.
        return self._ask_for_handler(
            lambda conn: control.cancel_requested(conn, job.id, job.lease_id)
        )

    def _claim(self, limit: int) -> list[Job]:
        """Claim from the queue the weights pick, falling through to the others when empty.
        Outcomes still waiting to be written go in the same round trip as the first claim."""
        assert self.conn is not None
        self.board.set_state(State.CLAIMING)
        config = self.spec.config

        def send(
            conn: psycopg.Connection[Any], queue: str, done: Sequence[Job]
        ) -> psycopg.Cursor[Any]:
            return jobs_api.send_claim(
                conn,
                queue,
                worker=self.spec.worker_id,
                limit=limit,
                lease_seconds=config.lease.duration,
                done=done,
                history=config.history.enabled,
            )

        # Woken for a particular queue: try it first, outside the weighted rotation (an idle
        # child is not taking anyone's share).
        hint, self.hint = self.hint, None
        order = (
            [hint, *(q for q in self.queue_names if q != hint)]
            if hint is not None
            else self.queues.order()
        )
        for queue in order:
            started = time.perf_counter()
            try:
                if self.results:
                    jobs = self.results.write(
                        self.conn,
                        self.board,
                        self.pool.name,
                        config.history.enabled,
                        claim=lambda conn, done, q=queue: send(conn, q, done),
                    )
                else:
                    jobs = jobs_api.read_claim(send(self.conn, queue, ())).jobs
            except RECONNECT_ERRORS as exc:
                log.warning(
                    "%s#%s: claim from queue %s failed: %s",
                    self.pool.name,
                    self.spec.slot,
                    queue,
                    exc,
                    extra={"pool": self.pool.name},
                )
                self._reconnect()
                return []
            except psycopg.Error as exc:
                log.error(
                    "%s#%s: claim from queue %s failed: %s",
                    self.pool.name,
                    self.spec.slot,
                    queue,
                    exc,
                    extra={"pool": self.pool.name},
                )
                self._sleep(1.0)
                return []
            self.board.observe_claim(time.perf_counter() - started)
            self.board.count(Counter.CLAIMS)
            if jobs:
                if self.woke_from_idle and len(jobs) == limit:
                    self._report(b"M")  # a burst arrived: ask the master to wake a sibling
                self.woke_from_idle = False
                return jobs
            self.board.count(Counter.CLAIMS_EMPTY)
        return []

    def _write_results(self) -> None:
        """Write outcomes, retrying through database outages: a finished job must not be
        recorded as lost just because the database blinked."""
        while self.results and self.results.ready():
            if self.conn is None and not self._reconnect(through_drain=True):
                return  # the master died: nobody is left to wait for
            assert self.conn is not None
            try:
                self.results.write(
                    self.conn, self.board, self.pool.name, self.spec.config.history.enabled
                )
                return
            except RECONNECT_ERRORS as exc:
                log.warning(
                    "%s#%s: cannot record the outcome of %d jobs: %s; retrying",
                    self.pool.name,
                    self.spec.slot,
                    len(self.results.done) + len(self.results.settled),
                    exc,
                    extra={"pool": self.pool.name},
                )
                if self.orphaned:
                    return
                self._reconnect(through_drain=True)
            except psycopg.Error as exc:
                # Not an outage: something refused a write (Results.write kept what it could
                # not record, and logged it). Carry on with other work; retried later.
                log.error(
                    "%s#%s: recording job outcomes failed: %s",
                    self.pool.name,
                    self.spec.slot,
                    exc,
                    extra={"pool": self.pool.name},
                )
                return

    # -- limits ----------------------------------------------------------------------------

    def _recycle_reason(self) -> ChildExit | None:
        """Whether this child should leave to be replaced; once decided, it stays decided
        (the memory check is rate-limited and would not say it twice)."""
        if self.recycle is None:
            self.recycle = self._check_limits()
        return self.recycle

    def _check_limits(self) -> ChildExit | None:
        max_jobs = self.spec.max_jobs
        if max_jobs is not None and self.jobs_run >= max_jobs:
            log.info(
                "%s#%s recycling after %d jobs (max_jobs)",
                self.pool.name,
                self.spec.slot,
                self.jobs_run,
                extra={"pool": self.pool.name},
            )
            return ChildExit.MAX_JOBS_RECYCLE
        limit = self.pool.memory_limit
        if limit is None:
            return None
        # RSS (a read of /proc/self/statm) is cheap and never below USS, so it screens every
        # job; USS, which walks the page tables, is measured only once RSS is over the limit,
        # and then at most every MEMORY_CHECK_EVERY (RSS also counts pages shared with the
        # master, so it can sit above the limit for good).
        rss = self.process.memory_info().rss
        self.board.set_memory(rss)
        now = time.monotonic()
        if rss > limit and now - self.last_memory_check >= MEMORY_CHECK_EVERY:
            self.last_memory_check = now
            uss = memory.uss()
            self.board.set_memory(uss)
            if uss > limit:
                log.warning(
                    "%s#%s recycling: memory %d MiB is above the soft limit of %d MiB",
                    self.pool.name,
                    self.spec.slot,
                    uss >> 20,
                    limit >> 20,
                    extra={"pool": self.pool.name},
                )
                return ChildExit.MEMORY_RECYCLE
        return None

    # -- single-threaded pools: handlers run on the main thread ------------------------------

    def _loop_inline(self) -> int:
        while not self.draining:
            reason = self._recycle_reason()
            if reason is not None:
                self._write_results()
                return reason
            claimed = self._claim(self.pool.batch)
            if claimed:
                self._run_batch(claimed)
            else:
                self._idle(self.pool.poll_interval)
        self.board.set_state(State.DRAINING)
        self._write_results()
        return ChildExit.DRAINED

    def _run_batch(self, claimed: list[Job]) -> None:
        self.board.set_state(State.RUNNING)
        self.unstarted = list(claimed)
        while self.unstarted:
            if self.draining or self._recycle_reason() is not None:
                self._release_unstarted()
                break
            job = self.in_hand = self.unstarted.pop(0)
            settlement = self.executor.run(job)
            self.in_hand = None
            self.results.add(job, settlement)
            self.jobs_run += 1
            # Outcomes that have waited long enough are written before the next job; after the
            # batch's last job they travel with the next claim, which follows at once.
            if self.unstarted and self.results.due():
                self._write_results()

    def _release_unstarted(self) -> None:
        for job in self.unstarted:
            self.results.add(job, outcomes.release(job))
        if self.unstarted:
            log.info(
                "%s#%s gave back %d claimed jobs it had not started",
                self.pool.name,
                self.spec.slot,
                len(self.unstarted),
                extra={"pool": self.pool.name},
            )
        self.unstarted = []

    def _idle(self, poll_interval: float, extra_fds: tuple[int, ...] = ()) -> None:
        """Wait for a wake-up from the master, a signal, or the poll interval (jittered so
        idle children do not poll in step)."""
        self.board.set_state(State.IDLE)
        fds = [self.spec.wake_fd, self._signal_r, *extra_fds]
        ready, _, _ = select.select(fds, [], [], poll_interval * random.uniform(0.5, 1.0))
        for fd in ready:
            if fd != self.spec.wake_fd:
                _drain(fd)
        if self.spec.wake_fd in ready:
            hints = [b for b in _read_all(self.spec.wake_fd) if 0 < b <= len(self.queue_names)]
            self.hint = self.queue_names[hints[-1] - 1] if hints else None
            self.woke_from_idle = True

    def _leave_orphaned(self) -> int:
        """The master is gone: give back what we hold and leave, taking our subprocesses."""
        log.warning(
            "%s#%s: the master (pid %s) died; giving back jobs and stopping",
            self.pool.name,
            self.spec.slot,
            self.spec.master_pid,
            extra={"pool": self.pool.name},
        )
        if self.in_hand is not None:
            self.results.add(
                self.in_hand,
                outcomes.retry(
                    self.in_hand, 0, "interrupted: the supervisor died while this job ran"
                ),
            )
        self._release_unstarted()
        if self.conn is not None:
            self._write_results()
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        return ChildExit.ORPHANED

    # -- threaded pools: handlers run on worker threads, the main thread claims and writes ----

    def _loop_threaded(self) -> int:
        """Claim on this thread, run on handler threads, write outcomes as they finish. Told
        to stop, it gives back what no thread has started and keeps writing outcomes until the
        last thread still working returns: one hung handler must not hold its siblings'
        finished work back, nor make it look unstarted."""
        work: queue_mod.SimpleQueue[Job | None] = queue_mod.SimpleQueue()
        done: queue_mod.SimpleQueue[tuple[Job, outcomes.Settlement | None]] = (
            queue_mod.SimpleQueue()
        )
        done_r, done_w = os.pipe()
        os.set_blocking(done_r, False)
        os.set_blocking(done_w, False)

        def handler_thread(index: int) -> None:
            while (job := work.get()) is not None:
                settlement = self.executor.run(job, thread=index)
                done.put((job, settlement))
                with contextlib.suppress(BlockingIOError):
                    os.write(done_w, b".")

        for i in range(self.pool.threads):
            threading.Thread(
                target=handler_thread, args=(i,), name=f"handler-{i}", daemon=True
            ).start()
        # Jobs recorded as timed out whose threads have not returned (a handler stuck in
        # native code cannot be interrupted); the process leaves without them.
        abandoned: set[int] = set()
        exit_code: int = ChildExit.DRAINED
        stopping = False
        while True:
            self._collect_finished(done, abandoned)
            if self.draining:
                stopping = True
                self._record_timeouts(abandoned)
            if stopping:
                self._take_back_unstarted(work)
            if self.results and (self.results.due() or not self.handed_out or stopping):
                self._write_results()
            if stopping and not self.handed_out.keys() - abandoned:
                break
            if not stopping:
                reason = self._recycle_reason()
                if reason is not None:
                    exit_code, stopping = reason, True
                    continue
            free = self.pool.threads - len(self.handed_out)
            if free > 0 and not stopping:
                claimed = self._claim(min(self.pool.batch, free))
                if claimed:
                    for job in claimed:
                        self.handed_out[job.id] = job
                        work.put(job)
                    self.board.set_state(State.RUNNING)
                    continue
            wait = self.pool.poll_interval if free > 0 else 1.0
            if self.results and self.results.ready():
                wait = min(wait, 0.02)
            if self.handed_out:
                self.board.set_state(State.DRAINING if stopping else State.RUNNING)
                ready, _, _ = select.select(
                    [done_r, self._signal_r, self.spec.wake_fd], [], [], wait
                )
                for fd in ready:
                    _drain(fd)
            else:
                self._idle(wait, (done_r,))
        self.board.set_state(State.DRAINING)
        for _ in range(self.pool.threads):
            work.put(None)
        return exit_code

    def _collect_finished(
        self,
        done: queue_mod.SimpleQueue[tuple[Job, outcomes.Settlement | None]],
        abandoned: set[int],
    ) -> None:
        while True:
            try:
                job, settlement = done.get_nowait()
            except queue_mod.Empty:
                return
            self.handed_out.pop(job.id, None)
            self.jobs_run += 1
            if job.id in abandoned:
                abandoned.discard(job.id)
                log.warning(
                    "job %s (%s) on queue %s returned after its timeout was recorded; "
                    "this late outcome is dropped",
                    job.id,
                    job.kind,
                    job.queue,
                    extra=job_fields(job, self.pool.name),
                )
                continue
            self.results.add(job, settlement)

    def _record_timeouts(self, abandoned: set[int]) -> None:
        """A handler thread cannot be interrupted: a job past its kind's timeout is recorded
        as timed out (spending its attempt) and its thread left behind, so its siblings can
        finish and be recorded before this child leaves."""
        now = time.monotonic()
        for running in self.board.running_jobs():
            job = self.handed_out.get(running.job_id)
            if (
                job is None
                or job.id in abandoned
                or job.lease_id != running.lease_id
                or running.deadline is None
                or now < running.deadline
            ):
                continue
            abandoned.add(job.id)
            self.results.add(job, self.executor.timed_out(job))
            log.warning(
                "job %s (%s) on queue %s is past its timeout after attempt %s; recorded as "
                "timed out, its thread abandoned",
                job.id,
                job.kind,
                job.queue,
                job.attempts,
                extra=job_fields(job, self.pool.name),
            )

    def _take_back_unstarted(self, work: queue_mod.SimpleQueue[Job | None]) -> None:
        """Jobs still in the hand-off queue never started: give them back."""
        while True:
            try:
                job = work.get_nowait()
            except queue_mod.Empty:
                break
            if job is not None:
                self.handed_out.pop(job.id, None)
                self.unstarted.append(job)
        self._release_unstarted()


def _read_all(fd: int) -> bytes:
    """Everything waiting on a non-blocking pipe."""
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    return b"".join(chunks)


def _drain(fd: int) -> None:
    _read_all(fd)
