"""What every page and action shares: the site (pool, config, actions, templates), rendering
with the anti-forgery token and the one-time message of the last action, and form values."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from psycopg_pool import AsyncConnectionPool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from supervisor.config import Config
from supervisor.config.model import WebConfig
from supervisor.config.units import UnitError, parse_duration
from supervisor.queue.limits import format_rate
from supervisor.views.aging import aging_words
from supervisor.views.order import order_words
from supervisor.views.status import share
from supervisor.views.text import age, clock_time
from supervisor.web.actions import Actions
from supervisor.web.exposure import Exposure
from supervisor.web.security import CSRF_FIELD
from supervisor.web.throughput import Throughput
from supervisor.web.timeseries import overview_series

FLASH_COOKIE = "pgq_flash"
# How often a page refreshes its figures, by default; the header's control chooses another
# (a cookie: it follows the operator from page to page). 0 stops the refresh.
REFRESH_SECONDS = 2
REFRESH_COOKIE = "pgq_refresh"
REFRESH_CHOICES = (0, 2, 10, 60)


def refresh_of(request: Request) -> int:
    raw = request.cookies.get(REFRESH_COOKIE, "")
    return int(raw) if raw.isdigit() and int(raw) in REFRESH_CHOICES else REFRESH_SECONDS


@dataclass
class Site:
    pool: AsyncConnectionPool[Any]
    config: Config | None
    database: str
    actions: Actions
    templates: Environment
    # The overview's per-minute chart, counted incrementally by this process.
    throughput: Throughput
    # How it is exposed: allowed hosts, trusted proxies, read-only, redacted argument keys.
    web: WebConfig
    exposure: Exposure

    def render(
        self, request: Request, name: str, status_code: int = 200, **values: Any
    ) -> Response:
        flash = unquote(request.cookies.get(FLASH_COOKIE, "")) or None
        html = self.templates.get_template(name).render(
            request=request,
            csrf=request.scope.get("state", {}).get("csrf", ""),
            csrf_field=CSRF_FIELD,
            database=self.database,
            flash=flash,
            # Where the app is mounted ("" at the root, "/pgq" under a Mount): every link starts
            # with it.
            root=root_path(request),
            refresh=refresh_of(request),
            refresh_choices=REFRESH_CHOICES,
            read_only=self.web.read_only,
            attempt_limit=self.attempt_limit,
            **values,
        )
        response = HTMLResponse(html, status_code=status_code)
        if flash and "hx-request" not in request.headers:
            response.delete_cookie(FLASH_COOKIE, path="/")
        return response

    def attempt_limit(self, kind: str, row_limit: int) -> int:
        """The one attempts figure (see Config.attempt_limit); the row's without a config."""
        return self.config.attempt_limit(kind, row_limit) if self.config else row_limit


def root_path(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def templates(folder: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(folder),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = age
    env.filters["clock"] = clock_time
    env.filters["mib"] = lambda n: "-" if n is None else f"{n / 2**20:,.1f} MiB"
    env.filters["pretty_json"] = lambda value: json.dumps(value, indent=2, ensure_ascii=False)
    env.filters["last_line"] = lambda text: ((text or "").strip().splitlines() or [""])[-1]
    env.filters["urlpart"] = lambda value: quote(str(value), safe="")
    env.filters["rate"] = format_rate
    env.globals["share"] = share
    env.globals["spark_json"] = overview_series
    env.globals["zip"] = zip
    # The job page's order key and aging, in the words `jobs show` prints (supervisor/views).
    env.globals["order_words"] = order_words
    env.globals["aging_words"] = aging_words
    env.globals["since"] = lambda now, moment: (
        age((now - moment).total_seconds()) if moment else "-"
    )
    return env


def duration(value: str | None, field: str) -> float | None:
    """A duration typed in a filter (``1d``, ``30m``), or a 400 that names the field."""
    if value is None:
        return None
    try:
        return parse_duration(value, field)
    except UnitError as exc:
        raise HTTPException(400, f"{field}: {exc.message}") from None
