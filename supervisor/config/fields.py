"""Typed, bounded reads of one mapping in the file; each wrong value becomes an issue, not a stop.

A getter returns the default when its key is absent or wrong, so one pass over the file
reports every mistake in it instead of only the first.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterator
from datetime import time
from typing import Any, TypeVar

from yaml.nodes import MappingNode, Node, ScalarNode

from supervisor.config.reader import INT, NULL, Bad, Reader, join, line_of
from supervisor.config.units import (
    UnitError,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)

T = TypeVar("T")
C = TypeVar("C", bound=Callable[..., Any])

_CLOCK = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)(?::([0-5]\d))?")
# The longest name (of a queue, a kind, a schedule) a setting may hold.
MAX_NAME = 200


class Section:
    """One mapping of the file (possibly absent), read key by key."""

    def __init__(self, reader: Reader, node: Node | None, path: str) -> None:
        self.reader = reader
        self.path = path
        self.entries: dict[str, tuple[Node, Node]] = (
            reader.pairs(node, path) if isinstance(node, MappingNode) else {}
        )
        for key, (key_node, _) in self.entries.items():
            line = line_of(key_node)
            if line is not None:
                reader.lines.setdefault(join(path, key), line)

    @classmethod
    def of(
        cls, reader: Reader, node: Node | None, path: str, what: str, *, required: bool = False
    ) -> Section:
        """The mapping at ``node``: an empty Section (plus an issue if required) otherwise."""
        if node is None:
            if required:
                reader.report(path, f"is required: {what}")
            return cls(reader, None, path)
        if reader.forbidden(node):
            return cls(reader, None, path)  # its tag has been reported; read nothing inside
        if isinstance(node, MappingNode):
            section = cls(reader, node, path)
            if required and not section.entries:
                reader.report(path, f"must not be empty: {what}", node)
            return section
        if isinstance(node, ScalarNode) and node.tag == NULL:
            if required:
                reader.report(path, f"must not be empty: {what}", node)
            return cls(reader, None, path)
        got = node if not isinstance(node, ScalarNode) else node.value
        reader.report_bad(path, Bad(f"must be a mapping ({what})", got), node)
        return cls(reader, None, path)

    def __iter__(self) -> Iterator[tuple[str, Node, Node]]:
        for key, (key_node, value_node) in self.entries.items():
            yield key, key_node, value_node

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __contains__(self, key: str) -> bool:
        return key in self.entries

    def key_path(self, key: str) -> str:
        return join(self.path, key)

    def only(self, *allowed: str) -> None:
        """Report every key not in ``allowed``, with a did-you-mean when one is close."""
        for key, key_node, _ in self:
            if key in allowed:
                continue
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "expected " + ", ".join(allowed)
            self.reader.report(self.key_path(key), f"unknown key; {hint}", key_node)

    def section(self, key: str, what: str, *, required: bool = False) -> Section:
        entry = self.entries.get(key)
        return Section.of(
            self.reader, entry[1] if entry else None, self.key_path(key), what, required=required
        )

    def get(self, key: str, convert: Callable[[Reader, Node], T], default: T) -> T:
        entry = self.entries.get(key)
        if entry is None:
            return default
        return self.read(self.key_path(key), entry[1], convert, default)

    def read(self, path: str, node: Node, convert: Callable[[Reader, Node], T], default: T) -> T:
        try:
            return convert(self.reader, node)
        except Bad as bad:
            self.reader.report_bad(path, bad, node)
            return default

    def node_of(self, key: str) -> Node | None:
        entry = self.entries.get(key)
        return entry[1] if entry else None

    def report(self, key: str, problem: str) -> None:
        self.reader.report(self.key_path(key), problem, self.node_of(key))


def named_bodies(
    top: Section, key: str, what: str, name: re.Pattern[str], rule: str, body: str, required: bool
) -> list[tuple[str, Node, Section]]:
    """The entries of a section of named mappings (pools, schedules): a name that breaks
    ``rule`` is reported, and an empty or misshapen body is reported and left out."""
    section = top.section(key, what, required=required)
    found = []
    for entry, key_node, node in section:
        path = section.key_path(entry)
        if not name.fullmatch(entry):
            section.reader.report(path, rule, key_node)
        mapping = Section.of(section.reader, node, path, body, required=True)
        if mapping:
            found.append((entry, key_node, mapping))
    return found


def check_kind(reader: Reader, path: str, kind: str, kinds: list[str], node: Node) -> None:
    """Report a kind that no handler serves. Without any handler, that is the issue to fix
    first; don't add noise."""
    if kinds and kind not in kinds:
        close = difflib.get_close_matches(kind, kinds, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        reader.report(path, f"no handler for this kind; add it under handlers{hint}", node)


def described(schema: dict[str, Any]) -> Callable[[C], C]:
    """Mark a converter with the JSON Schema of what it accepts: the reference page and the
    editors' schema (supervisor.config.reference) are generated from these marks."""

    def mark(convert: C) -> C:
        convert.json_schema = schema  # type: ignore[attr-defined]
        return convert

    return mark


def schema_of(convert: Callable[..., Any]) -> dict[str, Any]:
    return dict(getattr(convert, "json_schema", {}))


# Converters: (reader, node) -> value, raising Bad. Built by the functions below so a schema
# line reads like ``s.get("processes", integer(1, 256), 1)``.


def optional(convert: Callable[[Reader, Node], T]) -> Callable[[Reader, Node], T | None]:
    """The same converter, but an empty value (``key:``, ``~``, null) means "not set"."""

    def maybe(reader: Reader, node: Node) -> T | None:
        if isinstance(node, ScalarNode) and reader.scalar(node, "") is None:
            return None
        return convert(reader, node)

    return described(schema_of(convert))(maybe)


def integer(low: int, high: int, *, noun: str = "") -> Callable[[Reader, Node], int]:
    """An int in [low, high]; ``noun`` starts the message ("weight must be ...")."""
    must = f"{noun} must" if noun else "must"

    def convert(reader: Reader, node: Node) -> int:
        value = reader.scalar(node, "an integer")
        if isinstance(value, bool) or not isinstance(value, int):
            raise Bad(f"{must} be an integer", value)
        if value < low:
            raise Bad(
                f"{must} be a positive integer" if low == 1 else f"{must} be at least {low}", value
            )
        if value > high:
            raise Bad(f"{must} be at most {high}", value)
        return value

    return described({"type": "integer", "minimum": low, "maximum": high})(convert)


@described({"type": "boolean"})
def boolean(reader: Reader, node: Node) -> bool:
    value = reader.scalar(node, "true or false")
    if not isinstance(value, bool):
        raise Bad("must be true or false", value)
    return value


def text(*, max_chars: int = 1000) -> Callable[[Reader, Node], str]:
    def convert(reader: Reader, node: Node) -> str:
        value = reader.text(node, "a string")
        if not isinstance(value, str):
            raise Bad("must be a string", value)
        if not value.strip():
            raise Bad("must not be empty")
        if len(value) > max_chars:
            raise Bad(f"must be at most {max_chars} characters, got {len(value)}")
        if "\0" in value:
            raise Bad("must not contain a NUL character")
        return value

    return described({"type": "string", "minLength": 1, "maxLength": max_chars})(convert)


def choice(*options: str) -> Callable[[Reader, Node], str]:
    def convert(reader: Reader, node: Node) -> str:
        value = reader.text(node, "one of " + ", ".join(options))
        if isinstance(value, str) and value.lower() in options:
            return value.lower()
        raise Bad("must be one of " + ", ".join(options), value)

    return described({"enum": list(options)})(convert)


def duration(high: float) -> Callable[[Reader, Node], float]:
    def convert(reader: Reader, node: Node) -> float:
        value = reader.scalar(node, "a duration")
        try:
            seconds = parse_duration(value, "")
        except UnitError as exc:
            raise Bad(exc.problem, exc.value) from None
        if seconds <= 0:
            raise Bad("must be more than zero", value)
        if seconds > high:
            raise Bad(f"must be at most {format_duration(high)}", value)
        return seconds

    return described(
        {
            "type": ["number", "string"],
            "description": "a duration: seconds, or 500ms, 30s, 5m, 1h30m, 2d; at most "
            + format_duration(high),
            "x-pgq-unit": "duration",
        }
    )(convert)


@described(
    {
        "type": ["number", "string"],
        "description": "a share: a percentage such as 1% or 0.05%, or a number from 0 to 1",
    }
)
def fraction(reader: Reader, node: Node) -> float:
    """A share: a percentage (``1%``, ``0.05%``) or a number between 0 and 1 (``0.01``)."""
    value = reader.scalar(node, "a share such as 1% or 0.01")
    text_value = value.strip() if isinstance(value, str) else None
    try:
        if text_value is not None and text_value.endswith("%"):
            share = float(text_value[:-1]) / 100
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            share = float(value)
        else:
            raise ValueError
    except ValueError:
        raise Bad("must be a share such as 1% or 0.01", value) from None
    if not 0 < share <= 1 or math.isnan(share):
        raise Bad("must be more than 0% and at most 100%", value)
    return share


def size(low: int, high: int) -> Callable[[Reader, Node], int]:
    def convert(reader: Reader, node: Node) -> int:
        value = reader.scalar(node, "a size")
        if isinstance(value, float) and not math.isnan(value) and value.is_integer():
            value = int(value)
        try:
            count = parse_size(value, "")
        except UnitError as exc:
            raise Bad(exc.problem, exc.value) from None
        if count < low:
            raise Bad(f"must be at least {format_size(low)}", value)
        if count > high:
            raise Bad(f"must be at most {format_size(high)}", value)
        return count

    return described(
        {
            "type": ["integer", "string"],
            "description": f"a size: bytes, or 512MiB, 1.5GiB, 100MB; {format_size(low)} to "
            + format_size(high),
            "x-pgq-unit": "size",
        }
    )(convert)


@described(
    {
        "type": "string",
        "pattern": "^([01]?[0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9])?$",
        "description": 'a 24-hour local time, "03:00" or "03:00:30"',
    }
)
def clock(reader: Reader, node: Node) -> time:
    # An unquoted 03:00 is a base-60 integer (180) in YAML 1.1; read the text as written.
    raw = node.value if isinstance(node, ScalarNode) and node.tag == INT else None
    value = raw if raw is not None else reader.text(node, 'a time like "03:00"')
    match = _CLOCK.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise Bad('must be a 24-hour time like "03:00" (HH:MM, or HH:MM:SS)', value)
    return time(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
