"""Numbered schema migrations from sql/migrations, applied once each, in order.

Safe when several hosts run it at once: each migration runs in its own transaction, together
with the row that records it, under a transaction-scoped advisory lock; a second runner waits,
then finds that version recorded and moves on (or does nothing). No session state, so it works
through a transaction-mode pooler too.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import psycopg

from supervisor.queue import locks
from supervisor.queue.dsn import connect
from supervisor.queue.queries import sql_dir

log = logging.getLogger("pgq.migrate")

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")

_BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS pgq;
CREATE TABLE IF NOT EXISTS pgq.schema_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str = field(repr=False)


def available() -> list[Migration]:
    """Every migration shipped with the package, by version."""
    found = []
    for entry in (sql_dir() / "migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"sql/migrations: duplicate version numbers in {versions}")
    return found


def applied_versions(conn: psycopg.Connection[Any]) -> set[int]:
    exists = conn.execute("SELECT to_regclass('pgq.schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return set()
    return {row[0] for row in conn.execute("SELECT version FROM pgq.schema_migrations")}


def pending(conn: psycopg.Connection[Any]) -> list[Migration]:
    done = applied_versions(conn)
    return [m for m in available() if m.version not in done]


def migrate(target: str | psycopg.Connection[Any], *, pooled: bool = False) -> list[Migration]:
    """Apply every pending migration; returns the ones applied (empty when up to date).
    ``pooled``: ``target`` is a DSN through a transaction-mode pooler."""
    if isinstance(target, str):
        with connect(target, application_name="pgq-supervisor migrate", pooled=pooled) as conn:
            return _migrate(conn)
    return _migrate(target)


def _migrate(conn: psycopg.Connection[Any]) -> list[Migration]:
    if not conn.autocommit:
        raise ValueError(
            "migrate needs an autocommit connection: each migration is its own transaction"
        )
    if applied_versions(conn) and not pending(conn):
        # Up to date: touch nothing, so a role without CREATE rights can run this too.
        return []
    applied = []
    while True:
        with conn.transaction():
            # Transaction-scoped, so it also works through a transaction pooler and can never
            # be left held; the pending list is read again under it, so two runners take turns.
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (locks.MIGRATE,))
            conn.execute(_BOOTSTRAP)
            todo = pending(conn)
            if not todo:
                return applied
            migration = todo[0]
            conn.execute(migration.sql)
            conn.execute(
                "INSERT INTO pgq.schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
        log.info("applied migration %04d_%s", migration.version, migration.name)
        applied.append(migration)
