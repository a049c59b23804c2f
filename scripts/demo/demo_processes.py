"""The demo's helper processes (the supervisor, the webhook receiver), tied to the demo's life.

Each runs in a session of its own, so a Ctrl-C on the terminal reaches the demo alone and the
demo decides the order of the shutdown: drain the supervisor first (its children finish their
jobs, then it stops its embedded PostgreSQL), then stop the receiver the webhooks go to. Should
the demo itself die without cleaning up (kill -9), the kernel sends each helper SIGTERM, and the
supervisor drains and stops its server as on a deploy.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import selectors
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import psutil

PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None] | None:
    """A preexec_fn asking the kernel to TERM the new process when `parent` dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arrange() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the demo died before the line above took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return arrange


class Helper:
    """A subprocess of the demo, with its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, cwd: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        # Every process seen in the helper's tree, kept as psutil handles: a handle notices when
        # its pid has been reused by an unrelated process, so cleanup never signals a stranger.
        self.seen: dict[int, psutil.Process] = {}

    def start(self, env: dict[str, str] | None = None, *, pipe_stdout: bool = False) -> Helper:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipe_stdout else log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_die_with(os.getpid()),
            )
        with contextlib.suppress(psutil.Error):
            self.seen[self.proc.pid] = psutil.Process(self.proc.pid)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def read_line(self, timeout: float) -> str:
        """The next line of the helper's piped stdout; empty if none came in time."""
        assert self.proc is not None and self.proc.stdout is not None
        stream: IO[bytes] = self.proc.stdout
        with selectors.DefaultSelector() as selector:
            selector.register(stream, selectors.EVENT_READ)
            if not selector.select(timeout):
                return ""
        return stream.readline().decode(errors="replace").strip()

    def children(self) -> list[psutil.Process]:
        """The helper's descendants now; every pid ever seen is remembered in `seen`."""
        try:
            found = psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []
        self.seen.update((p.pid, p) for p in found)
        return found

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 5.0) -> int | None:
        """TERM, and KILL after `grace` seconds; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


class Sink(Helper):
    """The webhook receiver, `python -m examples.sink`, on a free port."""

    def __init__(self, fail_rate: float, log_path: Path, *, cwd: Path) -> None:
        argv = [sys.executable, "-u", "-m", "examples.sink", "--port", "0"]
        argv += ["--fail-rate", str(fail_rate), "--seed", "5"]
        super().__init__("webhook receiver", argv, log_path, cwd=cwd)
        self.url = ""

    def start_listening(self, timeout: float = 15.0) -> bool:
        """Start it and read its URL from the line it prints; False if it did not come up."""
        self.start(pipe_stdout=True)
        line = self.read_line(timeout)
        if "listening on " not in line:
            return False
        self.url = line.split("listening on ", 1)[1].split()[0]
        return True

    def counts(self) -> tuple[int, int] | None:
        """(deliveries accepted, unique Idempotency-Keys), as the receiver counts them."""
        if not self.running():
            return None
        with contextlib.suppress(OSError, ValueError, KeyError):
            with urllib.request.urlopen(self.url, timeout=2) as answer:
                counts = json.load(answer)
            return int(counts["deliveries"]), int(counts["unique"])
        return None


def stop_supervisor(
    supervisor: Helper, drain_timeout: float, say: Callable[[str], None]
) -> int | None:
    """Stop the supervisor the way an operator would, and wait for it to exit.

    TERM asks for a graceful drain (children finish their jobs, give the rest back, the embedded
    server stops). A Ctrl-C while waiting, or a drain past its timeout, sends a second TERM,
    which the supervisor reads as "stop now"; if even that does not end it, KILL."""
    proc = supervisor.proc
    if proc is None:
        return None
    steps = [
        (signal.SIGTERM, drain_timeout, "draining the supervisor (Ctrl-C again: stop now)"),
        (signal.SIGTERM, 30.0, "stopping the supervisor now (Ctrl-C again: kill it)"),
        (signal.SIGKILL, 10.0, "killing the supervisor"),
    ]
    for signum, timeout, doing in steps:
        # A Ctrl-C anywhere in a step moves on to the next, harder one.
        try:
            if proc.poll() is not None:
                break
            supervisor.children()  # remember who must be gone afterwards
            say(doing)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)
            proc.wait(timeout)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            continue
    with signals_held():
        if proc.poll() is None:
            return None
        _wait_gone([p for pid, p in supervisor.seen.items() if pid != proc.pid], 10.0)
    return proc.returncode


def _wait_gone(procs: list[psutil.Process], timeout: float) -> None:
    """Children leave after their master (they check for it, and the kernel signals them)."""
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, TERM and HUP do nothing inside: the block starts and stops a server, and an
    exception in the middle of that would leave it running. The demo is stopping anyway.
    (A handler that does nothing, not SIG_IGN: programs started meanwhile, pg_ctl and the
    server, would inherit an ignored signal.)"""
    stopping = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, _nothing) for s in stopping}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _nothing(signum: int, frame: object) -> None:
    pass
