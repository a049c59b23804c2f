"""A real PgBouncer in transaction mode in front of the test server, started for the tests.

Debian's `pgbouncer` package (`.ci/run` installs it). The configuration is written to a
private folder: one wildcard database entry, so every test database is reachable through it
under its own name, `pool_mode = transaction` (PgBouncer's default, and the mode that breaks
session state: prepared statements, session advisory locks, LISTEN). PgBouncer refuses to run
as root, so as root it is started with `-u postgres`.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
from psycopg import conninfo

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# As root, PgBouncer must drop to another user: any non-root one (Debian's package creates
# `postgres`), or the owner of the server's socket directory, which only it may enter.
RUN_AS = "postgres"


def available() -> bool:
    return os.access(BINARY, os.X_OK)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(server_dsn: str, port: int, folder: Path) -> str:
    params = conninfo.conninfo_to_dict(server_dsn)
    host = params.get("host") or "127.0.0.1"
    user = params.get("user") or getpass.getuser()
    (folder / "userlist.txt").write_text(f'"{user}" ""\n')
    return f"""\
[databases]
* = host={host} port={params.get("port") or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {folder / "userlist.txt"}
pool_mode = transaction
max_client_conn = 500
default_pool_size = 40
server_lifetime = 3600
ignore_startup_parameters = extra_float_digits
"""


@contextlib.contextmanager
def pgbouncer(server_dsn: str) -> Iterator[int]:
    """Run PgBouncer in front of the server named by ``server_dsn``; yields its port."""
    folder = Path(tempfile.mkdtemp(prefix="pgq-pgbouncer-"))
    folder.chmod(0o755)  # readable by the user it drops to
    port = _free_port()
    ini = folder / "pgbouncer.ini"
    ini.write_text(_config(server_dsn, port, folder))
    command = [BINARY, str(ini)]
    if os.geteuid() == 0:
        command[1:1] = ["-u", _run_as(server_dsn)]
    log = open(folder / "pgbouncer.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_ready(server_dsn, port, proc, folder)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _run_as(server_dsn: str) -> str:
    host = conninfo.conninfo_to_dict(server_dsn).get("host") or ""
    if host.startswith("/"):
        owner = pwd.getpwuid(os.stat(host).st_uid).pw_name
        if owner != "root":
            return owner
    return RUN_AS


def through(dsn: str, port: int) -> str:
    """The same database and user as ``dsn``, reached through the PgBouncer on ``port``."""
    return conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(port))


def _wait_ready(server_dsn: str, port: int, proc: subprocess.Popen[bytes], folder: Path) -> None:
    deadline = time.monotonic() + 20
    while True:
        if proc.poll() is not None:
            raise RuntimeError(
                f"pgbouncer exited with {proc.returncode}: "
                + (folder / "pgbouncer.log").read_text(errors="replace")
            )
        try:
            with psycopg.connect(through(server_dsn, port), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
