"""Named SQL queries from the files of sql/, loaded once into one dict.

Each block in a file starts with ``-- name: <name>``, followed by comment lines that describe
it and then the statement. Keeping SQL in .sql files lets it be read, reviewed and EXPLAINed as
SQL; Python only refers to a query by its name. The files are split by role (sql/README.md is
their table of contents); every ``sql/*.sql`` file is read, and a name defined in two files is
an error, so a caller never needs to know which file holds a statement.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    """sql/ at the top of a source checkout, or supervisor/sql inside an installed wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "sql", here.parent.parent / "sql"):
        if (candidate / "claim.sql").is_file():
            return candidate
    raise FileNotFoundError(f"the sql/ folder is missing next to {here}")


def sql_text(relative: str) -> str:
    """The text of a file under sql/."""
    return (sql_dir() / relative).read_text(encoding="utf-8")


def parse(text: str, where: str = "sql/") -> dict[str, str]:
    """Split a queries file into {name: sql}; the description comments stay with the SQL.
    ``where`` names the file in errors."""
    matches = list(_NAME.finditer(text))
    queries: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None][: len(matches)], strict=True):
        end = following.start() if following else len(text)
        body = text[match.end() : end].strip()
        statement = "\n".join(
            line for line in body.splitlines() if not line.lstrip().startswith("--")
        ).strip()
        name = match.group("name")
        if name in queries:
            raise ValueError(f"{where}: query {name!r} is defined twice")
        if not statement:
            raise ValueError(f"{where}: query {name!r} has no SQL")
        queries[name] = statement.rstrip(";")
    return queries


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
    return merge(query_files())


def query(name: str) -> str:
    try:
        return all_queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/*.sql") from None


_PLACEHOLDER = re.compile(r"%\((?P<name>[a-z_][a-z0-9_]*)\)s")


@cache
def positional(name: str, order: tuple[str, ...]) -> str:
    """The named query with its ``%(name)s`` placeholders as positional ``%s``, for a caller
    that sends its parameters as a tuple in ``order``: psycopg then maps no names per call.
    The order is checked against the SQL, so an edited query fails loudly, not silently."""
    text = query(name)
    found = tuple(m.group("name") for m in _PLACEHOLDER.finditer(text))
    if found != order:
        raise ValueError(f"sql/: query {name!r} takes {found}, its caller sends {order}")
    return _PLACEHOLDER.sub("%s", text)


@cache
def native(name: str) -> tuple[str, tuple[str, ...]]:
    """The named query with PostgreSQL's own placeholders, ``$1`` for the first distinct name
    and so on, and the names in that order: for ``psycopg.RawCursor``, with the parameters as a
    list in that order. psycopg converts ``%(name)s`` placeholders with a regular expression at
    every run of a query longer than 4,096 characters (it caches only shorter ones): the claim
    (about 11,600) paid 0.3 ms of the child's CPU a claim for it, more than its batch of ten
    jobs cost to read."""
    return native_text(query(name))


def native_text(text: str) -> tuple[str, tuple[str, ...]]:
    """``native`` for a statement's text (an earlier release's claim, in the benchmarks)."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        found = match.group("name")
        if found not in order:
            order.append(found)
        return f"${order.index(found) + 1}"

    return _PLACEHOLDER.sub(number, text), tuple(order)
