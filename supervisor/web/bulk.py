"""/jobs and its actions: on the jobs ticked in the list, or on everything a filter matches.

An action on a filter first counts what it will touch (a dry run, GET /jobs/bulk), then acts in
slices of ``SLICE`` jobs, one transaction and one POST each; the page shows the progress and
posts the next slice itself (htmx), with a button to go on by hand. The dry run fixes the range
of ids (at or below the newest job at the time of the count), so jobs enqueued meanwhile are
never touched, and each slice locks its jobs with SKIP LOCKED, so two tabs never act on one job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from supervisor.crypto import mask
from supervisor.crypto.search import protected_keys, search_problem
from supervisor.queue.bulk import ACTIONS, SLICE, Action, JobFilter, NotApplicable, states_for
from supervisor.queue.control import STATES
from supervisor.web import audit, finder, timeseries
from supervisor.web.actions import ActionError, Done
from supervisor.web.controls import Plan, action
from supervisor.web.security import csrf_problem
from supervisor.web.site import Site

Bulk = Action
BULKS = ACTIONS


def _bulk(name: object) -> Action:
    found = BULKS.get(str(name))
    if found is None:
        raise HTTPException(400, f"action must be one of {', '.join(BULKS)}")
    return found


def _states(bulk: Action, which: JobFilter) -> list[str]:
    """The states the action touches under this filter; none is a 400 that says why."""
    try:
        return states_for(bulk, which)
    except NotApplicable as exc:
        raise HTTPException(400, str(exc)) from None


def _before(request: Request) -> int | None:
    raw = request.query_params.get("before", "").strip()
    if not raw:
        return None
    if not raw.isdigit():
        raise HTTPException(400, "before must be a job id")
    return int(raw)


def _ids(values: Mapping[str, Any], field: str = "ids") -> list[int]:
    raw = str(values.get(field, "")).replace(",", " ").split()
    if not raw or not all(part.isdigit() for part in raw):
        raise HTTPException(400, "tick at least one job")
    if len(raw) > finder.PAGE_SIZE:
        raise HTTPException(400, f"at most {finder.PAGE_SIZE} jobs at a time; use the filter")
    return sorted({int(part) for part in raw})


def _filter(site: Site, params: Any) -> JobFilter:
    """The page's filter; a search naming an encrypted or a redacted key is a 400
    (supervisor/crypto/search.py)."""
    which = finder.filter_from(params)
    problem = search_problem(
        which.args, protected_keys(site.config, which.kind, redact=site.web.redact)
    )
    if problem:
        raise HTTPException(400, problem)
    return which


def routes(site: Site) -> list[Route]:
    async def jobs(request: Request) -> Response:
        which = _filter(site, request.query_params)
        page = await finder.find(site.pool, which, _before(request), site.web.redact)
        for job in page.jobs:  # envelopes as [encrypted: key ID]
            job["args"] = mask(job["args"])
        return site.render(
            request,
            "jobs.html",
            view=page,
            which=which,
            states=STATES,
            bulks=BULKS.values(),
            scan=finder.SCAN,
            suggested=await timeseries.suggestions(site),
        )

    async def dry_run(request: Request) -> Response:
        bulk = _bulk(request.query_params.get("action"))
        which = _filter(site, request.query_params)
        states = _states(bulk, which)
        counted = await finder.dry_run(site.pool, which, states)
        return site.render(
            request,
            "bulk.html",
            bulk=bulk,
            which=which,
            states=states,
            counted=counted,
            scan=finder.SCAN,
            slice=SLICE,
        )

    async def slice_(request: Request) -> Response:
        if site.web.read_only:
            return site.render(
                request,
                "error.html",
                status_code=403,
                message="this dashboard is read-only (web.read_only or --read-only): it shows, "
                "it does not act",
            )
        form = await request.form()
        problem = csrf_problem(request, form, site.exposure.host_allowed)
        if problem:
            return site.render(
                request, "error.html", status_code=403, message=f"refused: {problem}"
            )
        values = {k: v for k, v in form.items() if isinstance(v, str)}
        bulk = _bulk(values.get("action"))
        which = _filter(site, values)
        states = _states(bulk, which)
        progress = Progress.of(values)
        try:
            done = await site.actions.bulk_slice(
                bulk.name,
                {**which.params(), "states": states},
                top=progress.top,
                floor=progress.floor,
                below=progress.below,
                limit=SLICE,
            )
        except ActionError as exc:
            audit.record(request, f"{bulk.name} matching jobs", which.form(), failed=str(exc))
            return site.render(request, "error.html", status_code=500, message=str(exc))
        said = f"slice: {done.acted} {bulk.done}, {done.skipped} left as they were"
        audit.record(
            request, f"{bulk.name} matching jobs", which.form(), done=Done(said, done.changed)
        )
        progress = progress.after(done.acted, done.skipped, done.lowest, len(done.ids) < SLICE)
        return site.render(request, "bulk_progress.html", bulk=bulk, which=which, progress=progress)

    def selected(values: Mapping[str, Any]) -> Plan:
        bulk = _bulk(values.get("action"))
        ids = _ids(values)
        listed = ", ".join(map(str, ids))
        noun = f"job {listed}" if len(ids) == 1 else f"{len(ids)} jobs ({listed})"
        return Plan(
            title=f"{bulk.verb} {noun}",
            question=f"{bulk.verb} {noun}? It applies to {' or '.join(bulk.states)} jobs; "
            "the others are left as they are.",
            button=f"{bulk.verb} {noun}",
            keep="Go back",
            back=f"/jobs?{values.get('back', '')}",
            fields={
                "action": bulk.name,
                "ids": " ".join(map(str, ids)),
                "back": str(values.get("back", "")),
            },
            run=lambda: site.actions.bulk_ids(bulk.name, ids),
            danger=bulk.name == "cancel",
        )

    return [
        Route("/jobs", jobs),
        Route("/jobs/bulk", dry_run, methods=["GET"]),
        Route("/jobs/bulk", slice_, methods=["POST"]),
        Route(
            "/jobs/selected", action(site, "act on ticked jobs", selected), methods=["GET", "POST"]
        ),
    ]


@dataclass(frozen=True)
class Progress:
    """Where a bulk action is: the dry run's range and count, and what the slices did."""

    total: int
    top: int
    floor: int
    below: int | None
    acted: int
    skipped: int
    slices: int
    finished: bool = False

    @classmethod
    def of(cls, values: Mapping[str, str]) -> Progress:
        def number(name: str, default: int | None = None) -> int | None:
            raw = values.get(name, "").strip()
            if not raw:
                return default
            if not raw.isdigit():
                raise HTTPException(400, f"{name} must be a whole number")
            return int(raw)

        top, floor = number("top"), number("floor")
        if top is None or floor is None:
            raise HTTPException(400, "a bulk action starts from its dry run (top and floor)")
        return cls(
            total=number("total", 0) or 0,
            top=top,
            floor=floor,
            below=number("below"),
            acted=number("acted", 0) or 0,
            skipped=number("skipped", 0) or 0,
            slices=number("slices", 0) or 0,
        )

    def after(self, acted: int, skipped: int, lowest: int | None, last: bool) -> Progress:
        return Progress(
            self.total,
            self.top,
            self.floor,
            lowest if lowest is not None else self.below,
            self.acted + acted,
            self.skipped + skipped,
            self.slices + 1,
            finished=last,
        )

    def fields(self) -> dict[str, str]:
        values = {
            "total": self.total,
            "top": self.top,
            "floor": self.floor,
            "acted": self.acted,
            "skipped": self.skipped,
            "slices": self.slices,
        }
        if self.below is not None:
            values["below"] = self.below
        return {k: str(v) for k, v in values.items()}

    @property
    def percent(self) -> int:
        if self.finished or not self.total:
            return 100
        return min(99, round(100 * (self.acted + self.skipped) / self.total))


def back_link(which: JobFilter) -> str:
    return "/jobs?" + urlencode(which.form())
