"""Migrations on a live database: a migration behind an application's open transaction on
pgq.jobs waits politely (short lock timeouts, retries) while claims keep flowing, and one that
builds an index concurrently runs outside a transaction, again after an interrupted build."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest

from supervisor import claim, enqueue
from supervisor.queue import migrations
from supervisor.queue.migrations import Migration, MigrationBlocked, migrate

ADD_COLUMN = Migration(9001, "add_a_column", "ALTER TABLE pgq.jobs ADD COLUMN drill_note text;")
CONCURRENT = Migration(
    9002,
    "an_index_concurrently",
    "-- pgq:no-transaction\n"
    "-- A large index, built without blocking writes.\n"
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_drill_kind\n"
    "    ON pgq.jobs (kind);\n"
    "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_drill_queue ON pgq.jobs (queue);\n",
)


def _claims_while(dsn: str, stop: threading.Event, stalls: list[float]) -> None:
    """Enqueue and claim one job at a time, noting how long each round trip took."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            started = time.monotonic()
            enqueue(conn, "k", queue="flow")
            (job,) = claim(conn, "flow", worker="w")
            conn.execute("DELETE FROM pgq.jobs WHERE id = %s", (job.id,))
            stalls.append(time.monotonic() - started)


def test_a_migration_behind_an_open_transaction_waits_politely_and_claims_flow(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    stop, stalls = threading.Event(), []
    with psycopg.connect(dsn) as app:
        # An application's transaction that wrote to pgq.jobs and stays open.
        enqueue(app, "k", queue="app")
        claimer = threading.Thread(target=_claims_while, args=(dsn, stop, stalls))
        claimer.start()
        result: list[Any] = []
        runner = threading.Thread(
            target=lambda: result.append(migrate(dsn, shipped=[ADD_COLUMN], lock_timeout=0.1))
        )
        runner.start()
        time.sleep(3)  # the migration tries, gives up, tries again; the claims go on
        during = len(stalls)
        assert runner.is_alive() and not result
        app.commit()
    runner.join(30)
    stop.set()
    claimer.join(30)
    assert [m.version for m in result[0]] == [9001]
    assert during > 20, during  # claims kept flowing while the migration waited
    assert max(stalls) < 1.0, max(stalls)  # none held up behind the migration for long
    assert "waits for locks held by pid" in caplog.text
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT drill_note FROM pgq.jobs LIMIT 1").fetchall() is not None


def test_a_migration_that_cannot_get_its_locks_gives_up_naming_the_holder(dsn: str) -> None:
    with psycopg.connect(dsn, application_name="billing-report") as app:
        app.execute("LOCK TABLE pgq.jobs IN ROW EXCLUSIVE MODE")
        holder = r"held by pid \d+ \(user \w+, application billing-report"
        with pytest.raises(MigrationBlocked, match=holder):
            migrate(dsn, shipped=[ADD_COLUMN], lock_timeout=0.05, lock_wait=0.5)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert 9001 not in migrations.applied_versions(conn)


def test_a_no_transaction_migration_builds_concurrently_and_recovers_an_interrupted_build(
    dsn: str,
) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO pgq.jobs (kind) SELECT 'k' FROM generate_series(1, 1000)")
        # An interrupted build (here: a unique one over duplicates) leaves an invalid index.
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("CREATE UNIQUE INDEX CONCURRENTLY jobs_drill_kind ON pgq.jobs (kind)")
        invalid = (
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'pgq.jobs_drill_kind'::regclass"
        )

        assert conn.execute(invalid).fetchone() == (False,)
    assert [m.version for m in migrate(dsn, shipped=[CONCURRENT])] == [9002]
    assert migrate(dsn, shipped=[CONCURRENT]) == []  # idempotent
    with psycopg.connect(dsn, autocommit=True) as conn:
        valid = dict(
            conn.execute(
                "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c"
                " ON c.oid = i.indexrelid WHERE c.relname LIKE 'jobs_drill_%'"
            ).fetchall()
        )
        assert valid == {"jobs_drill_kind": True, "jobs_drill_queue": True}
        shown = conn.execute("SELECT pg_get_indexdef('pgq.jobs_drill_kind'::regclass)").fetchone()
        assert "UNIQUE" not in shown[0]  # rebuilt by the migration, not the broken leftover
        assert 9002 in migrations.applied_versions(conn)
