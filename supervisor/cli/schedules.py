"""Periodic schedules for operators: the `schedules` verb (the next ticks of each, from the file
alone). The SCHEDULES part of `status` is supervisor.views.schedules."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from typing import Any

from supervisor.cli.verbs import Context, verb
from supervisor.config import ScheduleConfig
from supervisor.config.ticks import next_ticks
from supervisor.shared.exits import MasterExit
from supervisor.views.schedules import describe, rule
from supervisor.views.text import clock_time, iso

SHOWN_TICKS = 5


def schedules_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document, for scripts")


@verb(
    "schedules",
    f"list each periodic schedule of the config and its next {SHOWN_TICKS} ticks",
    schedules_arguments,
)
def schedules_verb(ctx: Context) -> int:
    now = datetime.now(timezone.utc)
    listed = {name: next_ticks(s, now, SHOWN_TICKS) for name, s in ctx.config.schedules.items()}
    if ctx.args.json:
        document = [
            {**describe(s), "next_ticks": [iso(t) for t in listed[s.name]]}
            for s in ctx.config.schedules.values()
        ]
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    if not listed:
        print(f"no schedules in {ctx.config.path}")
        return MasterExit.OK
    for s in ctx.config.schedules.values():
        print(f"{s.name}: {s.kind} on queue {s.queue}, {rule(s)}, missed: {s.missed}")
        for tick in listed[s.name]:
            local = tick.astimezone(_zone(s)).strftime("%Y-%m-%d %H:%M:%S %Z")
            shown = clock_time(tick) if s.every is not None else f"{clock_time(tick)}  ({local})"
            print(f"  {shown}")
    return MasterExit.OK


def _zone(s: ScheduleConfig) -> Any:
    from zoneinfo import ZoneInfo

    return ZoneInfo(s.timezone)
