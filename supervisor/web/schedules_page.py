"""/schedules: each periodic schedule of the config with its next ticks, its last tick and job,
and whether it is paused; run one now, pause, resume (each confirmed, like every action)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from supervisor.config import ScheduleConfig
from supervisor.config.ticks import next_ticks
from supervisor.queue.queries import query
from supervisor.views.schedules import rule
from supervisor.web.controls import Plan, action
from supervisor.web.reads import fetch, server_now, snapshot
from supervisor.web.site import Site

TICKS = 3


@dataclass(frozen=True)
class ScheduleView:
    schedule: ScheduleConfig
    rule: str
    next_ticks: list[datetime]
    last_tick: datetime | None
    last_job_id: int | None
    paused_at: datetime | None
    paused_by: str | None


async def read(site: Site) -> tuple[datetime, list[ScheduleView]]:
    async with snapshot(site.pool) as conn:
        now = await server_now(conn)
        records = {r["name"]: r for r in await fetch(conn, query("list_schedules"))}
        pauses = {r["name"]: r for r in await fetch(conn, query("paused_schedules"))}
    views = []
    for name, s in (site.config.schedules if site.config else {}).items():
        record, pause = records.get(name, {}), pauses.get(name, {})
        views.append(
            ScheduleView(
                s,
                rule(s),
                next_ticks(s, now, TICKS),
                record.get("last_tick"),
                record.get("last_job_id"),
                pause.get("paused_at"),
                pause.get("paused_by"),
            )
        )
    return now, views


def routes(site: Site) -> list[Route]:
    async def page(request: Request) -> Response:
        now, views = await read(site)
        return site.render(
            request, "schedules.html", now=now, schedules=views, configured=site.config is not None
        )

    def schedule_of(values: Mapping[str, Any]) -> ScheduleConfig:
        name = str(values["name"])
        found = site.config.schedules.get(name) if site.config else None
        if found is None:
            raise HTTPException(404, f"no schedule {name!r} in this dashboard's configuration")
        return found

    def run_now(values: Mapping[str, Any]) -> Plan:
        s = schedule_of(values)
        return Plan(
            title=f"Run schedule {s.name} now",
            question=f"Enqueue one {s.kind} job on queue {s.queue} now, with the schedule's "
            "arguments? Its next tick still runs as planned.",
            button=f"Run {s.name} now",
            back="/schedules",
            fields={},
            run=lambda: site.actions.run_schedule(s),
        )

    def pause(values: Mapping[str, Any]) -> Plan:
        s = schedule_of(values)
        return Plan(
            title=f"Pause schedule {s.name}",
            question=f"Pause schedule {s.name} on every supervisor? Its ticks pass without a "
            "job until it is resumed (resuming does not make up for them).",
            button=f"Pause {s.name}",
            back="/schedules",
            fields={},
            run=lambda: site.actions.pause_schedule(s.name, "dashboard"),
            danger=True,
        )

    def resume(values: Mapping[str, Any]) -> Plan:
        s = schedule_of(values)
        return Plan(
            title=f"Resume schedule {s.name}",
            question=f"Resume schedule {s.name}? Its next tick enqueues a job.",
            button=f"Resume {s.name}",
            back="/schedules",
            fields={},
            run=lambda: site.actions.resume_schedule(s.name),
        )

    both = ["GET", "POST"]
    return [
        Route("/schedules", page),
        Route("/schedules/{name}/run-now", action(site, "run schedule now", run_now), methods=both),
        Route("/schedules/{name}/pause", action(site, "pause schedule", pause), methods=both),
        Route("/schedules/{name}/resume", action(site, "resume schedule", resume), methods=both),
    ]
