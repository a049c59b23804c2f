"""Elastic pools in the file: `processes: {min, max, ...}` and the host's budgets `host: {cpu,
memory}` (docs/elastic-pools.md). A plain `processes: N` stays a fixed pool, and a plain
`host: NAME` stays the supervisor's name: both keys keep their first meaning and gain a mapping.
"""

from __future__ import annotations

from yaml.nodes import MappingNode, Node

from supervisor.config.fields import Section, described, duration, fraction, integer, size
from supervisor.config.model import DAY, HostBudget, ScalingConfig

MAX_PROCESSES = 256
SCALING_KEYS = ("min", "max", "target_wait", "quiet", "weight")
BUDGET_KEYS = ("name", "cpu", "memory")
MiB = 2**20
TiB = 2**40

_processes_count = integer(1, MAX_PROCESSES)


@described(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_PROCESSES},
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["max"],
                "properties": {
                    "min": {"type": "integer", "minimum": 1, "maximum": MAX_PROCESSES},
                    "max": {"type": "integer", "minimum": 1, "maximum": MAX_PROCESSES},
                    "target_wait": {"type": ["number", "string"]},
                    "quiet": {"type": ["number", "string"]},
                    "weight": {"type": "integer", "minimum": 1, "maximum": 1000},
                },
            },
        ],
        "description": "integer 1..256 (fixed), or {min, max, target_wait, quiet, weight} "
        "(elastic)",
    }
)
def _processes_scalar(reader: object, node: Node) -> int:
    return _processes_count(reader, node)  # type: ignore[arg-type]


def processes(pool: Section) -> tuple[int, ScalingConfig | None]:
    """The pool's starting number of children and, for an elastic pool, its scaling."""
    node = pool.node_of("processes")
    if not isinstance(node, MappingNode):
        return pool.get("processes", _processes_scalar, 1), None
    s = Section.of(pool.reader, node, pool.key_path("processes"), "min, max")
    s.only(*SCALING_KEYS)
    low = s.get("min", integer(1, MAX_PROCESSES), 1)
    if "max" not in s:
        s.reader.report(s.path, "an elastic pool needs max (the most children it may grow to)")
        return low, None
    high = s.get("max", integer(1, MAX_PROCESSES), low)
    if high < low:
        s.report("max", f"must be at least min ({low}), got {high}")
        high = low
    scaling = ScalingConfig(
        min=low,
        max=high,
        target_wait=s.get("target_wait", duration(DAY), 5.0),
        quiet=s.get("quiet", duration(DAY), 60.0),
        weight=s.get("weight", integer(1, 1000), 1),
    )
    return low, scaling


def host_section(top: Section) -> Section | None:
    """`host` as a mapping (name and budgets), or None when it is a plain name or absent."""
    node = top.node_of("host")
    if not isinstance(node, MappingNode):
        return None
    return Section.of(top.reader, node, top.key_path("host"), "name, cpu, memory")


def budget(top: Section) -> HostBudget:
    """`host: {cpu, memory}`; a plain `host: NAME` has no budgets (read by the host identity)."""
    s = host_section(top)
    if s is None:
        return HostBudget()
    s.only(*BUDGET_KEYS)
    return HostBudget(
        cpu=s.get("cpu", fraction, None),
        memory=s.get("memory", size(16 * MiB, TiB), None),
    )
