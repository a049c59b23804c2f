"""Redaction of job arguments the operator named (``web.redact``): a card number or a token in
a job's arguments is kept out of every surface that shows a job, the dashboard's pages, the
command line's output, the logs, the error texts and the trace spans.

The tools: ``redact`` replaces the value of each named key (at every depth) in arguments about
to be shown; ``scrub`` replaces, in a text (an error, a log line), the values the job's named
keys hold, since a handler's exception message may quote them; ``row_shown`` applies both to a
job's row. A search by arguments naming a redacted key is refused with the encrypted fields
(supervisor/crypto/search.py), because a search that answers "found" or "not found" for
`{"pin": "4821"}` reveals the value one guess at a time.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import replace
from typing import Any, TypeVar

T = TypeVar("T")

REDACTED = "[redacted]"
# A value shorter than this is not searched for in free text: replacing every "7" of an error
# text would garble it and hide nothing (such a value is still redacted wherever the arguments
# are shown). A three-digit card security code is the shortest secret kept out.
MIN_SCRUBBED = 3


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


def secrets_of(args: Any, keys: Collection[str]) -> list[str]:
    """The texts of every value held under a key in ``keys`` (at any depth), longest first."""
    if not keys:
        return []
    folded = {k.casefold() for k in keys}
    found = {text for text in _under(args, folded, False) if len(text) >= MIN_SCRUBBED}
    return sorted(found, key=lambda t: (-len(t), t))


def _under(value: Any, folded: set[str], inside: bool) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _under(v, folded, inside or str(k).casefold() in folded)
    elif isinstance(value, list):
        for v in value:
            yield from _under(v, folded, inside)
    elif inside and value is not None and not isinstance(value, bool):
        yield str(value)


def scrub(text: str | None, args: Any, keys: Collection[str]) -> str | None:
    """``text`` with every value of ``args``'s redacted keys replaced by ``[redacted]``."""
    if not text or not keys:
        return text
    for secret in secrets_of(args, keys):
        text = text.replace(secret, REDACTED)
    return text


def scrub_errors(errors: Any, args: Any, keys: Collection[str]) -> Any:
    """A job's kept errors (pgq.jobs.errors: a list of {"error": text, ...}), scrubbed."""
    if not keys or not isinstance(errors, list):
        return errors
    return [
        {**e, "error": scrub(e.get("error"), args, keys)} if isinstance(e, dict) else e
        for e in errors
    ]


def shown(job: T, keys: Collection[str]) -> T:
    """A job (a dataclass with ``args``, ``last_error`` and ``errors``, such as JobDetail) as
    any surface may show it."""
    if not keys:
        return job
    args = job.args  # type: ignore[attr-defined]
    return replace(
        job,  # type: ignore[type-var]
        args=redact(args, keys),
        last_error=scrub(job.last_error, args, keys),  # type: ignore[attr-defined]
        errors=scrub_errors(job.errors, args, keys),  # type: ignore[attr-defined]
    )


def row_shown(row: dict[str, Any], keys: Collection[str]) -> dict[str, Any]:
    """A job's row (a dict with ``args`` and perhaps ``last_error``) as any surface may show it."""
    if not keys or "args" not in row:
        return row
    args = row["args"]
    shown_row = {**row, "args": redact(args, keys)}
    if "last_error" in row:
        shown_row["last_error"] = scrub(row["last_error"], args, keys)
    if "errors" in row:
        shown_row["errors"] = scrub_errors(row["errors"], args, keys)
    return shown_row
