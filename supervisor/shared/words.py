"""Counts in words, for every message the command line and the dashboard print."""

from __future__ import annotations

# Nouns whose plural is not the singular plus "s".
_IRREGULAR = {"child": "children", "dead letter": "dead letters"}


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 job``, ``2 jobs``, ``0 jobs``; ``nouns`` when the plural is not noun + "s"."""
    if n == 1:
        return f"{n} {noun}"
    return f"{n:,} {nouns or _IRREGULAR.get(noun) or noun + 's'}"
