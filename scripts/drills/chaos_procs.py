"""Processes of the chaos drill: supervisor incarnations, and a watch on everything they fork.

Every incarnation starts in a session of its own, so every process it ever forks (children,
their subprocesses, orphans of a killed master) carries the master's pid as its session id,
even after it is reparented. The tracker samples /proc to remember which process belonged to
which incarnation (pids are reused: the kernel here hands out at most 32768 of them), and at
the end finds anything of any incarnation still alive.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_BOOT_TIME = psutil.boot_time()


@dataclass(frozen=True)
class Seen:
    pid: int
    ppid: int
    sid: int
    pgid: int
    started: float  # wall clock


def _stat(pid: int) -> Seen | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None  # a zombie is dead, whoever has yet to reap it
    return Seen(
        pid=pid,
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        started=_BOOT_TIME + int(fields[19]) / _CLOCK_TICKS,
    )


def alive_in_sessions(sids: set[int]) -> list[Seen]:
    """Every live (non-zombie) process whose session is one of sids."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            seen = _stat(int(name))
            if seen is not None and seen.sid in sids:
                found.append(seen)
    return found


@dataclass
class Incarnation:
    """One run of `python -m supervisor.cli -c FILE`."""

    number: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float = field(default_factory=time.time)
    ended: float | None = None
    end: str = ""  # how it ended: "deploy", "master_kill", "final", "exited"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def children(self, busy_only: bool = False) -> list[int]:
        """The worker processes (the master's direct children) now; with busy_only, those
        whose process title shows a job in hand."""
        try:
            children = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        found = []
        for child in children:
            try:
                title = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if not busy_only or " job " in title:
                found.append(child.pid)
        return found


def start_incarnation(
    number: int, root: Path, workdir: Path, config: Path, dsn: str, host: str | None = None
) -> Incarnation:
    """``host``: the supervisor's host identity (PGQ_HOST), so several on one machine act as
    several hosts."""
    log_path = workdir / f"supervisor-{number}.log"
    env = {
        **os.environ,
        "PGQ_DSN": dsn,
        "PYTHONPATH": os.pathsep.join([str(root), str(root / "scripts" / "drills")]),
    }
    if host is not None:
        env["PGQ_HOST"] = host
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "-c", str(config)],
            cwd=root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Its own session: a Ctrl-C on our terminal reaches us only, and the session id
            # marks every process it ever forks.
            start_new_session=True,
        )
    return Incarnation(number, proc, log_path)


class Tracker:
    """Samples /proc in the background, remembering every process of every incarnation."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.sids: set[int] = set()
        self.seen: dict[tuple[int, float], Seen] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tracker", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def add(self, incarnation: Incarnation) -> None:
        with self._lock:
            self.sids.add(incarnation.pid)
        self.sample()

    def sample(self) -> None:
        with self._lock:
            sids = set(self.sids)
        for seen in alive_in_sessions(sids):
            with self._lock:
                self.seen.setdefault((seen.pid, round(seen.started, 2)), seen)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):
                self.sample()

    def session_of(self, pid: int, at: float) -> int | None:
        """The incarnation (master pid) that process pid belonged to at wall time `at`."""
        with self._lock:
            candidates = [s for s in self.seen.values() if s.pid == pid and s.started <= at + 1]
        if not candidates:
            return None
        return max(candidates, key=lambda s: s.started).sid

    def leftovers(self) -> list[Seen]:
        with self._lock:
            sids = set(self.sids)
        return alive_in_sessions(sids)


def kill_sessions(sids: set[int]) -> int:
    """SIGKILL everything left in these sessions (cleanup on any exit); returns how many."""
    killed = 0
    for seen in alive_in_sessions(sids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(seen.pid, signal.SIGKILL)
            killed += 1
    return killed
