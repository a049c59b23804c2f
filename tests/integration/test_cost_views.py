"""The cost totals: per kind and per tenant over the last hour in `status --json` and its text,
and the dashboard's "top kinds by CPU" (from pgq.attempt_costs, migration 0056)."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from supervisor.config import parse_config
from supervisor.queue import costs
from supervisor.views import status as status_view
from tests.integration.test_web_pages import with_client

CONFIG = 'handlers: {pdf: "m:f"}\nhistory: {enabled: true}\npools: {p: {queues: {q: 1}}}\n'


def spend(conn: psycopg.Connection[Any]) -> None:
    def attempt(job: int, kind: str, tenant: str | None, cpu: float) -> costs.Attempt:
        return costs.Attempt(job, 1, "q", kind, tenant, "completed", costs.Cost(cpu, 50 << 20))

    costs.record(
        conn,
        [
            attempt(1, "pdf", "acme", 10.0),
            attempt(2, "pdf", "acme", 10.0),
            attempt(3, "mail", "zeta", 1.0),
            attempt(4, "mail", None, 0.5),
        ],
    )


def test_status_totals_the_cost_per_kind_and_tenant(conn: psycopg.Connection[Any]) -> None:
    spend(conn)
    config = parse_config(CONFIG, source="t.yaml", env={})
    status = status_view.gather(conn, config, "test")
    doc = status_view.to_json(status)["cost_last_hour"]
    assert [(k["kind"], k["attempts"], k["cpu_seconds"]) for k in doc["kinds"]] == [
        ("pdf", 2, 20.0),
        ("mail", 2, 1.5),
    ]
    assert [(t["tenant"], t["cpu_seconds"]) for t in doc["tenants"]] == [
        ("acme", 20.0),
        ("zeta", 1.0),
        ("", 0.5),
    ]
    text = "\n".join(status_view.render(status))
    assert "TOP KINDS BY CPU (last hour)" in text and "50 MiB" in text


def test_the_dashboard_shows_the_top_kinds_by_cpu(conn: psycopg.Connection[Any], dsn: str) -> None:
    spend(conn)

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.get("/")

    page = with_client(dsn, steps)
    assert "Top kinds by CPU, last hour" in page.text
    assert '<tr data-kind="pdf"><td>pdf</td><td class="num">2</td>' in page.text
    assert page.text.index('data-kind="pdf"') < page.text.index('data-kind="mail"')
