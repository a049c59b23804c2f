"""Durations and sizes as operators write them in the YAML file: ``30s``, ``1h30m``, ``512MiB``.

A bare number is a count of the base unit (seconds, bytes), so ``timeout: 120`` and
``timeout: 2m`` agree. Sizes follow the SI and IEC definitions (``MB`` = 10^6, ``MiB`` = 2^20);
a lone ``K``/``M``/``G``/``T`` (or ``Ki``/``Gi``...) means the binary unit, because that is what
the tools operators set memory limits with already mean by it (systemd ``MemoryMax=2G``,
``docker run -m 2g``). Units are case-insensitive.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

_SECOND_UNITS = {"ms": Decimal("0.001"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}
_SECOND_UNITS["d"] = Decimal(86400)
_DURATION_ORDER = ["d", "h", "m", "s", "ms"]

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_DURATION_PART = re.compile(rf"\s*({_NUMBER})\s*(ms|[dhms])", re.IGNORECASE)
_SIZE = re.compile(rf"({_NUMBER})\s*([kmgtp]?)(i?)(b?)", re.IGNORECASE)

_SIZE_PREFIX = "kmgtp"
_IEC_NAMES = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]
_SI_NAMES = ["B", "KB", "MB", "GB", "TB", "PB"]

DURATION_HINT = "a number of seconds or a duration like 500ms, 30s, 5m, 1h30m, 2d"
SIZE_HINT = "a number of bytes or a size like 64KiB, 512MiB, 1.5GiB, 100MB"


class UnitError(ValueError):
    """A value that is not a valid duration or size; ``path`` is the config key it came from.

    ``problem`` and ``value`` are kept apart so a caller can word the value its own way (the
    configuration hides values that came from environment variables).
    """

    def __init__(self, path: str, problem: str, value: object) -> None:
        self.path = path
        self.problem = problem
        self.value = value
        self.message = f"{problem}, got {_describe(value)}"
        super().__init__(f"{path}: {self.message}" if path else self.message)


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse_duration(value: object, path: str) -> float:
    """Seconds from a number of seconds or a string like ``1h30m``; never negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnitError(path, f"must be {DURATION_HINT}", value)
    if isinstance(value, str):
        return _duration_from_text(value, path)
    try:
        seconds = float(value)
    except OverflowError:
        raise UnitError(path, "is far too large", value) from None
    if math.isnan(seconds) or math.isinf(seconds):
        raise UnitError(path, "must be a finite duration", value)
    if seconds < 0:
        raise UnitError(path, "must not be negative", value)
    return seconds


def _duration_from_text(text: str, path: str) -> float:
    stripped = text.strip()
    if stripped.startswith("-"):
        raise UnitError(path, "must not be negative", text)
    if re.fullmatch(_NUMBER, stripped):
        return _finite(Decimal(stripped), text, path)
    total = Decimal(0)
    seen: list[str] = []
    position = 0
    while position < len(stripped):
        match = _DURATION_PART.match(stripped, position)
        if not match:
            raise UnitError(path, f"must be {DURATION_HINT}", text)
        unit = match.group(2).lower()
        # Units must run from largest to smallest, once each, so "30m1h" or "5m5m" (likely
        # typos) are rejected instead of silently summed.
        if seen and _DURATION_ORDER.index(unit) <= _DURATION_ORDER.index(seen[-1]):
            raise UnitError(path, "units must go from largest to smallest", text)
        seen.append(unit)
        total += Decimal(match.group(1)) * _SECOND_UNITS[unit]
        position = match.end()
    if not seen:
        raise UnitError(path, f"must be {DURATION_HINT}", text)
    return _finite(total, text, path)


def _finite(seconds: Decimal, text: str, path: str) -> float:
    result = float(seconds)
    if math.isinf(result):
        raise UnitError(path, "is far too large", text)
    return result


def parse_size(value: object, path: str) -> int:
    """Bytes from a whole number of bytes or a string like ``512MiB``; never negative."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise UnitError(path, f"must be {SIZE_HINT}", value)
    if isinstance(value, int):
        if value < 0:
            raise UnitError(path, "must not be negative", value)
        return value
    stripped = value.strip()
    if stripped.startswith("-"):
        raise UnitError(path, "must not be negative", value)
    match = _SIZE.fullmatch(stripped)
    if not match:
        raise UnitError(path, f"must be {SIZE_HINT}", value)
    number, prefix, binary, byte = match.groups()
    if not prefix and binary:
        raise UnitError(path, f"must be {SIZE_HINT}", value)
    if prefix:
        power = _SIZE_PREFIX.index(prefix.lower()) + 1
        # "MB" is decimal; "MiB", "Mi" and a lone "M" are binary (see the module docstring).
        decimal = bool(byte) and not binary
        multiplier = 1000**power if decimal else 1024**power
    else:
        multiplier = 1
    try:
        exact = Decimal(number) * multiplier
    except InvalidOperation:
        raise UnitError(path, f"must be {SIZE_HINT}", value) from None
    if exact != exact.to_integral_value():
        if multiplier == 1:
            raise UnitError(path, "must be a whole number of bytes", value)
        # 1.1KiB is 1126.4 bytes: round to the nearest byte rather than refuse.
        exact = exact.to_integral_value()
    return int(exact)


def format_duration(seconds: float) -> str:
    """``90`` -> ``1m30s``, ``0.5`` -> ``500ms``, ``1209600`` -> ``14d``; rounds to milliseconds."""
    if math.isnan(seconds) or math.isinf(seconds):
        return str(seconds)
    sign = "-" if seconds < 0 else ""
    millis = round(abs(seconds) * 1000)
    if millis == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    if millis:
        parts.append(f"{millis}ms")
    return sign + "".join(parts)


def format_size(n: int) -> str:
    """``536870912`` -> ``512MiB``, ``100000000`` -> ``100MB``, ``1610612736`` -> ``1.5GiB``.

    Exact when an IEC or SI unit expresses the value with at most two decimals; otherwise the
    nearest IEC value with two decimals, prefixed with ``~``.
    """
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1000:
        return f"{sign}{n}B"
    for names, base in ((_IEC_NAMES, 1024), (_SI_NAMES, 1000)):
        scaled, name = _scale(n, names, base)
        if scaled == scaled.quantize(_CENTS):
            return f"{sign}{_trim(scaled)}{name}"
    scaled, name = _scale(n, _IEC_NAMES, 1024)
    return f"{sign}~{_trim(scaled.quantize(_CENTS))}{name}"


_CENTS = Decimal("0.01")


def _scale(n: int, names: list[str], base: int) -> tuple[Decimal, str]:
    power = len(names) - 1
    while power > 0 and base**power > n:
        power -= 1
    return Decimal(n) / Decimal(base**power), names[power]


def _trim(number: Decimal) -> str:
    text = f"{number:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
