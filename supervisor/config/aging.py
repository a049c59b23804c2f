"""The `aging:` section: how fast a waiting job rises in priority, per queue (issue 33).

    aging:
      every: 30s               # every queue: one priority level per 30 s waited past run_at
      queues: {reports: 10s}   # this queue faster; 0s turns it off for a queue

A due job that has waited past its run_at rises one priority level per period, never past the
highest priority waiting in its tenant of the queue (sql/claim/aging.sql says how the claim
does it without writing anything). Absent, or `every: 0s` with no queue named: no aging.
"""

from __future__ import annotations

import difflib

from yaml.nodes import Node

from supervisor.config.fields import Section, described
from supervisor.config.model import AgingConfig, PoolConfig
from supervisor.config.reader import Bad, Reader
from supervisor.config.units import UnitError, format_duration, parse_duration

# A level a week: slower is no aging at all in practice, and a typo (30d for 30s) more likely.
MAX_EVERY = 7 * 86400.0


@described(
    {
        "type": ["number", "string"],
        "description": "a duration: seconds, or 500ms, 30s, 5m, 1h; 0s turns aging off; at most "
        + format_duration(MAX_EVERY),
        "x-pgq-unit": "duration",
    }
)
def period(reader: Reader, node: Node) -> float:
    value = reader.scalar(node, "a duration")
    try:
        seconds = parse_duration(value, "")
    except UnitError as exc:
        raise Bad(exc.problem, exc.value) from None
    if seconds < 0:
        raise Bad("must be zero (off) or more", value)
    if 0 < seconds < 0.001:
        raise Bad("must be at least 1ms (or 0s: off)", value)
    if seconds > MAX_EVERY:
        raise Bad(f"must be at most {format_duration(MAX_EVERY)}", value)
    return seconds


def aging(top: Section, pools: dict[str, PoolConfig]) -> AgingConfig:
    section = top.section("aging", "every, queues: {queue: period}")
    section.only("every", "queues")
    every = section.get("every", period, 0.0)
    listed = section.section("queues", "queue: period, like {reports: 10s}")
    served = sorted({queue for pool in pools.values() for queue in pool.queues})
    queues = {}
    for queue, key_node, node in listed:
        path = listed.key_path(queue)
        if pools and queue not in served:
            close = difflib.get_close_matches(queue, served, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "pools serve " + ", ".join(served)
            listed.reader.report(path, f"no pool serves this queue; {hint}", key_node)
            continue
        seconds = listed.read(path, node, period, None)
        if seconds is not None:
            queues[queue] = seconds
    return AgingConfig(every=every, queues=queues)
