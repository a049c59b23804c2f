"""The reconciler: asks each kind's reconcile hook what happened to its unknown jobs.

A job of a kind declared ``effects: external`` whose attempt ended without an outcome waits in
'unknown' (supervisor/queue/unknown.py). When such a kind has a hook (``jobs: {KIND: {reconcile:
"module:function"}}``), this service calls it with the job's id, kind, args, attempt and keys,
and applies its answer: 'completed', 'retry' or 'discarded'. An error, a timeout or any other
answer leaves the job unknown, asked again after a backoff that doubles.

Hooks are the operator's code and ask outside systems (a payment provider) that may hang; the
master is single-threaded and must never wait on them. So a round runs in a short-lived process
forked for it: it takes a batch of due jobs (moving their run_at ahead, which is also the
round's fence), calls the hooks, writes the answers on its own connection and exits. The master
only probes an index before forking (one indexed EXISTS) and, on later turns, reaps the round or
kills it once it outlives ``reconcile.timeout``. One round at a time per supervisor; rounds on
several hosts take different jobs (SKIP LOCKED, then the moved run_at).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import Callable, Collection
from datetime import datetime
from typing import Any

import psycopg

from supervisor.crypto.opening import opened
from supervisor.crypto.opening import scrub as scrub_opened
from supervisor.queue.dsn import connect
from supervisor.queue.queries import query
from supervisor.queue.unknown import RESOLUTIONS, UnknownOutcome, resolve
from supervisor.services.base import Host, Service
from supervisor.shared.forking import heap_frozen_for_fork
from supervisor.shared.redact import scrub

log = logging.getLogger("pgq.reconcile")

PR_SET_PDEATHSIG = 1


Hook = Callable[[UnknownOutcome], Any]


class Reconciler(Service):
    """Forks one round of reconcile hooks when unknown jobs with hooks are due."""

    name = "reconciler"

    def __init__(self, host: Host, hooks: dict[str, Hook]) -> None:
        config = host.config.reconcile
        super().__init__(host, config.interval, first_in=min(2.0, config.interval))
        self.hooks = hooks
        self.pid: int | None = None
        self.started = 0.0

    def run_once(self) -> None:
        if self.pid is not None and not self._reap():
            return
        if not self.hooks:
            return
        due = self.host.db.run(
            "reconcile probe",
            lambda conn: conn.execute(
                query("reconcile_due"), {"kinds": list(self.hooks)}
            ).fetchone(),
        )
        if due and due[0]:
            self._fork()

    def _reap(self) -> bool:
        """True once no round is running (reaped now, or killed past its timeout)."""
        assert self.pid is not None
        try:
            pid, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # the master's reaping loop took it first
            pid = self.pid
        if pid:
            self.pid = None
            return True
        if time.monotonic() - self.started > self.host.config.reconcile.timeout:
            log.warning(
                "reconcile round (pid %s) still running after %.0fs (reconcile.timeout); killed; "
                "its jobs stay unknown and are asked again later",
                self.pid,
                self.host.config.reconcile.timeout,
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        return False

    def _fork(self) -> None:
        config = self.host.config
        master = os.getpid()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals))
        try:
            with heap_frozen_for_fork():
                pid = os.fork()
        except OSError as exc:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)
            log.error("could not fork a reconcile round: %s", exc)
            return
        if pid == 0:
            code = 1
            try:
                _after_fork(master)
                code = run_round(
                    self.host.dsn,
                    self.hooks,
                    limit=config.reconcile.batch,
                    hold=config.reconcile.timeout + config.reconcile.interval,
                    backoff=config.reconcile.interval,
                    history=config.history.enabled,
                    pooled=config.database.pooled,
                    redact=config.web.redact,
                )
            except BaseException:  # whatever happens, never return into the master's loop
                log.exception("reconcile round failed")
            finally:
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        self.pid, self.started = pid, time.monotonic()


def _after_fork(master: int) -> None:
    # The master's wake-up pipe and handlers are not ours; its connections are never touched
    # (closing an inherited libpq connection would end the master's session), and we leave
    # with os._exit.
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGALRM):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != master:
        os._exit(1)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)


def run_round(
    dsn: str,
    hooks: dict[str, Hook],
    *,
    limit: int,
    hold: float,
    backoff: float,
    history: bool,
    pooled: bool = False,
    redact: Collection[str] = (),
) -> int:
    """Take up to ``limit`` due unknown jobs, ask their hooks, write the answers. Returns 0."""
    with connect(
        dsn, application_name="pgq-supervisor reconcile", autocommit=True, pooled=pooled
    ) as conn:
        rows = conn.execute(
            query("reconcile_take"), {"kinds": list(hooks), "limit": limit, "hold": hold}
        ).fetchall()
        for row in rows:
            job = UnknownOutcome(*row[:-1])
            token = row[-1]
            try:
                _ask(
                    conn,
                    hooks[job.kind],
                    job,
                    token,
                    backoff=backoff,
                    history=history,
                    redact=redact,
                )
            except psycopg.Error as exc:
                # One job's answer that cannot be written (autocommit: nothing else is undone)
                # must not leave the rest of the round held and unasked.
                log.error(
                    "reconcile answer for job %s (%s) on queue %s could not be written: %s: "
                    "%s; it stays unknown and is asked again after the round's hold",
                    job.id,
                    job.kind,
                    job.queue,
                    type(exc).__name__,
                    exc,
                    extra={"job_id": job.id, "kind": job.kind, "queue": job.queue},
                )
                if conn.closed:
                    log.error(
                        "reconcile round lost its connection; the round's other jobs stay "
                        "unknown and are asked again after its hold"
                    )
                    break
    return 0


def _ask(
    conn: psycopg.Connection[Any],
    hook: Hook,
    job: UnknownOutcome,
    token: datetime,
    *,
    backoff: float,
    history: bool,
    redact: Collection[str] = (),
) -> None:
    fields = {"job_id": job.id, "kind": job.kind, "queue": job.queue, "attempt": job.attempt}
    shown = job
    try:
        shown = opened(job)  # encrypted args opened for the hook alone
        answer = hook(shown)
    except BaseException as exc:  # a hook's SystemExit is its failure, not the round's end
        # The hook's message may quote the job's arguments: their redacted values stay out, and
        # so do the opened values of encrypted ones.
        said = scrub(f"{type(exc).__name__}: {exc}", job.args, redact)
        if shown is not job:
            said = scrub_opened(said, [shown.args]) or said
        _defer(conn, job, token, backoff, f"reconcile hook failed: {said}")
        log.warning(
            "reconcile hook of job %s (%s) on queue %s failed: %s; it stays unknown",
            job.id,
            job.kind,
            job.queue,
            said,
            extra=fields,
        )
        return
    if answer not in RESOLUTIONS:
        _defer(
            conn,
            job,
            token,
            backoff,
            scrub(
                f"reconcile hook gave no answer ({answer!r}); it must return one of ",
                job.args,
                redact,
            )
            + ", ".join(repr(r) for r in RESOLUTIONS),
        )
        log.warning(
            "reconcile hook of job %s (%s) answered %s, not one of %s; it stays unknown",
            job.id,
            job.kind,
            scrub(repr(answer), job.args, redact),
            ", ".join(RESOLUTIONS),
            extra=fields,
        )
        return
    done = resolve(conn, [job.id], answer, history=history, token=token)
    if done and done[0].state == "held":
        error = f"reconcile hook answered retry, but job {done[0].holder} holds its unique key"
        _defer(conn, job, token, backoff, error)
        log.warning(
            "job %s (%s) on queue %s not retried: job %s holds its unique key; it stays unknown",
            job.id,
            job.kind,
            job.queue,
            done[0].holder,
            extra=fields,
        )
        return
    if done:
        log.info(
            "job %s (%s) on queue %s reconciled as %s by its hook",
            job.id,
            job.kind,
            job.queue,
            answer,
            extra=fields,
        )


def _defer(
    conn: psycopg.Connection[Any], job: UnknownOutcome, token: datetime, base: float, error: str
) -> None:
    conn.execute(
        query("reconcile_defer"), {"id": job.id, "token": token, "base": base, "error": error}
    )
