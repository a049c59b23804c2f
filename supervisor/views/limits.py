"""The LIMITS part of `status`: each queue limit in force on the database, and how much of it is
in use now (the same reading feeds /metrics and the dashboard's queue page)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg

from supervisor.config import Config
from supervisor.config.limits import limit_rows
from supervisor.queue import limits as limits_db
from supervisor.queue.limits import LimitUse, TenantBacklog, format_rate
from supervisor.views.text import age, iso, safe, table


@dataclass
class LimitsView:
    uses: list[LimitUse] = field(default_factory=list)
    # Queues whose limits in the database differ from this file's (another supervisor's file
    # wrote them last, or this file changed and no supervisor has reloaded it yet).
    differ: list[str] = field(default_factory=list)
    # The ten tenants with the most jobs due now, across queues.
    tenants: list[TenantBacklog] = field(default_factory=list)

    def warnings(self, config_path: str) -> list[str]:
        found = [
            f"queue {safe(queue)}: the limits in force differ from {config_path}'s "
            "(another supervisor's file wrote them last, or this file awaits a reload)"
            for queue in self.differ
        ]
        for use in self.uses:
            if use.concurrency is not None and use.running >= use.concurrency:
                found.append(
                    f"queue {safe(use.queue)}: at its concurrency limit ({use.running} of "
                    f"{use.concurrency} running); its other jobs wait for a slot"
                )
        return found


def gather(conn: psycopg.Connection[Any], config: Config) -> LimitsView:
    uses = limits_db.limit_use(conn)
    wanted = {row.queue: row for row in limit_rows(config)}
    served = {queue for pool in config.pools.values() for queue in pool.queues}
    in_force = {use.queue: use for use in uses}
    differ = []
    for queue in sorted(served):
        use, want = in_force.get(queue), wanted.get(queue)
        if (use is None) != (want is None) or (
            use is not None and want is not None and _row(use) != want
        ):
            differ.append(queue)
    return LimitsView(uses, differ, limits_db.busiest_tenants(conn))


def _row(use: LimitUse) -> limits_db.Limits:
    return limits_db.Limits(
        use.queue,
        use.concurrency,
        use.rate,
        use.burst,
        use.tenant_concurrency,
        use.tenant_rate,
        use.tenant_burst,
    )


def tenants_json(view: LimitsView) -> list[dict[str, Any]]:
    return [
        {
            "queue": t.queue,
            "tenant": t.tenant,
            "available": t.available,
            "oldest_wait_seconds": t.oldest_wait,
            "running": t.running,
        }
        for t in view.tenants
    ]


def to_json(view: LimitsView) -> list[dict[str, Any]]:
    return [
        {
            "queue": u.queue,
            "concurrency": None
            if u.concurrency is None
            else {"limit": u.concurrency, "running": u.running, "use": u.concurrency_use},
            "rate": None
            if u.rate is None
            else {
                "per_second": u.rate,
                "burst": u.burst,
                "tokens": u.tokens,
                "use": u.rate_use,
            },
            "per_tenant": None
            if u.tenant_concurrency is None and u.tenant_rate is None
            else {
                "concurrency": u.tenant_concurrency,
                "rate": None
                if u.tenant_rate is None
                else {"per_second": u.tenant_rate, "burst": u.tenant_burst},
            },
            "set_by": u.set_by,
            "updated_at": iso(u.updated_at),
            "differs_from_config": u.queue in view.differ,
        }
        for u in view.uses
    ]


def lines(view: LimitsView) -> list[str]:
    return _limit_lines(view) + _tenant_lines(view)


def _tenant_lines(view: LimitsView) -> list[str]:
    if not any(t.tenant is not None for t in view.tenants):
        return []  # no tenants in use: the queue table says it all
    rows = [
        [
            t.queue,
            "(none)" if t.tenant is None else t.tenant,
            t.available,
            age(t.oldest_wait),
            t.running,
        ]
        for t in view.tenants
    ]
    headers = ["QUEUE", "TENANT", "DUE", "OLDEST WAIT", "RUNNING"]
    return ["", "BUSIEST TENANTS (most jobs due now)", *table(headers, rows, right=(2, 3, 4))]


def _limit_lines(view: LimitsView) -> list[str]:
    if not view.uses:
        return []
    rows = []
    for u in view.uses:
        tenant = []
        if u.tenant_concurrency is not None:
            tenant.append(f"concurrency {u.tenant_concurrency}")
        if u.tenant_rate is not None:
            tenant.append(f"rate {format_rate(u.tenant_rate)} burst {u.tenant_burst}")
        rows.append(
            [
                u.queue,
                "-" if u.concurrency is None else f"{u.running}/{u.concurrency}",
                "-" if u.rate is None else f"{format_rate(u.rate)} burst {u.burst}",
                "-" if u.tokens is None else f"{u.tokens:.1f}",
                ", ".join(tenant) or "-",
                u.set_by,
            ]
        )
    headers = ["QUEUE", "RUNNING/CAP", "RATE", "TOKENS", "PER TENANT", "SET BY"]
    return [
        "",
        "LIMITS (every supervisor on the database together)",
        *table(headers, rows, right=(1, 3)),
    ]
