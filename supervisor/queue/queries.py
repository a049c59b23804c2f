"""Named SQL queries from the files of sql/, loaded once into one dict.

Each block in a file starts with ``-- name: <name>``, followed by comment lines that describe
it and then the statement. Keeping SQL in .sql files lets it be read, reviewed and EXPLAINed as
SQL; Python only refers to a query by its name. The files are split by role (sql/README.md is
their table of contents); every ``sql/*.sql`` file is read, and a name defined in two files is
an error, so a caller never needs to know which file holds a statement. How a file is read
lives below this module (supervisor.queue.sql_files), so that the claim builder reads its
pieces (sql/claim/) the same way.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from supervisor.queue.claim_builder import VARIANTS, statement
from supervisor.queue.sql_files import PLACEHOLDER, native_text, parse, sql_dir, sql_text

__all__ = [
    "all_queries",
    "merge",
    "native",
    "native_text",
    "parse",
    "positional",
    "query",
    "query_files",
    "sql_dir",
    "sql_text",
]


def query_files() -> list[Path]:
    """Every file of named queries: the ``*.sql`` files directly in sql/ but schema.sql (not the
    migrations, the functions or the optional and role scripts in its folders)."""
    return sorted(path for path in sql_dir().glob("*.sql") if path.name != "schema.sql")


def merge(files: list[Path]) -> dict[str, str]:
    """The named queries of ``files`` in one dict; a name defined in two files is an error
    naming both."""
    merged: dict[str, str] = {}
    found_in: dict[str, str] = {}
    for path in files:
        where = f"sql/{path.name}"
        for name, text in parse(path.read_text(encoding="utf-8"), where).items():
            if name in merged:
                raise ValueError(f"{where}: query {name!r} is defined in {found_in[name]} too")
            merged[name] = text
            found_in[name] = where
    return merged


@cache
def all_queries() -> dict[str, str]:
    merged = merge(query_files())
    # The claim's variants are composed from their pieces (sql/claim/,
    # supervisor.queue.claim_builder), not written out in a file of sql/.
    twice = sorted(set(VARIANTS) & set(merged))
    if twice:
        raise ValueError(f"sql/: queries {twice} are the claim builder's (sql/claim/)")
    merged.update({name: statement(name) for name in VARIANTS})
    return merged


def query(name: str) -> str:
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/*.sql") from None


@cache
def positional(name: str, order: tuple[str, ...]) -> str:
    """The named query with its ``%(name)s`` placeholders as positional ``%s``, for a caller
    that sends its parameters as a tuple in ``order``: psycopg then maps no names per call.
    The order is checked against the SQL, so an edited query fails loudly, not silently."""
    text = query(name)
    found = tuple(m.group("name") for m in PLACEHOLDER.finditer(text))
    if found != order:
        raise ValueError(f"sql/: query {name!r} takes {found}, its caller sends {order}")
    return PLACEHOLDER.sub("%s", text)


@cache
def native(name: str) -> tuple[str, tuple[str, ...]]:
    """The named query with PostgreSQL's own placeholders, ``$1`` for the first distinct name
    and so on, and the names in that order: for ``psycopg.RawCursor``, with the parameters as a
    list in that order. psycopg converts ``%(name)s`` placeholders with a regular expression at
    every run of a query longer than 4,096 characters (it caches only shorter ones): the claim
    (about 11,600) paid 0.3 ms of the child's CPU a claim for it, more than its batch of ten
    jobs cost to read."""
    return native_text(query(name))
