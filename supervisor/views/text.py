"""Plain-text output for operator commands: aligned tables, short ages, safe names, ISO times.

Job kinds, queue names and error texts come from the database, where anyone who can enqueue
can write them. Before they reach a terminal, control characters (an escape sequence can
rewrite the screen) are shown escaped; everything printable, any script, is kept.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from datetime import datetime, timezone

from supervisor.config.units import format_duration


def safe(value: object) -> str:
    """``value`` as text with control characters escaped (``\\x1b``, ``\\n``); None is ``-``."""
    if value is None:
        return "-"
    text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escape(ch) for ch in text)


def safe_block(text: str) -> str:
    """Multi-line text (a traceback) with its newlines and tabs kept, other controls escaped."""
    return "\n".join(safe(line.expandtabs(4)) for line in text.splitlines())


def _escape(ch: str) -> str:
    return ch.encode("unicode_escape").decode("ascii")


def width(text: str) -> int:
    """Columns ``text`` takes on a terminal: East Asian wide characters take two."""
    return sum(
        0
        if unicodedata.combining(ch)
        else 2
        if unicodedata.east_asian_width(ch) in ("W", "F")
        else 1
        for ch in text
    )


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[object]],
    *,
    right: Sequence[int] = (),
    indent: str = "",
) -> list[str]:
    """Rows aligned under ``headers``; columns whose index is in ``right`` are right-aligned."""
    cells = [[str(h) for h in headers]] + [[safe(c) for c in row] for row in rows]
    widths = [max(width(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = []
        for i, cell in enumerate(row):
            pad = " " * (widths[i] - width(cell))
            parts.append(pad + cell if i in right else cell + pad)
        lines.append((indent + "  ".join(parts)).rstrip())
    return lines


def age(seconds: float | None) -> str:
    """A short age for tables: the two largest units, ``7m12s``, ``3h5m``, ``2d4h``, ``0.4s``."""
    if seconds is None or math.isnan(seconds):
        return "-"
    if seconds < 0:
        return "-" + age(-seconds)
    if seconds < 1:
        return f"{seconds:.1f}s"
    whole = format_duration(round(seconds))
    parts: list[str] = []
    number = ""
    for ch in whole:
        number += ch
        if ch.isalpha():
            parts.append(number)
            number = ""
    return "".join(parts[:2])


def iso(moment: datetime | None) -> str | None:
    """ISO 8601 in UTC (``2024-05-01T03:00:00.123456+00:00``), for JSON; None stays None."""
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat()


def clock_time(moment: datetime | None) -> str:
    """A UTC wall-clock time for people, to the second: ``2024-05-01 03:00:00 UTC``."""
    if moment is None:
        return "-"
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def listing(ids: Sequence[int], first: int = 20) -> str:
    """``4, 7, 9`` or, past ``first`` ids, ``1, 2, ... 20 and 5 more``."""
    shown = ", ".join(str(i) for i in ids[:first])
    if len(ids) > first:
        return f"{shown} and {len(ids) - first} more"
    return shown
