"""The migrations produce exactly the schema the code relies on, on every supported server."""

from __future__ import annotations

import re
import threading
from typing import Any

import psycopg

from supervisor.queue import migrations
from supervisor.queue.queries import all_queries, native, parse, sql_text


def _columns(conn: psycopg.Connection[Any], table: str) -> dict[str, tuple[str, bool]]:
    rows = conn.execute(
        """
        SELECT attname, format_type(atttypid, atttypmod), attnotnull
        FROM pg_attribute
        WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped
        """,
        (table,),
    ).fetchall()
    return {name: (typ, notnull) for name, typ, notnull in rows}


def _indexes(conn: psycopg.Connection[Any], table: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'pgq' AND tablename = %s",
        (table,),
    ).fetchall()
    return {name: re.sub(r"\s+", " ", definition) for name, definition in rows}


def test_jobs_table_has_the_columns_the_queries_use(conn: psycopg.Connection[Any]) -> None:
    columns = _columns(conn, "pgq.jobs")
    assert columns == {
        "id": ("bigint", True),
        "queue": ("text", True),
        "kind": ("text", True),
        "args": ("jsonb", True),
        "priority": ("smallint", True),
        "run_at": ("timestamp with time zone", True),
        "state": ("text", True),
        "attempts": ("integer", True),
        "max_attempts": ("integer", True),
        "lease_id": ("bigint", False),
        "locked_by": ("text", False),
        "lease_until": ("timestamp with time zone", False),
        "started_at": ("timestamp with time zone", False),
        "unique_key": ("text", False),
        "last_error": ("text", False),
        "created_at": ("timestamp with time zone", True),
        "finished_at": ("timestamp with time zone", False),
        "cancel_requested_at": ("timestamp with time zone", False),
        "errors": ("jsonb", False),
        "batch_id": ("bigint", False),
        "batch": ("jsonb", False),
        "traceparent": ("text", False),
        "tenant": ("text", False),
        "debounce_key": ("text", False),
        "order_key": ("text", False),
    }


def test_claim_index_matches_the_claim_order(conn: psycopg.Connection[Any]) -> None:
    indexes = _indexes(conn, "jobs")
    assert indexes["jobs_claim"].endswith(
        "USING btree (queue, priority DESC, run_at, id) WHERE (state = 'available'::text)"
    )
    # Inside a queue, each tenant's jobs in claim order (jobs without a tenant are '').
    assert indexes["jobs_claim_tenant"].endswith(
        "USING btree (queue, COALESCE(tenant, ''::text) COLLATE \"C\", priority DESC, run_at, id)"
        " WHERE (state = 'available'::text)"
    )
    assert indexes["jobs_lease"].endswith(
        "USING btree (lease_until) WHERE (state = 'running'::text)"
    )
    assert "UNIQUE INDEX jobs_unique_key" in indexes["jobs_unique_key"]
    # A debounce key is held only until its job starts (0065).
    assert indexes["jobs_debounce_key"].endswith(
        "USING btree (debounce_key) WHERE ((debounce_key IS NOT NULL) AND (state = ANY "
        "(ARRAY['available'::text, 'scheduled'::text])) AND (started_at IS NULL))"
    )
    # The ORDER BY of the claim query names the same columns in the same order and direction.
    claim = all_queries()["claim"]
    assert "ORDER BY j.priority DESC, j.run_at, j.id" in claim


def test_jobs_table_storage_settings(conn: psycopg.Connection[Any]) -> None:
    (options,) = conn.execute(
        "SELECT reloptions FROM pg_class WHERE oid = 'pgq.jobs'::regclass"
    ).fetchone()
    assert "fillfactor=70" in options
    assert "autovacuum_vacuum_scale_factor=0.01" in options


PREPARABLE = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "VALUES", "(")


def test_every_named_query_prepares_against_the_migrated_schema(
    conn: psycopg.Connection[Any],
) -> None:
    """PREPARE parses, resolves every table, column and function, and types every parameter:
    a query that drifted from the schema fails here rather than in production."""
    doctor = parse(sql_text("doctor.sql"))  # some need an extension (pgstattuple): test_doctor
    for name, statement in all_queries().items():
        if name in doctor:
            continue
        if statement.startswith("VACUUM"):
            conn.execute(statement)  # a utility statement cannot be PREPAREd; run it instead
            continue
        if not statement.startswith(PREPARABLE):
            # The migration runner's DDL, the dashboard's SET LOCAL, the doctor's EXPLAIN prefix:
            # utility statements, run by their own tests.
            continue
        positional, _ = native(name)  # $n placeholders, as PREPARE takes them
        try:
            conn.execute(f"PREPARE check_{name} AS {positional}")
        except psycopg.Error as exc:
            raise AssertionError(f"query {name!r} does not prepare: {exc}") from exc
        conn.execute(f"DEALLOCATE check_{name}")


def test_migrations_are_recorded_and_idempotent(empty_dsn: str) -> None:
    applied = migrations.migrate(empty_dsn)
    assert [m.version for m in applied] == [m.version for m in migrations.available()]
    assert migrations.migrate(empty_dsn) == []
    with psycopg.connect(empty_dsn) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM pgq.schema_migrations")]
        assert sorted(versions) == [m.version for m in migrations.available()]
        assert migrations.pending(conn) == []


def test_two_hosts_migrating_at_once_apply_each_migration_once(empty_dsn: str) -> None:
    results: list[list[migrations.Migration]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def run() -> None:
        barrier.wait()
        try:
            results.append(migrations.migrate(empty_dsn))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    applied = sorted(m.version for result in results for m in result)
    assert applied == [m.version for m in migrations.available()]
