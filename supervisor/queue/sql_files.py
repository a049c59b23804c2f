"""The files of sql/: where they are, how a file of named queries is read, and PostgreSQL's own
placeholders for a statement's text. Below both supervisor.queue.queries (the named queries)
and supervisor.queue.claim_builder (the claim's pieces), which read their files through it."""

from __future__ import annotations

import re
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
PLACEHOLDER = re.compile(r"%\((?P<name>[a-z_][a-z0-9_]*)\)s")


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
    if not matches:
        return queries  # a file of comments alone (sql/claim.sql points to sql/claim/)
    for match, following in zip(matches, [*matches[1:], None], strict=True):
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


def native_text(text: str) -> tuple[str, tuple[str, ...]]:
    """``native`` for a statement's text (an earlier release's claim, in the benchmarks)."""
    order: list[str] = []

    def number(match: re.Match[str]) -> str:
        found = match.group("name")
        if found not in order:
            order.append(found)
        return f"${order.index(found) + 1}"

    return PLACEHOLDER.sub(number, text), tuple(order)
