"""The Prometheus text exposition format (version 0.0.4), written by hand.

The core's dependencies are fixed, so no client library: families of samples are built in
memory on each scrape and rendered here. Names and label names are checked when a family is
made (a typo would otherwise ship an exposition Prometheus rejects as a whole); label values
and help texts are escaped as the format requires.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
KINDS = ("counter", "gauge", "histogram")

Labels = tuple[tuple[str, str], ...]


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass(frozen=True)
class Sample:
    suffix: str  # "" or, for histograms, "_bucket", "_sum", "_count"
    labels: Labels
    value: float


@dataclass
class Family:
    """One metric: its HELP and TYPE lines and every sample, rendered together."""

    name: str
    kind: str
    help: str
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"invalid metric name {self.name!r}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown metric type {self.kind!r}")
        if (self.kind == "counter") != self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters, and only counters, end in _total")

    def add(self, value: float, **labels: str) -> Family:
        if self.kind == "histogram":
            raise ValueError(f"{self.name}: use add_histogram")
        self.samples.append(Sample("", _labels(labels), value))
        return self

    def add_histogram(
        self, bounds: Sequence[float], buckets: Sequence[int], total: float, **labels: str
    ) -> Family:
        """``buckets`` holds one count per bound plus the overflow (+Inf), not cumulative."""
        if self.kind != "histogram":
            raise ValueError(f"{self.name}: not a histogram")
        if len(buckets) != len(bounds) + 1:
            raise ValueError(f"{self.name}: {len(buckets)} buckets for {len(bounds)} bounds")
        if "le" in labels:
            raise ValueError(f"{self.name}: 'le' is reserved for the bucket bound")
        base = _labels(labels)
        running = 0
        for bound, count in zip([*bounds, math.inf], buckets, strict=True):
            running += count
            le = format_value(float(bound))
            self.samples.append(Sample("_bucket", (*base, ("le", le)), running))
        self.samples.append(Sample("_sum", base, total))
        self.samples.append(Sample("_count", base, running))
        return self


def _labels(labels: dict[str, str]) -> Labels:
    for name in labels:
        if not _LABEL.match(name) or name.startswith("__"):
            raise ValueError(f"invalid label name {name!r}")
    return tuple((name, str(value)) for name, value in labels.items())


def render(families: Iterable[Family]) -> str:
    lines: list[str] = []
    seen: set[str] = set()
    for family in families:
        if family.name in seen:
            raise ValueError(f"metric {family.name} rendered twice")
        seen.add(family.name)
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            lines.append(
                f"{family.name}{sample.suffix}{_render_labels(sample.labels)} "
                f"{format_value(sample.value)}"
            )
    return "\n".join(lines) + "\n" if lines else ""


def _render_labels(labels: Labels) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{name}="{escape_label_value(value)}"' for name, value in labels)
    return "{" + inner + "}"
