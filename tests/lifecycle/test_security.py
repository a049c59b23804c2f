"""Security: a least-privilege role runs the real supervisor, and its password shows nowhere
(process titles, sessions, logs, metrics, the output of the verbs).

Runs on a server of the test's own with password authentication (the machine's server trusts
everyone, and roles are global to a server: creating LOGIN roles there is not ours to do).
"""

from __future__ import annotations

import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.embedded.server import EmbeddedPostgres, available
from supervisor.queue.queries import sql_dir
from tests.commands import run_cli
from tests.lifecycle.harness import ROOT, Supervisor, query, scalar, wait_for
from tests.lifecycle.own_server import create_login, own_server

pytestmark = pytest.mark.skipif(not available(), reason="needs the embedded PostgreSQL")

PASSWORD = "Kn0wn-P4ss-w0rd-7731"
CONFIG = """
database:
  auto_migrate: false
handlers:
  record: tests.handlers:record
  crash: tests.handlers:crash
pools:
  main:
    processes: 2
    batch: 4
    queues: {default: 1}
jobs:
  crash: {max_attempts: 1}
history:
  enabled: true
vacuum: {interval: 500ms, dead_rows: 1}
"""


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    with own_server(password_auth=True) as srv:
        with psycopg.connect(srv.dsn, autocommit=True) as conn:
            conn.execute((sql_dir() / "roles" / "worker_role.sql").read_text())
        yield srv


def _titles(sup: Supervisor) -> list[str]:
    titles = []
    for proc in [psutil.Process(sup.pid), *sup.children()]:
        try:
            titles.append(" ".join(proc.cmdline()))
        except psutil.Error:
            continue
    return titles


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None


def _worker_login(server: EmbeddedPostgres) -> str:
    """A login in the least-privilege role, allowed to write the test ledger; its DSN."""
    dsn = create_login(server, "app_worker", PASSWORD, "pgq_worker")
    with psycopg.connect(server.dsn, autocommit=True) as admin:
        admin.execute("GRANT SELECT, INSERT ON test_ledger TO pgq_worker")
    return dsn


def test_worker_role_runs_the_supervisor_and_cannot_change_the_schema(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = _worker_login(server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many(conn, [NewJob("record") for _ in range(30)])
        (crash,) = enqueue_many(conn, [NewJob("crash", {"how": "exit"})])
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    sup = Supervisor(tmp_path, dsn, CONFIG + f"metrics: {{port: {port}}}\n")
    try:
        sup.start()
        sup.wait_children(2)
        titles = _titles(sup)
        metrics = wait_for(lambda: _scrape(port), 20, what="metrics")
        sessions = query(
            server.dsn,
            "SELECT application_name, coalesce(query, '') FROM pg_stat_activity "
            "WHERE usename = 'app_worker'",
        )
        wait_for(
            lambda: (
                scalar(server.dsn, "SELECT count(*) FROM pgq.jobs WHERE state <> 'discarded'") == 0
            ),
            30,
            what="drained",
        )
        if _knows_maintain(server):
            sup.wait_log("vacuum: pgq.jobs vacuumed in")  # granted MAINTAIN by the role script
        else:
            sup.wait_log("this database role may not vacuum pgq.jobs")
        assert sup.stop() == 0
    finally:
        sup.kill_everything()
    # It did the work, history included (partitions made through the definer functions).
    done = query(server.dsn, "SELECT count(*) FROM pgq.job_history WHERE outcome = 'completed'")
    assert done == [(len(ids),)]
    assert scalar(server.dsn, "SELECT state FROM pgq.jobs WHERE id = %s", (crash,)) == "discarded"

    # The password shows nowhere: process titles, sessions, the log.
    assert titles and all(t.startswith("pgq-supervisor: ") for t in titles), titles
    assert any(name.startswith("pgq-supervisor") for name, _ in sessions), sessions
    for text in [*titles, *(f"{a} {q}" for a, q in sessions), sup.log(), metrics]:
        assert PASSWORD not in text
    assert "discarded" in sup.log()  # the log has the crash in it, scrubbed
    assert "pgq_" in metrics

    # And it cannot change the schema.
    forbidden = [
        "ALTER TABLE pgq.jobs ADD COLUMN evil int",
        "DROP TABLE pgq.jobs",
        "TRUNCATE pgq.jobs",
        "CREATE TABLE pgq.evil (id int)",
        "CREATE FUNCTION pgq.evil() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "INSERT INTO pgq.schema_migrations (version, name) VALUES (9999, 'evil')",
        "ALTER TABLE pgq.jobs DISABLE TRIGGER ALL",
    ]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in forbidden:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


def _knows_maintain(server: EmbeddedPostgres) -> bool:
    return int(scalar(server.dsn, "SHOW server_version_num")) >= 170000


def test_a_role_that_may_not_vacuum_is_told_once_and_works_on(
    server: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = _worker_login(server)
    if _knows_maintain(server):
        with psycopg.connect(server.dsn, autocommit=True) as admin:
            admin.execute("REVOKE MAINTAIN ON pgq.jobs FROM pgq_worker")
    with psycopg.connect(dsn, autocommit=True) as conn:
        enqueue_many(conn, [NewJob("record") for _ in range(20)])
    sup = Supervisor(tmp_path, dsn, CONFIG)
    try:
        sup.start()
        sup.wait_log("this database role may not vacuum pgq.jobs")
        wait_for(lambda: scalar(server.dsn, "SELECT count(*) FROM pgq.jobs") == 0, 30, what="done")
        time.sleep(2.0)  # four more checks, every 500 ms
        assert sup.stop() == 0
    finally:
        sup.kill_everything()
    assert sup.log().count("this database role may not vacuum pgq.jobs") == 1
    assert "vacuum of pgq.jobs failed" not in sup.log()


def test_password_stays_out_of_every_output(server: EmbeddedPostgres, tmp_path: Path) -> None:
    """The verbs that print: check, migrate, a failed start; and status when it exists."""
    dsn = create_login(server, "app_worker", PASSWORD, "pgq_worker")
    config = tmp_path / "q.yaml"
    config.write_text(CONFIG)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    wrong_password = dsn.replace(PASSWORD, PASSWORD + "x")
    wrong_port = dsn.replace("port=5432", "port=1") if "port=5432" in dsn else dsn + " port=1"
    runs: list[tuple[list[str], dict[str, str]]] = [
        (["check"], {"PGQ_DSN": dsn}),
        (["migrate"], {"PGQ_DSN": dsn}),
        (["--dsn", dsn, "migrate"], {}),
        (["run"], {"PGQ_DSN": wrong_password}),
        (["--log-format", "json", "run"], {"PGQ_DSN": wrong_password}),
    ]
    from supervisor.cli.main import VERBS, build_parser

    build_parser()  # registers the operator verbs that exist in this build
    if "status" in VERBS:
        runs.append((["status"], {"PGQ_DSN": dsn}))
    for args, extra in runs:
        result = run_cli(config, *args, env={**env, **extra})
        said = result.stdout + result.stderr
        assert PASSWORD not in said, (args, said)
    # A server that is down: the supervisor waits and logs, still without the password.
    sup = Supervisor(tmp_path, wrong_port, CONFIG, name="down")
    try:
        sup.start()
        sup.wait_log("retrying in")
        assert all(PASSWORD not in t for t in _titles(sup))
    finally:
        sup.kill_everything()
    assert PASSWORD not in sup.log()
