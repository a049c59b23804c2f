"""The doctor's report: a short table for people, a JSON document for scripts."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from supervisor.doctor.check import Check
from supervisor.views.text import safe

MARK = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}
WIDTH = 100


def to_json(checks: Sequence[Check]) -> dict[str, Any]:
    return {"checks": [c.to_json() for c in checks]}


def render(checks: Sequence[Check], database: str) -> list[str]:
    """Problems first, each with its fix; then one line per check that passed."""
    bad = [c for c in checks if not c.passed]
    name_width = max((len(c.name) for c in checks), default=10)
    lines = [f"pgq doctor on {database}: {len(checks) - len(bad)} ok, {_counts(bad)}", ""]
    for c in sorted(bad, key=lambda c: c.status != "fail"):
        lines.append(f"{MARK[c.status]:<4}  {safe(c.name)}")
        lines += _wrapped("      ", c.detail)
        if c.fix:
            lines += _wrapped("  fix ", c.fix)
        lines.append("")
    for c in checks:
        if c.passed:
            lines.append(f"ok    {safe(c.name):<{name_width}}  {_cut(safe(c.detail))}")
    return lines


def _counts(bad: Sequence[Check]) -> str:
    fails = sum(c.status == "fail" for c in bad)
    warns = len(bad) - fails
    return f"{warns} warn, {fails} fail"


def _wrapped(first: str, text: str) -> list[str]:
    return textwrap.wrap(
        safe(text), WIDTH, initial_indent=first, subsequent_indent=" " * len(first)
    )


def _cut(text: str, limit: int = 76) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
