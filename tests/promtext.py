"""A strict parser of the Prometheus text exposition format 0.0.4, for the tests.

Stricter than Prometheus itself where that catches our mistakes: every sample belongs to a
family declared by a TYPE line before it, families are contiguous and declared once, no series
appears twice, counters are not negative, and histograms are whole (cumulative buckets ending in
+Inf, which equals _count, and a _sum).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SAMPLE = re.compile(rf"^({_NAME})(\{{.*\}})? (\S+)( -?\d+)?$")
_HELP = re.compile(rf"^# HELP ({_NAME}) (.*)$")
_TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$")

Labels = frozenset[tuple[str, str]]


class ExpositionError(AssertionError):
    pass


@dataclass
class Family:
    name: str
    type: str
    help: str | None = None
    # (sample name, labels) -> value
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)


@dataclass
class Exposition:
    families: dict[str, Family]

    def get(self, name: str, **labels: str) -> float | None:
        """The value of one series (a sample name such as x_bucket, x_sum or x_total)."""
        want = frozenset(labels.items())
        for family in self.families.values():
            value = family.samples.get((name, want))
            if value is not None:
                return value
        return None

    def value(self, name: str, **labels: str) -> float:
        value = self.get(name, **labels)
        if value is None:
            raise KeyError(f"no series {name}{labels}")
        return value

    def series(self, name: str) -> dict[Labels, float]:
        return {
            labels: value
            for family in self.families.values()
            for (sample, labels), value in family.samples.items()
            if sample == name
        }


def _unescape(text: str, where: str, *, help_text: bool = False) -> str:
    """Label values escape backslash, quote and newline; HELP texts only the first and last."""
    escapes = {"\\": "\\", "n": "\n"} if help_text else {"\\": "\\", '"': '"', "n": "\n"}
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            if i + 1 >= len(text) or text[i + 1] not in escapes:
                raise ExpositionError(f"bad escape in {where}")
            out.append(escapes[text[i + 1]])
            i += 2
            continue
        if ch == '"' and not help_text:
            raise ExpositionError(f"unescaped quote in {where}")
        out.append(ch)
        i += 1
    return "".join(out)


def _parse_labels(text: str, where: str) -> Labels:
    body = text[1:-1]
    labels: dict[str, str] = {}
    i = 0
    while i < len(body):
        m = _LABEL_NAME.match(body, i)
        if not m or body[m.end() : m.end() + 2] != '="':
            raise ExpositionError(f"bad label at {body[i:]!r} in {where}")
        name, j = m.group(), m.end() + 2
        value_start = j
        while j < len(body) and body[j] != '"':
            j += 2 if body[j] == "\\" else 1
        if j >= len(body):
            raise ExpositionError(f"unterminated label value in {where}")
        if name in labels:
            raise ExpositionError(f"label {name} twice in {where}")
        labels[name] = _unescape(body[value_start:j], where)
        j += 1
        if j < len(body):
            if body[j] != ",":
                raise ExpositionError(f"expected ',' after label {name} in {where}")
            j += 1
        i = j
    return frozenset(labels.items())


def _parse_value(text: str, where: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    try:
        return float(text)
    except ValueError:
        raise ExpositionError(f"bad value {text!r} in {where}") from None


def _family_of(sample: str, families: dict[str, Family]) -> tuple[Family, str]:
    if sample in families and families[sample].type != "histogram":
        return families[sample], ""
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample.removesuffix(suffix)
        if base != sample and base in families and families[base].type == "histogram":
            return families[base], suffix
    raise ExpositionError(f"sample {sample} has no TYPE line before it")


def parse(text: str) -> Exposition:
    if text and not text.endswith("\n"):
        raise ExpositionError("the exposition must end with a newline")
    families: dict[str, Family] = {}
    current: str | None = None
    closed: set[str] = set()
    for number, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {number}: {line!r}"
        if not line:
            raise ExpositionError(f"empty {where}")
        if line.startswith("#"):
            if m := _HELP.match(line):
                name = m.group(1)
                family = families.setdefault(name, Family(name, "untyped"))
                if family.help is not None:
                    raise ExpositionError(f"second HELP for {name}, {where}")
                family.help = _unescape(m.group(2), where, help_text=True)
            elif m := _TYPE.match(line):
                name, kind = m.groups()
                family = families.get(name)
                if family is not None and (family.type != "untyped" or family.samples):
                    raise ExpositionError(f"TYPE for {name} after its samples or twice, {where}")
                families[name] = Family(name, kind, family.help if family else None)
            elif line.startswith(("# HELP", "# TYPE")):
                raise ExpositionError(f"malformed {where}")
            else:
                continue
            if current is not None and current != name:
                closed.add(current)
            if name in closed:
                raise ExpositionError(f"family {name} is split, {where}")
            current = name
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ExpositionError(f"malformed {where}")
        sample, label_text, value_text, _ = m.groups()
        family, suffix = _family_of(sample, families)
        if family.name != current:
            raise ExpositionError(f"sample of {family.name} outside its family, {where}")
        labels = _parse_labels(label_text, where) if label_text else frozenset()
        value = _parse_value(value_text, where)
        key = (sample, labels)
        if key in family.samples:
            raise ExpositionError(f"duplicate series, {where}")
        if family.type == "counter" and not value >= 0:
            raise ExpositionError(f"negative counter, {where}")
        has_le = any(k == "le" for k, _ in labels)
        if has_le != (suffix == "_bucket"):
            raise ExpositionError(f"'le' belongs on buckets only, {where}")
        family.samples[key] = value
    for family in families.values():
        if family.type == "histogram":
            _check_histogram(family)
    return Exposition(families)


def _check_histogram(family: Family) -> None:
    groups: dict[Labels, list[tuple[float, float]]] = {}
    for (sample, labels), value in family.samples.items():
        if sample.endswith("_bucket"):
            le = dict(labels)["le"]
            rest = frozenset(kv for kv in labels if kv[0] != "le")
            groups.setdefault(rest, []).append((_parse_value(le, family.name), value))
    for labels, buckets in groups.items():
        buckets.sort()
        counts = [count for _, count in buckets]
        if counts != sorted(counts):
            raise ExpositionError(f"{family.name}{dict(labels)}: buckets are not cumulative")
        if not buckets or not math.isinf(buckets[-1][0]):
            raise ExpositionError(f"{family.name}{dict(labels)}: no +Inf bucket")
        total = family.samples.get((f"{family.name}_count", labels))
        if total != buckets[-1][1]:
            raise ExpositionError(f"{family.name}{dict(labels)}: _count is not the +Inf bucket")
        if (f"{family.name}_sum", labels) not in family.samples:
            raise ExpositionError(f"{family.name}{dict(labels)}: no _sum")
