"""The host side of the embedded server: who runs it, what it may reach, which processes are its.

PostgreSQL refuses to run as root, so when we are root the server runs as an unprivileged
system user, who must be able to reach both the data directory and the server binaries.
Processes are recognised by their working directory: the postmaster and every child it forks
chdir into the data directory, which no pid file can get wrong after a crash or a reboot.
The pid file still says how to reach a running server, and whether it is ready.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

# The system user created (once) to run the server when we are root.
SERVICE_USER = "pgq-embedded"
# Names an existing user to run the server as instead (e.g. where useradd is not allowed).
SERVICE_USER_ENV = "PGQ_EMBEDDED_USER"


class EmbeddedError(RuntimeError):
    """The embedded server could not be prepared, started or stopped."""


@dataclass(frozen=True)
class PidFile:
    """postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shm, status."""

    pid: int
    port: int
    socket_dir: str
    listen: str
    status: str

    @classmethod
    def read(cls, data_dir: Path) -> PidFile | None:
        path = data_dir / "postmaster.pid"
        try:
            lines = path.read_text().splitlines()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except PermissionError:
            raise EmbeddedError(
                f"cannot read {path}: run as root or as the owner of {data_dir}"
            ) from None
        # The postmaster fills the file in as it starts, so it may still be short.
        lines += [""] * (8 - len(lines))
        try:
            pid, port = abs(int(lines[0])), int(lines[3] or 5432)
        except ValueError:
            return None
        return cls(pid, port, lines[4].strip(), lines[5].strip(), lines[7].strip())


def tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log, for error messages."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - 16384))
            text = handle.read().decode(errors="replace")
    except OSError as exc:
        return f"({path} unreadable: {exc.strerror})"
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class RunAs:
    """The user the server's programs run as."""

    name: str
    uid: int
    gid: int

    @property
    def is_self(self) -> bool:
        return self.uid == os.geteuid()

    def popen_kwargs(self) -> dict[str, Any]:
        """subprocess arguments that drop to this user (only ever needed when we are root)."""
        if self.is_self:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def can_traverse(self, st: os.stat_result) -> bool:
        if st.st_uid == self.uid:
            return bool(st.st_mode & stat.S_IXUSR)
        if st.st_gid in os.getgrouplist(self.name, self.gid):
            return bool(st.st_mode & stat.S_IXGRP)
        return bool(st.st_mode & stat.S_IXOTH)


def run_as_for(data_dir: Path) -> RunAs:
    """Ourselves, unless we are root: then the data directory's owner, or the service user."""
    if os.geteuid() != 0:
        entry = pwd.getpwuid(os.geteuid())
        return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)
    if (data_dir / "PG_VERSION").is_file():
        owner = data_dir.stat().st_uid
        if owner != 0:
            # A data directory made by an earlier non-root run keeps its owner: PostgreSQL
            # insists that the server runs as the owner of its files.
            entry = pwd.getpwuid(owner)
            return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)
    override = os.environ.get(SERVICE_USER_ENV)
    entry = _existing_user(override) if override else _ensure_service_user(SERVICE_USER)
    if entry.pw_uid == 0:
        raise EmbeddedError(
            f"{SERVICE_USER_ENV}={override} is root; PostgreSQL refuses to run as root"
        )
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _existing_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise EmbeddedError(f"{SERVICE_USER_ENV} names user {name!r}, who does not exist") from None


def _ensure_service_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    command = [
        "useradd",
        "--system",
        "--user-group",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        "/usr/sbin/nologin",
        "--comment",
        "pgq-supervisor embedded PostgreSQL",
        name,
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise EmbeddedError(
            f"PostgreSQL cannot run as root and useradd is missing: create a user and set "
            f"{SERVICE_USER_ENV} to its name"
        ) from None
    try:
        # Looked up again whatever useradd said: another process may have created it first.
        return pwd.getpwnam(name)
    except KeyError:
        detail = (result.stderr or result.stdout).strip()
        raise EmbeddedError(f"could not create system user {name!r}: {detail}") from None


def grant_traverse(path: Path, who: RunAs) -> list[Path]:
    """Add o+x to each directory from / down to path that `who` cannot pass through.

    Only the search bit, never read or write: the server's user must reach its data directory
    and its binaries, but need not list anything on the way. Returns the directories changed.
    """
    changed: list[Path] = []
    if who.is_self:
        return changed
    for directory in [*reversed(path.parents), path]:
        st = directory.stat()
        if not who.can_traverse(st):
            os.chmod(directory, stat.S_IMODE(st.st_mode) | stat.S_IXOTH)
            changed.append(directory)
    return changed


def ensure_private_dir(path: Path, who: RunAs) -> None:
    """A directory owned by `who`, mode 0700; one we did not make ourselves must already be so.

    The short socket directories live in /tmp, where anyone could have made the name first.
    """
    try:
        path.mkdir(mode=0o700)
        created = True
    except FileExistsError:
        created = False
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        raise EmbeddedError(f"{path} exists and is not a directory")
    if st.st_uid != who.uid:
        if not (created or st.st_uid == os.geteuid()):
            raise EmbeddedError(f"{path} belongs to uid {st.st_uid}, not to {who.name}; remove it")
        os.chown(path, who.uid, who.gid)
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


def give(path: Path, who: RunAs) -> None:
    """Hand a file or directory we created to the server's user."""
    if not who.is_self:
        os.chown(path, who.uid, who.gid)


def processes_in(data_dir: Path) -> list[psutil.Process]:
    """Every live PostgreSQL process (postmaster or child) working in data_dir."""
    found: list[psutil.Process] = []
    for proc in psutil.process_iter(["name"]):
        if proc.info["name"] != "postgres":
            continue
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and Path(proc.cwd()) == data_dir:
                found.append(proc)
        except psutil.Error:
            # Gone meanwhile, or another user's process we may not inspect: not ours either,
            # since the server runs as us or (when we are root) we may inspect everything.
            continue
    return found


def is_postmaster_of(pid: int, data_dir: Path) -> psutil.Process | None:
    """The process `pid`, if it is alive and a PostgreSQL process of data_dir; else None."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            reap(proc)
            return None
        # The name as well as the directory: an operator's shell may sit in the data directory.
        if proc.name() == "postgres" and Path(proc.cwd()) == data_dir:
            return proc
    except psutil.Error:
        pass
    return None


def reap(proc: psutil.Process) -> None:
    """Collect a dead postmaster if it became our child (we may be a child subreaper)."""
    try:
        if proc.ppid() == os.getpid():
            os.waitpid(proc.pid, os.WNOHANG)
    except (psutil.Error, ChildProcessError):
        pass


def wait_gone(procs: list[psutil.Process], deadline: float) -> list[psutil.Process]:
    """Wait until every process has exited (zombies count as gone); returns the survivors."""
    alive = procs
    while True:
        survivors = []
        for proc in alive:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    survivors.append(proc)
                else:
                    reap(proc)
            except psutil.NoSuchProcess:
                continue
        alive = survivors
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.02)
