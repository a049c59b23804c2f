"""The `schedules:` section: periodic jobs, each validated field by field with its key path."""

from __future__ import annotations

import re
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from supervisor.config.fields import (
    MAX_NAME,
    Section,
    check_kind,
    choice,
    described,
    duration,
    integer,
    named_bodies,
    text,
)
from supervisor.config.model import DAY, ScheduleConfig
from supervisor.config.reader import Bad, Reader
from supervisor.config.ticks import cron_problem
from supervisor.config.units import format_duration
from supervisor.queue.enqueue import EnqueueError, encode_args

SCHEDULE_KEYS = ("cron", "every", "kind", "args", "queue", "priority", "timezone", "missed")
MAX_EVERY = 30 * DAY


def schedules(top: Section, kinds: list[str]) -> dict[str, ScheduleConfig]:
    entries = named_bodies(
        top,
        "schedules",
        "each schedule: {cron or every, kind, args, queue...}",
        _SCHEDULE_NAME,
        "schedule name must be 1-64 letters, digits, '_', '-' or '.'",
        "with cron or every, and kind",
        required=False,
    )
    schedules = {}
    for name, key_node, body in entries:
        schedule = _schedule(name, body, kinds, key_node)
        if schedule is not None:
            schedules[name] = schedule
    return schedules


_SCHEDULE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _schedule(name: str, s: Section, kinds: list[str], key: Node) -> ScheduleConfig | None:
    s.only(*SCHEDULE_KEYS)
    cron = s.get("cron", text(max_chars=200), None)
    if cron is not None:
        problem = cron_problem(cron)
        if problem:
            s.reader.report_bad(s.key_path("cron"), Bad(problem, cron), s.node_of("cron"))
            cron = None
    every = s.get("every", duration(MAX_EVERY), None)
    if every is not None and every < 1.0:
        s.report("every", f"must be at least 1s, got {format_duration(every)}")
        every = None
    if ("cron" in s) == ("every" in s):
        s.reader.report(s.path, "needs exactly one of cron (a cron expression) or every (30s)", key)
    zone = s.get("timezone", text(max_chars=100), "UTC")
    if "timezone" in s and "every" in s:
        s.report("timezone", "applies to cron only; every counts seconds, whatever the zone")
    elif not _zone_exists(zone):
        s.report("timezone", f"is not a known time zone (like UTC or Europe/Berlin), got {zone!r}")
    kind = s.get("kind", text(max_chars=MAX_NAME), None)
    if kind is None and "kind" not in s:
        s.reader.report(s.key_path("kind"), "is required: a job kind from handlers")
    elif kind is not None:
        check_kind(s.reader, s.key_path("kind"), kind, kinds, s.node_of("kind"))
    args = s.get("args", _job_args, {})
    queue = s.get("queue", text(max_chars=MAX_NAME), "default")
    priority = s.get("priority", integer(-32768, 32767), 0)
    missed = s.get("missed", choice("skip", "run_once"), "skip")
    if kind is None or (cron is None and every is None):
        return None  # reported above; the rest of the file is still read for its issues
    return ScheduleConfig(
        name=name,
        kind=kind,
        cron=cron,
        every=every,
        args=args,
        queue=queue,
        priority=priority,
        timezone=zone,
        missed=missed,
    )


def _zone_exists(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


@described({"type": "object"})
def _job_args(reader: Reader, node: Node) -> dict[str, object]:
    """A job's arguments as written: a mapping of plain values that JSON can carry."""
    if not isinstance(node, MappingNode):
        raise Bad("must be a mapping of the job's keyword arguments, like {full: true}")
    value = _plain(reader, node)
    try:
        encode_args("schedule", value)
    except EnqueueError as exc:
        raise Bad(str(exc).removeprefix("job 'schedule': ")) from None
    assert isinstance(value, dict)
    return value


def _plain(reader: Reader, node: Node) -> object:
    if isinstance(node, MappingNode):
        return {key: _plain(reader, value) for key, (_, value) in reader.pairs(node, "").items()}
    if isinstance(node, SequenceNode):
        return [_plain(reader, item) for item in node.value]
    if isinstance(node, ScalarNode):
        return reader.scalar(node, "a value")
    raise Bad("must hold plain values only")
