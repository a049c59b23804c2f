"""The dashboard as an ASGI application: ``create_app(dsn=...)`` or ``create_app(pool=...)``.

Starlette routes, Jinja2 templates, psycopg-pool's AsyncConnectionPool for the pages' reads and
htmx (vendored in static/) to refresh each page's figures in place. Stable URLs: ``/`` the
overview, ``/queues/NAME`` a queue's jobs, ``/jobs`` jobs across queues and states (filters,
actions on a selection or on everything a filter matches), ``/jobs/ID`` a job (dead letters
included), ``/history`` the last 24 hours, ``/dead`` the dead letters, ``/workers`` every
supervisor and child.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from supervisor.config import Config
from supervisor.config.model import WebConfig
from supervisor.queue.dsn import describe
from supervisor.web import bulk, controls, pages, schedules_page, timeseries
from supervisor.web.actions import Actions
from supervisor.web.exposure import Exposure, ExposureMiddleware
from supervisor.web.reads import dashboard_query
from supervisor.web.security import AuthMiddleware, Credentials, CsrfCookieMiddleware
from supervisor.web.site import Site, templates
from supervisor.web.throughput import Throughput

HERE = Path(__file__).resolve().parent
PAGE_WAIT = 5.0


def create_app(
    dsn: str | None = None,
    *,
    pool: AsyncConnectionPool[Any] | None = None,
    config: Config | None = None,
    credentials: Credentials | None = None,
    pooled: bool | None = None,
    web: WebConfig | None = None,
) -> Starlette:
    """The dashboard for the database at ``dsn`` (the app opens and closes its own pool), or on
    the caller's ``pool`` (opened and closed by the caller). ``config`` (the supervisor's YAML)
    adds the pools, their weights and shares, and the queues no pool serves. ``credentials``
    default to the environment (PGQ_WEB_USER / PGQ_WEB_PASSWORD, PGQ_WEB_TOKEN). ``pooled``:
    the database is reached through a transaction-mode pooler (PgBouncer), where each
    transaction may run on another server session, so nothing is prepared server-side; it
    defaults to the YAML's ``database.pooler: transaction``. A caller's own ``pool`` must then
    be opened with ``prepare_threshold=None`` in its kwargs (the actions follow ``pooled``).
    ``web`` (allowed hosts, trusted proxies, read-only, redaction) defaults to the YAML's
    ``web:`` section (docs/dashboard-security.md)."""
    if (dsn is None) == (pool is None):
        raise ValueError("create_app needs a dsn or a pool (exactly one)")
    own_pool = pool is None
    if pooled is None:
        pooled = bool(config and config.database.pooled)
    if pool is None:
        assert dsn is not None
        pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=4,
            open=False,
            # A page waits this long for a connection, then says the database does not answer
            # (the pool keeps reconnecting in the background).
            timeout=PAGE_WAIT,
            kwargs={"autocommit": True, "application_name": "pgq-supervisor web"}
            # A statement psycopg prepared on one server session would be missing on the next.
            | ({"prepare_threshold": None} if pooled else {}),
            name="pgq-web",
        )
    conninfo = pool.conninfo
    if web is None:
        web = config.web if config is not None else WebConfig()
    credentials = credentials or Credentials.from_env()
    exposure = Exposure.of(credentials.required, web.allowed_hosts, web.trusted_proxies)
    site = Site(
        pool=pool,
        config=config,
        database=describe(conninfo),
        actions=Actions(conninfo, history=bool(config and config.history.enabled), pooled=pooled),
        templates=templates(HERE / "templates"),
        throughput=Throughput(dashboard_query("web_throughput_since")),
        web=web,
        exposure=exposure,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if own_pool:
            await site.pool.open(wait=False)
        try:
            yield
        finally:
            if own_pool:
                await site.pool.close()

    app = Starlette(
        routes=[
            # A queue's page and its actions are told apart by the path's structure
            # (controls.queue_paths), so a queue named "x/pause" shadows nothing.
            *controls.routes(site, pages.queue_page(site)),
            *bulk.routes(site),
            *timeseries.routes(site),
            *schedules_page.routes(site),
            *pages.routes(site),
            Mount("/static", StaticFiles(directory=HERE / "static")),
        ],
        middleware=[
            # First: a request by a Host the dashboard does not answer (DNS rebinding) gets
            # nothing, not even the authentication challenge.
            Middleware(ExposureMiddleware, exposure=exposure),
            Middleware(AuthMiddleware, credentials=credentials),
            Middleware(CsrfCookieMiddleware),
        ],
        lifespan=lifespan,
        exception_handlers=pages.exception_handlers(site),
    )
    app.state.site = site
    return app
