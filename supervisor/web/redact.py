"""Redaction of job arguments the operator named (``web.redact``): a card number or a token in
a job's arguments is replaced, at every depth, before any page or API shows the arguments."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

REDACTED = "[redacted]"


def redact(value: Any, keys: Collection[str]) -> Any:
    """``value`` with the value of every mapping key in ``keys`` replaced (keys compared without
    regard to case), in nested mappings and lists too."""
    if not keys:
        return value
    folded = {k.casefold() for k in keys}
    return _redact(value, folded)


def _redact(value: Any, folded: set[str]) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if str(k).casefold() in folded else _redact(v, folded)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(v, folded) for v in value]
    return value
