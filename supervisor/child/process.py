"""The child's process: what it arranges right after the fork, its signals, its title.

Right after the fork the child arranges to die with the master, takes its own process group (so
a timeout kill takes a renderer's subprocesses with it), drops the master's descriptors and
seeds its own randomness. Signals: SIGTERM means "drain" (stop claiming, give back claimed jobs
not yet started, finish the ones in hand, exit); if the job in hand is past its kind's timeout
(the master sends SIGTERM to the whole process group then), the handler is interrupted with
JobTimeout instead, or JobCancelled when the master stopped it for a cancel.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import select
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from supervisor.child.executor import Executor, JobCancelled, JobTimeout, Orphaned
from supervisor.shared.board import Board, State
from supervisor.shared.proctitle import child_title, set_title

if TYPE_CHECKING:
    from supervisor.child.spec import ChildSpec

log = logging.getLogger("pgq.worker")

PR_SET_PDEATHSIG = 1
# After the master dies, the kernel kills a child that has not left within this many seconds,
# even one stuck in native code.
ORPHAN_GRACE = 5


class ChildProcess:
    """The process side of a child: its signal pipe, its drain and orphan flags, its pipes to
    the master."""

    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.board: Board = spec.board
        self.label = f"{spec.pool.name}#{spec.slot}"
        self.draining = False
        self.orphaned = False
        self.executor: Executor | None = None  # set once built: signals raise into its handlers
        self.signal_r = self.signal_w = -1

    def after_fork(self) -> None:
        # The master's signal wake-up pipe must never hear about our signals.
        signal.set_wakeup_fd(-1)
        self.signal_r, self.signal_w = os.pipe()
        for fd in (self.signal_r, self.signal_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self.signal_w)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGUSR1, self._on_cancel)
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
        executor = self.executor
        in_handler = executor is not None and executor.in_handler(frame)
        if os.getppid() != self.spec.master_pid:
            self.orphaned = True
            signal.alarm(ORPHAN_GRACE)
            if in_handler:
                raise Orphaned
            return
        if not in_handler or executor is None:
            return
        running = self.board.running_jobs()
        if running and running[0].job_id in self.board.cancelled_jobs():
            raise JobCancelled
        deadline = executor.deadline
        if deadline is not None and time.monotonic() >= deadline:
            raise JobTimeout

    def _on_cancel(self, signum: int, frame: Any) -> None:
        """The master's word that a job this child runs was cancelled (the master's cancel
        watch): the job in hand ends cancelled if the board names it, and the child then leaves,
        its process group (the handler's subprocesses) ended by the master. A child that has
        moved on to another job since the master looked is left alone: its job is innocent.
        Outside the handler's code nothing happens; the master asks again a second later."""
        executor = self.executor
        if executor is None or not executor.in_handler(frame):
            return
        running = self.board.running_jobs()
        if running and running[0].job_id in self.board.cancelled_jobs():
            self.draining = True
            raise JobCancelled

    def _refresh_title(self) -> None:
        kinds = self.spec.kinds
        pool, slot = self.spec.pool.name, self.spec.slot
        while True:
            running = self.board.running_jobs()
            state = self.board.state.name.lower()
            if running:
                job = running[0]
                kind = kinds[job.kind_index] if 0 <= job.kind_index < len(kinds) else None
                more = f" +{len(running) - 1}" if len(running) > 1 else ""
                title = child_title(
                    pool, slot, state + more, kind=kind, job_id=job.job_id, started=job.started
                )
            else:
                title = child_title(pool, slot, state)
            set_title(title)
            time.sleep(1.0)

    def report(self, message: bytes) -> None:
        """Tell the master: b"R" ready, b"M" a full batch (wake a sibling), b"S" scheduled."""
        with contextlib.suppress(OSError):
            os.write(self.spec.report_fd, message)

    def sleep(self, seconds: float) -> None:
        """Wait, but wake at once for a signal (a drain must not wait out a backoff)."""
        self.wait([], seconds)

    def wait(self, fds: list[int], seconds: float) -> list[int]:
        """Wait for one of ``fds`` or a signal; the ready ones, the signal pipe drained."""
        ready, _, _ = select.select([self.signal_r, *fds], [], [], seconds)
        if self.signal_r in ready:
            drain(self.signal_r)
        return [fd for fd in ready if fd != self.signal_r]

    def leave_group(self) -> None:
        """An orphan's last act: take every process of its group (its handlers' subprocesses)."""
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGKILL)


def read_all(fd: int) -> bytes:
    """Everything waiting on a non-blocking pipe."""
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
    return b"".join(chunks)


def drain(fd: int) -> None:
    read_all(fd)
