"""Searches by arguments that must be refused: those naming a protected key.

A search for ``{"card": "4111..."}`` against an encrypted field never matches (the row holds an
envelope), and against a redacted one it answers yes or no about a value no page shows: either
way it is refused, with a message that names the key and where it is declared, never the value
searched for. One piece for every surface that searches (the dashboard's /jobs and its bulk
actions: HTTP 400; the CLI's --args: exit 2); ``protected`` gathers the keys it refuses, so
web.redact can join the encrypt: fields here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any

from supervisor.queue.secrets import MARK


def protected_keys(
    config: Any, kind: str | None = None, redact: Collection[str] | None = None
) -> dict[str, str]:
    """Argument keys a search may not name (case-folded), each with where it is declared:
    ``jobs.KIND.encrypt`` for the kind searched (every kind's when none is named), and
    ``web.redact`` for every kind (``redact``, else the config's)."""
    found: dict[str, str] = {MARK.casefold(): "the envelope of encrypted arguments"}
    if config is not None:
        for job_kind, fields in config.encrypted_fields().items():
            if kind is not None and job_kind != kind:
                continue
            for name in fields:
                found.setdefault(name.casefold(), f"jobs.{job_kind}.encrypt")
    if redact is None:
        redact = config.web.redact if config is not None else ()
    for name in redact:  # no page shows them: a search would tell them
        found.setdefault(name.casefold(), "web.redact")
    return found


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from _keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _keys(inner)


def search_problem(args: Mapping[str, Any] | None, protected: Mapping[str, str]) -> str | None:
    """Why a search by ``args`` (a JSON containment filter) is refused, or None."""
    if not args:
        return None
    for key in _keys(dict(args)):
        where = protected.get(key.casefold())
        if where is not None:
            return (
                f"args: a search cannot name {key!r}: its values are not searchable ({where} "
                "lists it)"
            )
    return None
