"""The master's record of its children, and forking a new one.

A slot is a place in a pool that should always hold a live child. When its child dies, the slot
is refilled: at once after a clean exit (drained, recycled), after a capped, jittered backoff
after a crash, and the slot counts consecutive failed boots so the master can tell a crash loop
from a job that crashed a worker.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import signal
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from supervisor.child.spec import ChildSpec
from supervisor.child.worker import child_main
from supervisor.shared.board import Board, Counter, State
from supervisor.shared.exits import ExitReason
from supervisor.shared.forking import heap_frozen_for_fork
from supervisor.shared.head_walks import HeadWalks

if TYPE_CHECKING:
    from supervisor.config import Config, PoolConfig
    from supervisor.config.handlers import Handler

# A child that dies within this many seconds of its spawn without claiming anything failed to
# boot, like one that never got ready.
BOOT_WINDOW = 3.0
# Room on a child's board for the claims it holds, in batches-plus-threads: a batch in hand and
# the last one's outcomes waiting to be written fit twice over.
HELD_ROOM_PER_SLOT = 4
BACKOFF_FIRST = 0.1
BACKOFF_CAP = 30.0
# Signals the master handles; blocked across fork so none reaches a child before it installs
# its own handlers.
MASTER_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD, signal.SIGQUIT}


def host_identity(config: Config) -> str:
    """The name this supervisor goes by in worker ids and the registry: PGQ_HOST or the YAML's
    `host` (several supervisors on one machine acting as several hosts), else the machine's."""
    return config.host or socket.gethostname()


def worker_identity(host: str, pid: int, token: str) -> str:
    """Unique per process incarnation: a restarted host or a reused pid gets a new one."""
    return f"{host}:{pid}:{token}"


@dataclass
class Child:
    pid: int
    pool: str
    slot: int
    generation: int
    worker_id: str
    board: Board
    wake_fd: int
    report_fd: int
    spawned_at: float = field(default_factory=time.monotonic)
    spawned_wall: float = field(default_factory=time.time)
    draining: bool = False
    # Set when the master decided to kill it: why, and when TERM turns into KILL.
    kill_reason: str | None = None
    kill_at: float | None = None
    kill_grace: float = 0.0  # seconds from the TERM to kill_at, for the log
    closed: bool = False

    def kill_by(self, deadline: float, grace: float) -> None:
        """KILL at ``deadline`` unless gone before; an earlier deadline already set stands."""
        if self.kill_at is None or deadline < self.kill_at:
            self.kill_at, self.kill_grace = deadline, grace

    @property
    def age(self) -> float:
        return time.monotonic() - self.spawned_at

    def ready(self) -> bool:
        """Connected and claiming: not booting, not reconnecting, not on its way out."""
        return (
            self.board.ready
            and not self.draining
            and self.kill_reason is None
            and self.board.state not in (State.BOOTING, State.CONNECTING, State.DRAINING)
        )

    def failed_boot(self, reason: ExitReason) -> bool:
        if reason.clean:
            return False
        if not self.board.ready:
            return True
        return self.age < BOOT_WINDOW and self.board.counter(Counter.CLAIMS) == 0

    def signal_group(self, signum: int) -> None:
        """Signal the child's whole process group (its subprocesses too)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)

    def signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def wake(self, hint: int = 0) -> None:
        """Wake an idle child. ``hint`` is 1 + the index of the queue that just received work
        in the pool's queue list (0: no particular queue), so it claims there first."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self.wake_fd, bytes((hint,)))

    def close(self) -> None:
        self.closed = True  # its descriptors' numbers may be reused from now on
        for fd in (self.wake_fd, self.report_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.board.close()


@dataclass
class Slot:
    pool: str
    index: int
    child: Child | None = None
    failed_boots: int = 0
    crashes: int = 0
    next_spawn: float = 0.0
    last_failure: str = ""
    # An elastic pool's slot it shrank away: never refilled, its child (if any) draining, and
    # the first slot taken again when the pool grows.
    retired: bool = False

    def child_exited(self, child: Child, reason: ExitReason) -> float:
        """Update the slot's record; returns the delay before refilling it."""
        self.child = None
        if reason.clean:
            self.failed_boots = self.crashes = 0
            delay = 0.0
        else:
            self.crashes = self.crashes + 1 if child.age < 60 else 1
            self.failed_boots = self.failed_boots + 1 if child.failed_boot(reason) else 0
            self.last_failure = reason.describe()
            step = min(BACKOFF_FIRST * 2 ** (self.crashes - 1), BACKOFF_CAP)
            delay = step * random.uniform(0.5, 1.0)
        self.next_spawn = time.monotonic() + delay
        return delay


def jittered_max_jobs(max_jobs: int | None) -> int | None:
    """Spread recycles out: children started together must not all restart together."""
    if max_jobs is None:
        return None
    spread = max(1, max_jobs // 10)
    return max_jobs + random.randint(-spread, spread) if max_jobs > 1 else max_jobs


def spawn(
    *,
    config: Config,
    pool: PoolConfig,
    slot: int,
    generation: int,
    host: str,
    dsn: str,
    handlers: Mapping[str, Handler],
    kinds: list[str],
    inherited_fds: Callable[[], list[int]],
    head_walks: HeadWalks | None = None,
) -> Child:
    # Outcomes waiting to be written: at most a batch and what the threads hold besides.
    board = Board(
        pool.threads,
        unrecorded=pool.batch + pool.threads,
        queues=len(pool.queues),
        held=HELD_ROOM_PER_SLOT * (pool.batch + pool.threads),
    )
    wake_r, wake_w = os.pipe()
    report_r, report_w = os.pipe()
    for fd in (wake_r, wake_w, report_r, report_w):
        os.set_blocking(fd, False)
    token = secrets.token_hex(4)
    master_pid = os.getpid()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, MASTER_SIGNALS)
    try:
        with heap_frozen_for_fork():
            pid = os.fork()
        if pid == 0:  # the child; never returns, whatever the spec's making raises
            child_main(
                lambda: ChildSpec(
                    config=config,
                    pool=pool,
                    slot=slot,
                    worker_id=worker_identity(host, os.getpid(), token),
                    dsn=dsn,
                    handlers=handlers,
                    kinds=kinds,
                    board=board,
                    wake_fd=wake_r,
                    report_fd=report_w,
                    master_pid=master_pid,
                    max_jobs=jittered_max_jobs(pool.max_jobs),
                    inherited_fds=inherited_fds(),
                    head_walks=head_walks,
                ),
                close_fds=(wake_w, report_r),
            )
    finally:
        if os.getpid() == master_pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
    os.close(wake_r)
    os.close(report_w)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # also done by the child; whichever runs first wins the race
    return Child(
        pid=pid,
        pool=pool.name,
        slot=slot,
        generation=generation,
        worker_id=worker_identity(host, pid, token),
        board=board,
        wake_fd=wake_w,
        report_fd=report_r,
    )
