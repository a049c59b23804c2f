"""Running the real supervisor as a subprocess, and waiting on what it does."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import psycopg

from tests.commands import ROOT

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T],
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Poll until condition() is truthy; return its value."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class Supervisor:
    """A `pgq-supervisor -c FILE` process against a test database."""

    def __init__(
        self,
        tmp_path: Path,
        dsn: str,
        yaml_text: str,
        *,
        name: str = "sup",
        extra_env: dict[str, str] | None = None,
        args: list[str] | None = None,
    ) -> None:
        self.dsn = dsn
        self.config = tmp_path / f"{name}.yaml"
        self.config.write_text(textwrap.dedent(yaml_text))
        self.log_path = tmp_path / f"{name}.log"
        self.env = {**os.environ, "PGQ_DSN": dsn, "PYTHONPATH": str(ROOT), **(extra_env or {})}
        self.args = args or []
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Supervisor:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "-c", str(self.config), *self.args],
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 30.0) -> None:
        wait_for(lambda: text in self.log(), timeout, what=f"log line {text!r}\n{self.log()}")

    def children(self) -> list[psutil.Process]:
        """Live children; a child that exited but is not yet reaped does not count."""
        try:
            found = psutil.Process(self.pid).children()
        except psutil.NoSuchProcess:
            return []
        live = []
        for child in found:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
                if child.status() != psutil.STATUS_ZOMBIE:
                    child.cmdline()  # still readable: not gone in between
                    live.append(child)
        return live

    def wait_children(self, n: int, timeout: float = 30.0) -> list[psutil.Process]:
        return wait_for(
            lambda: len(self.children()) == n and self.children(),
            timeout,
            what=f"{n} children\n{self.log()}",
        )

    def send(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def wait(self, timeout: float = 60.0) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        finally:
            self._log.close()
        return code

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.send(signal.SIGTERM)
        return self.wait(timeout)

    def kill_everything(self) -> None:
        """Test teardown: never leave a supervisor or child behind."""
        if self.proc is None:
            return
        procs = []
        with_children = (
            psutil.Process(self.pid).children(recursive=True) if self.proc.poll() is None else []
        )
        procs.extend(with_children)
        if self.proc.poll() is None:
            self.proc.kill()
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        self.proc.wait(10)


def query(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def scalar(dsn: str, sql: str, params: Any = None) -> Any:
    """The first column of the first row; None when there is no row (a wait_for condition)."""
    rows = query(dsn, sql, params)
    return rows[0][0] if rows else None


def processes_with_title(fragment: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if fragment in cmd:
            found.append(p)
    return found
