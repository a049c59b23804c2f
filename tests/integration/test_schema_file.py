"""sql/schema.sql is the schema a fresh migrate produces, and migrations come in order.

The file is loaded into one database and the migrations run on another of the same server;
what the catalogs say of schema pgq (tables and their columns, constraints, indexes,
sequences, functions with their bodies and rights) must be the same. Compared on the server
that runs the tests, so PostgreSQL 15 and the embedded 18 both check it, whatever version of
pg_dump wrote the file (scripts/tools/schema_sql.py regenerates it).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from supervisor.queue import functions, migrations
from supervisor.queue.migrations import Migration, MigrationOrderError, migrate
from supervisor.queue.queries import sql_dir
from tests.commands import ROOT, run_cli
from tests.conftest import create_database, drop_database, with_dbname

_INCLUDE = re.compile(r"^\\ir (?P<path>\S+)\n", re.M)

# What the catalogs say of schema pgq, one query per kind of object, each row a plain text.
CATALOG = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, coalesce(c.reloptions::text, ''),
               coalesce(pg_get_partkeydef(c.oid), ''),
               coalesce(pg_get_expr(c.relpartbound, c.oid), '')
        FROM pg_class AS c WHERE c.relnamespace = 'pgq'::regnamespace""",
    "columns": """
        SELECT c.relname, row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum), a.attname,
               format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity,
               a.attgenerated, coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
               coalesce(co.collname, '')
        FROM pg_attribute AS a
        JOIN pg_class AS c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation AS co ON co.oid = a.attcollation AND a.attcollation <> 0
            AND co.collname <> 'default'
        WHERE c.relnamespace = 'pgq'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped""",
    # PostgreSQL 18 keeps NOT NULL as constraints too, named after the table that made them
    # (a partition made by PARTITION OF or by ATTACH differs only by that name): not compared.
    "constraints": """
        SELECT conrelid::regclass::text, CASE WHEN contype = 'n' THEN '' ELSE conname END,
               contype, convalidated, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'pgq'::regnamespace""",
    "indexes": """
        SELECT pg_get_indexdef(i.indexrelid), i.indisvalid
        FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
        WHERE c.relnamespace = 'pgq'::regnamespace""",
    "sequences": """
        SELECT sequencename, data_type::text, start_value, increment_by, max_value, cycle
        FROM pg_sequences WHERE schemaname = 'pgq'""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid), pg_get_functiondef(p.oid),
               coalesce(p.proacl::text, '')
        FROM pg_proc AS p WHERE p.pronamespace = 'pgq'::regnamespace""",
    "triggers": """
        SELECT pg_get_triggerdef(t.oid)
        FROM pg_trigger AS t JOIN pg_class AS c ON c.oid = t.tgrelid
        WHERE c.relnamespace = 'pgq'::regnamespace AND NOT t.tgisinternal""",
    "views": """
        SELECT c.relname, pg_get_viewdef(c.oid)
        FROM pg_class AS c
        WHERE c.relnamespace = 'pgq'::regnamespace AND c.relkind IN ('v', 'm')""",
    "types": """
        SELECT t.typname, t.typtype,
               coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                         FROM pg_enum AS e WHERE e.enumtypid = t.oid), '')
        FROM pg_type AS t
        WHERE t.typnamespace = 'pgq'::regnamespace AND t.typtype IN ('e', 'd', 'r', 'm')""",
}


def catalog(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        return {kind: sorted(conn.execute(text).fetchall()) for kind, text in CATALOG.items()}


def schema_file_text() -> str:
    """sql/schema.sql with its includes (\\ir functions/NAME.sql) put in, as psql would."""
    text = (sql_dir() / "schema.sql").read_text(encoding="utf-8")
    return _INCLUDE.sub(lambda m: (sql_dir() / m["path"]).read_text(encoding="utf-8") + "\n", text)


@pytest.fixture
def two_databases(pg_server: str) -> Iterator[tuple[str, str]]:
    names = [create_database(pg_server, None), create_database(pg_server, None)]
    try:
        yield with_dbname(pg_server, names[0]), with_dbname(pg_server, names[1])
    finally:
        for name in names:
            drop_database(pg_server, name)


def test_schema_sql_is_what_a_fresh_migrate_produces(two_databases: tuple[str, str]) -> None:
    loaded, migrated = two_databases
    with psycopg.connect(loaded, autocommit=True) as conn:
        conn.execute(schema_file_text())
    migrate(migrated)
    found, expected = catalog(loaded), catalog(migrated)
    stale = "sql/schema.sql is stale: run .venv/bin/python scripts/tools/schema_sql.py"
    for kind in CATALOG:
        only_file = sorted(set(found[kind]) - set(expected[kind]))
        only_migrate = sorted(set(expected[kind]) - set(found[kind]))
        assert (only_file, only_migrate) == ([], []), f"{stale} ({kind} differ)"
    assert len(expected["relations"]) > 20 and len(expected["functions"]) >= 19


def test_schema_sql_includes_every_function_file_and_carries_no_body() -> None:
    text = (sql_dir() / "schema.sql").read_text(encoding="utf-8")
    included = [m["path"] for m in _INCLUDE.finditer(text)]
    assert included == [f"functions/{f.name}.sql" for f in functions.available_functions()]
    assert "CREATE FUNCTION" not in text and "CREATE OR REPLACE FUNCTION" not in text


def test_each_functions_current_body_is_in_exactly_one_file() -> None:
    """Its file of sql/functions/; no migration or other SQL file carries a copy of it (a
    migration keeps only the earlier bodies that its own version of the schema had)."""
    definition = re.compile(
        r"^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+pgq\.(\w+).*?\n\$\$;", re.M | re.S
    )

    def body(text: str) -> str:  # the definition from its AS, white space folded
        return " ".join(text.split("AS $$", 1)[-1].split())

    current: dict[str, str] = {}
    for f in functions.available_functions():
        ((name, text),) = [(m[1], m[0]) for m in definition.finditer(f.sql)]
        assert name == f.name, f"{f.path} defines pgq.{name}"
        current[name] = body(text)
    copies = [
        f"{path.relative_to(sql_dir())}: pgq.{m[1]}"
        for path in sorted(sql_dir().rglob("*.sql"))
        if path.parent.name != "functions"
        for m in definition.finditer(path.read_text(encoding="utf-8"))
        if body(m[0]) == current.get(m[1])
    ]
    assert len(current) >= 19 and copies == []


def test_a_migration_numbered_below_an_applied_one_is_refused_naming_its_file(
    dsn: str,
) -> None:
    future = Migration(9002, "from_a_later_branch", "ALTER TABLE pgq.jobs ADD COLUMN later text;")
    gap = Migration(9001, "numbered_into_the_gap", "ALTER TABLE pgq.jobs ADD COLUMN gap text;")
    shipped = migrations.available()
    assert [m.version for m in migrate(dsn, shipped=[*shipped, future])] == [9002]
    with pytest.raises(
        MigrationOrderError, match=r"sql/migrations/9001_numbered_into_the_gap\.sql"
    ):
        migrate(dsn, shipped=[*shipped, gap, future])
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert 9001 not in migrations.applied_versions(conn)
        assert conn.execute(
            "SELECT count(*) FROM pg_attribute WHERE attrelid = 'pgq.jobs'::regclass"
            " AND attname = 'gap'"
        ).fetchone() == (0,)


def test_migrate_exits_2_naming_the_file_of_a_migration_below_the_highest_applied(
    dsn: str, tmp_path: Path
) -> None:
    # A database that a branch with a higher migration ran on: 0036 is now below 9040.
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.schema_migrations WHERE version = 36")
        conn.execute("INSERT INTO pgq.schema_migrations VALUES (9040, 'from_another_branch')")
    config = tmp_path / "queues.yaml"
    config.write_text("handlers: {k: tests.handlers:noop}\npools: {p: {queues: {q: 1}}}\n")
    done = run_cli(config, "migrate", env={**os.environ, "PGQ_DSN": dsn}, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "sql/migrations/0036_scheduled_wakeups.sql" in done.stderr
    assert "below 9040" in done.stderr
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert 36 not in migrations.applied_versions(conn)


def test_a_database_from_before_the_rule_still_fills_its_gaps(empty_dsn: str) -> None:
    """Releases before the rule shipped migrations numbered into gaps (0030 and 0031 came after
    0033 on main): a database at most at LAST_UNORDERED still gets them."""
    every = migrations.available()
    release = [m for m in every if m.version <= 33 and m.version not in (30, 31)]
    migrate(empty_dsn, shipped=release)
    later = [m.version for m in every if m.version > 33]
    assert [m.version for m in migrate(empty_dsn)] == [30, 31, *later]
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert migrations.functions_due(conn) == []


def test_a_changed_function_file_is_applied_without_a_migration(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE pgq.schema_functions SET digest = 'old' WHERE name = 'wakes_stagers'")
        conn.execute(
            "CREATE OR REPLACE FUNCTION pgq.wakes_stagers(run_at timestamptz) RETURNS boolean"
            " LANGUAGE sql AS 'SELECT false'"
        )
        assert migrations.functions_due(conn)[0].name == "wakes_stagers"
    assert migrate(dsn) == []  # no migration, but the function is put back
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT pgq.wakes_stagers(now())").fetchone() == (True,)
        assert migrations.functions_due(conn) == []


def test_an_older_release_leaves_newer_functions_alone(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        newer = migrations.release_version() + 1
        conn.execute(
            "UPDATE pgq.schema_functions SET digest = 'newer', schema_version = %s", (newer,)
        )
        assert migrations.functions_due(conn) == []
    assert migrate(dsn) == []
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT DISTINCT digest FROM pgq.schema_functions").fetchall() == [
            ("newer",)
        ]


def test_the_tool_that_regenerates_the_schema_is_where_the_file_says() -> None:
    assert (ROOT / "scripts" / "tools" / "schema_sql.py").is_file()
    assert "scripts/tools/schema_sql.py" in (sql_dir() / "schema.sql").read_text(encoding="utf-8")


def test_a_role_that_may_not_read_the_functions_record_still_finds_the_schema_up_to_date(
    dsn: str,
) -> None:
    """A least-privilege role granted before pgq.schema_functions existed cannot read it: its
    supervisor still starts (migrate finds nothing to do) instead of failing on the record."""
    role = f"pgq_t_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(sql.SQL("GRANT USAGE ON SCHEMA pgq TO {}").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT SELECT ON pgq.schema_migrations TO {}").format(sql.Identifier(role))
        )
    try:
        as_role = make_conninfo(dsn, user=role)
        with psycopg.connect(as_role, autocommit=True) as conn:
            assert migrations.functions_due(conn) == []
        assert migrate(as_role) == []
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
