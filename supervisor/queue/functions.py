"""The functions of schema pgq, one file each in sql/functions/, applied by migrate after the
numbered migrations.

Each function's current definition lives in exactly one file (``sql/functions/NAME.sql``:
``CREATE OR REPLACE FUNCTION pgq.NAME``, with whatever its definition needs around it: the
obsolete signatures it drops, the EXECUTE it revokes). Changing a function is editing its file;
no migration carries a copy of a body any more, so none can put an older one back.

``migrate`` applies every file after a run that applied a migration (a migration may replace or
drop what a file defines), and otherwise each file whose text changed since it was applied
(pgq.schema_functions records each file's sha256). They all go in one transaction, under the
migrations' lock: a database sees every function of a release at once. The record also keeps
the release that applied them (the highest migration it ships), and a release older than that
leaves the functions alone: during a rolling upgrade the previous release's migrate never puts
its older bodies back.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import psycopg

from supervisor.queue.queries import sql_dir


@dataclass(frozen=True)
class FunctionFile:
    name: str
    sql: str = field(repr=False)

    @property
    def path(self) -> str:
        return f"sql/functions/{self.name}.sql"

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def available_functions() -> list[FunctionFile]:
    """Every function file shipped with the package, by name (the order they are applied in)."""
    return [
        FunctionFile(path.stem, path.read_text(encoding="utf-8"))
        for path in sorted((sql_dir() / "functions").glob("*.sql"))
    ]


def recorded(
    conn: psycopg.Connection[Any], queries: dict[str, str]
) -> dict[str, tuple[str, int]] | None:
    """{name: (digest, schema_version)} of the functions in place (empty before any); None when
    this role may not read the record."""
    row = conn.execute(queries["functions_table_exists"]).fetchone()
    if not row or not row[0]:
        return {}
    if not row[1]:
        return None
    return {name: (digest, v) for name, digest, v in conn.execute(queries["recorded_functions"])}


def due(
    conn: psycopg.Connection[Any], queries: dict[str, str], release: int, *, every: bool = False
) -> list[FunctionFile]:
    """The function files to apply: every one (``every``: a migration ran) or those whose text
    is not the one in place; none when a newer release applied them, or when this role may not
    read what is in place (it could not apply them either: a least-privilege role's check)."""
    found = recorded(conn, queries)
    if found is None:
        return []
    newest = max((v for _, v in found.values()), default=0)
    if release < newest:
        return []
    files = available_functions()
    if every:
        return files
    return [f for f in files if found.get(f.name, ("", 0))[0] != f.digest]


class FunctionError(RuntimeError):
    """A function file that the database refused: named with the server's error."""


def apply(
    conn: psycopg.Connection[Any], queries: dict[str, str], files: list[FunctionFile], release: int
) -> None:
    """Run ``files`` and record them, in the caller's transaction."""
    for function in files:
        try:
            with conn.transaction():  # a savepoint: the error below names the file
                conn.execute(function.sql)
        except psycopg.errors.LockNotAvailable:
            raise
        except psycopg.Error as exc:
            detail = str(exc).strip().replace("\n", " ")
            raise FunctionError(f"{function.path}: {detail}") from exc
        conn.execute(
            queries["record_function"],
            {"name": function.name, "digest": function.digest, "schema_version": release},
        )
