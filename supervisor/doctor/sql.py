"""The doctor's named queries (sql/doctor.sql), loaded once: the doctor's own namespace."""

from __future__ import annotations

from functools import cache

from supervisor.queue.queries import parse, sql_text


@cache
def _queries() -> dict[str, str]:
    return parse(sql_text("doctor.sql"))


def doctor_query(name: str) -> str:
    try:
        return _queries()[name]
    except KeyError:
        raise KeyError(f"no query named {name!r} in sql/doctor.sql") from None
