"""Queue limits in the database: what the masters write from `limits:`, and how much is in use.

The claim statement enforces them (sql/claim.sql ``claim`` and the pgq.limit_* functions of
migration 0013); this module writes pgq.queue_limits and reads the use for `status`, the
dashboard and /metrics. Every function runs in the caller's transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

import psycopg

from supervisor.queue.queries import parse, sql_text


@cache
def _queries() -> dict[str, str]:
    return parse(sql_text("limits.sql"))


class Limits(NamedTuple):
    """One queue's row of pgq.queue_limits (rates in tokens per second; None: no such limit)."""

    queue: str
    concurrency: int | None = None
    rate: float | None = None
    burst: int | None = None
    tenant_concurrency: int | None = None
    tenant_rate: float | None = None
    tenant_burst: int | None = None


def write_limits(
    conn: psycopg.Connection[Any], limits: Sequence[Limits], served: Iterable[str], set_by: str
) -> list[tuple[str, str]]:
    """Make the database hold ``limits`` for the queues this supervisor serves (a served queue
    left out is unlimited). Returns (queue, 'set' | 'lifted') for each queue that changed."""
    params: dict[str, Any] = {
        field: [getattr(row, field) for row in limits] for field in Limits._fields
    }
    params["queues"] = params.pop("queue")
    params["served"] = sorted(set(served))
    params["set_by"] = set_by
    return [(queue, change) for queue, change in conn.execute(_queries()["write_limits"], params)]


@dataclass(frozen=True)
class LimitUse:
    """One queue's limits and how much of them is taken now."""

    queue: str
    concurrency: int | None
    running: int  # the queue's running jobs: the slots its concurrency counts
    rate: float | None  # tokens per second
    burst: int | None
    tokens: float | None  # in the queue's bucket now
    tenant_concurrency: int | None
    tenant_rate: float | None
    tenant_burst: int | None
    set_by: str
    updated_at: datetime | None

    @property
    def concurrency_use(self) -> float | None:
        """Running jobs over the cap (1.0: full; claims of the queue wait)."""
        return None if self.concurrency is None else self.running / self.concurrency

    @property
    def rate_use(self) -> float | None:
        """The share of the burst spent (1.0: empty bucket; claims wait for the next token)."""
        if self.burst is None or self.tokens is None:
            return None
        return max(0.0, 1.0 - self.tokens / self.burst)


def limit_use(conn: psycopg.Connection[Any]) -> list[LimitUse]:
    return [LimitUse(*row) for row in conn.execute(_queries()["limit_use"])]


def use_statement() -> str:
    """The limit_use query, for a caller that sends it without parameters and reads text."""
    return _queries()["limit_use"]


def limit_use_from_rows(rows: Sequence[Sequence[str | None]]) -> list[LimitUse]:
    """The rows of limit_use as the server's text (read without waiting for them)."""

    def number(value: str | None, kind: type[int] | type[float]) -> Any:
        return None if value is None else kind(value)

    return [
        LimitUse(
            queue,
            number(concurrency, int),
            int(running or 0),
            number(rate, float),
            number(burst, int),
            number(tokens, float),
            number(t_concurrency, int),
            number(t_rate, float),
            number(t_burst, int),
            set_by or "",
            None,  # not needed by the metrics, and text a Python 3.10 cannot always parse
        )
        for (
            queue,
            concurrency,
            running,
            rate,
            burst,
            tokens,
            t_concurrency,
            t_rate,
            t_burst,
            set_by,
            _updated_at,
        ) in rows
        if queue is not None
    ]


def format_rate(per_second: float) -> str:
    """A rate in the unit it reads best in: 50/s, 30/min, 10/h."""
    for unit, seconds in (("s", 1), ("min", 60), ("h", 3600)):
        value = per_second * seconds
        if value >= 1 or unit == "h":
            return f"{value:g}/{unit}" if value == round(value, 3) else f"{value:.3g}/{unit}"
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class TenantBacklog:
    """One of the busiest tenants: its jobs due now, how long the oldest has waited, and its
    running jobs (the slots a per-tenant concurrency counts)."""

    queue: str
    tenant: str | None  # None: the jobs enqueued without a tenant
    available: int
    oldest_wait: float
    running: int


def busiest_tenants(conn: psycopg.Connection[Any]) -> list[TenantBacklog]:
    return tenants_from_rows(conn.execute(_queries()["busiest_tenants"]).fetchall())


def busiest_tenants_statement() -> str:
    return _queries()["busiest_tenants"]


def tenants_from_rows(rows: Sequence[Sequence[Any]]) -> list[TenantBacklog]:
    """The rows of busiest_tenants, typed or as the server's text."""
    return [
        TenantBacklog(str(queue), tenant, int(available), float(wait), int(running))
        for queue, tenant, available, wait, running in rows
    ]
