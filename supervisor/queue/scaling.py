"""The elastic pools' statements (sql/scaling.sql), loaded once: what the master's scaling reads
and publishes, and what `status` and the dashboard read of it (docs/elastic-pools.md)."""

from __future__ import annotations

from functools import cache

from supervisor.queue.queries import parse, sql_text


@cache
def _queries() -> dict[str, str]:
    return parse(sql_text("scaling.sql"))


def scaling_query(name: str) -> str:
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/scaling.sql") from None
