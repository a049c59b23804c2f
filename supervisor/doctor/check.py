"""A check's result: its name, ok / warn / fail, what it saw, and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["ok", "warn", "fail"]
_RANK = {"ok": 0, "warn": 1, "fail": 2}


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def ok(name: str, detail: str) -> Check:
    return Check(name, "ok", detail)


def graded(value: float, warn_at: float, fail_at: float) -> Status:
    """ok below ``warn_at``, warn from it, fail from ``fail_at``."""
    if value >= fail_at:
        return "fail"
    if value >= warn_at:
        return "warn"
    return "ok"


def worst(checks: Iterable[Check]) -> Status:
    return max((c.status for c in checks), key=_RANK.__getitem__, default="ok")


def bytes_text(n: Any) -> str:
    value = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    return f"{value:,.1f} TiB"
