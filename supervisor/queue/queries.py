"""Named SQL queries from sql/queries.sql, loaded once into a dict.

Each block in the file starts with ``-- name: <name>``, followed by comment lines that describe
it and then the statement. Keeping SQL in .sql files lets it be read, reviewed and EXPLAINed as
SQL; Python only refers to a query by its name. How a file is read lives below this module
(supervisor.queue.sql_files), so that the claim builder reads its pieces the same way.
"""

from __future__ import annotations

from functools import cache

from supervisor.queue.claim_builder import VARIANTS, statement
from supervisor.queue.sql_files import PLACEHOLDER, native_text, parse, sql_dir, sql_text

__all__ = [
    "all_queries",
    "native",
    "native_text",
    "parse",
    "positional",
    "query",
    "sql_dir",
    "sql_text",
]


# sql/outcomes.sql holds the queries of outcome unknown, results and batches (issue 23).
_FILES = ("queries.sql", "outcomes.sql")


@cache
def all_queries() -> dict[str, str]:
    merged: dict[str, str] = {}
    for name in _FILES:
        found = parse(sql_text(name))
        twice = sorted(set(found) & set(merged))
        if twice:
            raise ValueError(f"sql/{name}: queries {twice} are defined in another file too")
        merged.update(found)
    # The claim's variants are composed from their pieces (sql/claim/,
    # supervisor.queue.claim_builder); the text of the claim still in sql/queries.sql is the one
    # the builder is tested against until that file's claim goes away.
    merged.update({name: statement(name) for name in VARIANTS})
    return merged


def query(name: str) -> str:
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/queries.sql") from None


@cache
def positional(name: str, order: tuple[str, ...]) -> str:
    """The named query with its ``%(name)s`` placeholders as positional ``%s``, for a caller
    that sends its parameters as a tuple in ``order``: psycopg then maps no names per call.
    The order is checked against the SQL, so an edited query fails loudly, not silently."""
    text = query(name)
    found = tuple(m.group("name") for m in PLACEHOLDER.finditer(text))
    if found != order:
        raise ValueError(f"sql/queries.sql: query {name!r} takes {found}, its caller sends {order}")
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
