"""The dashboard's pages: each reads through supervisor.web.reads and renders one template.

Every page wraps its figures in an element that htmx fetches again every few seconds (the same
URL, keeping only that element), so figures stay live without a reload and without JavaScript
of our own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg_pool import PoolTimeout
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from supervisor.queue.control import STATES
from supervisor.queue.dsn import scrub
from supervisor.web import controls, doctor_page, graph, jobpage, reads
from supervisor.web.site import REFRESH_CHOICES, REFRESH_COOKIE, Site, duration, root_path

log = logging.getLogger("pgq.web")


def _page(request: Request) -> int:
    try:
        page = int(request.query_params.get("page", "1"))
    except ValueError:
        raise HTTPException(400, "page must be a whole number") from None
    if not 1 <= page <= reads.SCAN // reads.PAGE_SIZE:
        raise HTTPException(400, f"page must be between 1 and {reads.SCAN // reads.PAGE_SIZE}")
    return page


def _text(request: Request, name: str) -> str | None:
    return request.query_params.get(name, "").strip() or None


def queue_page(site: Site) -> Callable[[Request], Awaitable[Response]]:
    """A queue's page, /queues/NAME (routed with the queue's actions: controls.py)."""

    async def queue(request: Request) -> Response:
        name = request.path_params["queue"]
        state = request.query_params.get("state", "available")
        if state not in STATES:
            raise HTTPException(400, f"state must be one of {', '.join(STATES)}")
        page = await reads.queue_jobs(
            site.pool, name, state, _text(request, "kind"), _page(request)
        )
        refusal = await controls.unserved(site, name)
        return site.render(request, "queue.html", view=page, states=STATES, unserved=refusal)

    return queue


def routes(site: Site) -> list[Route]:
    async def overview(request: Request) -> Response:
        data = await reads.overview(site.pool, site.config, site.database, site.throughput)
        return site.render(request, "overview.html", view=data)

    async def go_to_job(request: Request) -> Response:
        # The header's job-id box: "#4711", " 4711 " and "4711" all go to job 4711.
        typed = request.query_params.get("id", "").strip().lstrip("#").strip()
        if not typed.isdigit() or not 0 < int(typed) < 2**63:
            raise HTTPException(400, f"a job id is a positive whole number, got {typed[:40]!r}")
        return RedirectResponse(f"{root_path(request)}/jobs/{int(typed)}", status_code=303)

    async def job(request: Request) -> Response:
        job_id = request.path_params["job_id"]
        view = await jobpage.read(
            site.pool,
            job_id,
            redacted=site.web.redact,
            aging_period=site.config.aging.period if site.config is not None else None,
        )
        if view.job is not None:
            return site.render(request, "job.html", job=view.job, view=view, now=view.now)
        if view.history:
            # Completed (or purged after it died): the history is all that remains of it.
            return site.render(request, "job_done.html", job_id=job_id, view=view, now=view.now)
        # Completed without history kept: its result, when it returned one, is what remains.
        found = view.result is not None
        return site.render(
            request,
            "missing.html",
            status_code=200 if found else 404,
            job_id=job_id,
            now=view.now,
            view=view,
        )

    async def dead(request: Request) -> Response:
        which = reads.DeadLetterFilter(
            kind=_text(request, "kind"),
            queue=_text(request, "queue"),
            older_than=duration(_text(request, "older_than"), "older than"),
            after=_after(request),
        )
        now, rows, more = await reads.dead_letters(site.pool, which)
        return site.render(
            request,
            "dead.html",
            now=now,
            rows=rows,
            more=more,
            filters={k: request.query_params.get(k, "") for k in ("kind", "queue", "older_than")},
        )

    async def workers(request: Request) -> Response:
        now, supervisors = await reads.supervisors(site.pool)
        return site.render(request, "workers.html", now=now, supervisors=supervisors)

    async def doctor(request: Request) -> Response:
        view = await doctor_page.read(site.pool, site.config)
        return site.render(request, "doctor.html", view=view)

    async def workflows(request: Request) -> Response:
        now, found = await graph.recent(site.pool)
        return site.render(request, "workflows.html", now=now, workflows=found)

    async def workflow(request: Request) -> Response:
        view = await graph.read(site.pool, request.path_params["workflow_id"])
        if view.status is None:
            raise HTTPException(404, f"no workflow {request.path_params['workflow_id']}")
        return site.render(request, "workflow.html", view=view, now=view.now)

    async def refresh(request: Request) -> Response:
        """The header's refresh control: remember the choice, go back to the page."""
        every = request.query_params.get("every", "")
        back = request.query_params.get("back", "/")
        if not back.startswith("/") or back.startswith("//"):
            back = "/"  # only a path of this site: never a redirect elsewhere
        response = RedirectResponse(root_path(request) + back, status_code=303)
        if every.isdigit() and int(every) in REFRESH_CHOICES:
            response.set_cookie(
                REFRESH_COOKIE, every, max_age=365 * 86400, httponly=True, samesite="strict"
            )
        return response

    return [
        Route("/", overview),
        Route("/jobs/go", go_to_job),
        Route("/refresh", refresh),
        Route("/jobs/{job_id:int}", job),
        Route("/dead", dead),
        Route("/workers", workers),
        Route("/doctor", doctor),
        Route("/workflows", workflows),
        Route("/workflows/{workflow_id:int}", workflow),
    ]


def _after(request: Request) -> tuple[datetime, int] | None:
    """The keyset of the dead-letter page to continue after: ``after=<iso time>,<id>``."""
    raw = _text(request, "after")
    if raw is None:
        return None
    moment, _, job_id = raw.rpartition(",")
    try:
        return datetime.fromisoformat(moment), int(job_id)
    except ValueError:
        raise HTTPException(400, "after must be <ISO time>,<job id>") from None


def exception_handlers(site: Site) -> dict[Any, Any]:
    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return site.render(
            request, "error.html", status_code=exc.status_code, message=exc.detail or ""
        )

    async def database_down(request: Request, exc: Exception) -> Response:
        return site.render(
            request,
            "error.html",
            status_code=503,
            message=f"the database {site.database} does not answer; retrying on the next refresh",
        )

    async def database_error(request: Request, exc: Exception) -> Response:
        if isinstance(exc, (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName)):
            message = (
                f"{site.database} has no pgq schema (or an old one): run "
                "`pgq-supervisor -c FILE migrate` first"
            )
        else:
            detail = scrub(str(exc).strip(), site.pool.conninfo).replace("\n", " ")
            message = f"{site.database}: {detail}"
        log.warning("%s %s: %s", request.method, request.url.path, message)
        return site.render(request, "error.html", status_code=503, message=message)

    return {HTTPException: http_error, PoolTimeout: database_down, psycopg.Error: database_error}
