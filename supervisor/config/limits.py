"""The `limits:` section: per queue, how many jobs may run at once and how fast they may start,
for the queue as a whole and for each tenant of it (enforced in the database, fleet-wide).

    limits:
      webhooks:
        concurrency: 20          # jobs of the queue running at once, on every host together
        rate: 50/s               # starts per second (N/s, N/min or N/h), a token bucket
        burst: 5                 # tokens saved up (default: a tenth of a second's worth, >= 2)
        per_tenant: {concurrency: 2, rate: 5/s, burst: 1}

A queue named here must be served by a pool of this file: the limits a supervisor writes are
those of the queues it serves (see docs/limits.md), and a name no pool serves is a typo far more
often than a limit meant for another host's file.
"""

from __future__ import annotations

import difflib
import math
import re

from yaml.nodes import Node

from supervisor.config.fields import Section, integer
from supervisor.config.model import Config, PoolConfig, QueueLimits, Rate, TenantLimits
from supervisor.config.reader import Bad, Reader
from supervisor.queue.limits import Limits

QUEUE_KEYS = ("concurrency", "rate", "burst", "per_tenant")
TENANT_KEYS = ("concurrency", "rate", "burst")
MAX_CONCURRENCY = 100_000
MAX_BURST = 1_000_000
# Bounds that catch typos: a rate a claim could never reach, or one token a month.
MAX_PER_SECOND = 100_000.0
MIN_PER_SECOND = 1 / 86400.0
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|min|minute|h|hour)\s*")
_UNIT_SECONDS = {"s": 1, "sec": 1, "second": 1, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
RATE_RULE = "must be a rate like 50/s, 100/min or 10/h"


def limits(top: Section, pools: dict[str, PoolConfig]) -> dict[str, QueueLimits]:
    section = top.section("limits", "per queue: {concurrency, rate, burst, per_tenant}")
    served = sorted({queue for pool in pools.values() for queue in pool.queues})
    found = {}
    for queue, key_node, node in section:
        path = section.key_path(queue)
        if pools and queue not in served:
            close = difflib.get_close_matches(queue, served, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "pools serve " + ", ".join(served)
            section.reader.report(path, f"no pool serves this queue; {hint}", key_node)
        body = Section.of(
            section.reader, node, path, "concurrency, rate, per_tenant", required=True
        )
        if not body:
            continue
        limit = _queue_limits(queue, body)
        if limit is not None:
            found[queue] = limit
    return found


def _queue_limits(queue: str, s: Section) -> QueueLimits | None:
    s.only(*QUEUE_KEYS)
    concurrency, rate = _common(s)
    per_tenant = None
    if "per_tenant" in s:
        t = s.section("per_tenant", "concurrency, rate, burst", required=True)
        t.only(*TENANT_KEYS)
        t_concurrency, t_rate = _common(t)
        if t_concurrency is not None or t_rate is not None:
            per_tenant = TenantLimits(t_concurrency, t_rate)
        if concurrency is not None and t_concurrency is not None and t_concurrency > concurrency:
            t.report(
                "concurrency",
                f"({t_concurrency}) is above the queue's concurrency ({concurrency}): "
                "no tenant could ever reach it",
            )
    if concurrency is None and rate is None and per_tenant is None:
        return None  # every key of the (non-empty) body was wrong, and has been reported
    return QueueLimits(queue, concurrency, rate, per_tenant)


def _common(s: Section) -> tuple[int | None, Rate | None]:
    concurrency = s.get("concurrency", integer(1, MAX_CONCURRENCY), None)
    rate = s.get("rate", _rate, None)
    burst = s.get("burst", integer(1, MAX_BURST), None)
    if "burst" in s and "rate" not in s:
        s.report("burst", "applies to a rate: set rate too, or remove burst")
    if rate is None:
        return concurrency, None
    per_second, written = rate
    return concurrency, Rate(per_second, burst or default_burst(per_second), written)


def default_burst(per_second: float) -> int:
    """A tenth of a second's worth, at least two: a small burst, as the rate is meant to hold
    second by second (at most rate + burst jobs start in any one second). Two, not one: a
    bucket of one token loses every moment a claim arrives after its token (a child's wake-up,
    the claim's round trip), and 5/s measured 4.5/s with one child
    (scripts/benchmarks/limit_rates.py)."""
    return max(2, math.ceil(per_second / 10))


def _rate(reader: Reader, node: Node) -> tuple[float, str]:
    """Tokens per second, and the rate as written."""
    value = reader.text(node, "a rate")
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise Bad(f"{RATE_RULE} (a number needs its unit)", value)
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise Bad(RATE_RULE, value)
    count, unit = float(match.group(1)), match.group(2)
    per_second = count / _UNIT_SECONDS[unit]
    if count <= 0:
        raise Bad("must be more than zero", value)
    if per_second > MAX_PER_SECOND:
        raise Bad(f"must be at most {MAX_PER_SECOND:.0f}/s", value)
    if per_second < MIN_PER_SECOND:
        raise Bad("must be at least 0.042/h (one a day)", value)
    return per_second, value.strip()


def limit_rows(config: Config) -> list[Limits]:
    """The rows of pgq.queue_limits this file asks for (what its masters write)."""
    rows = []
    for q in config.limits.values():
        tenant = q.per_tenant
        rows.append(
            Limits(
                queue=q.queue,
                concurrency=q.concurrency,
                rate=q.rate.per_second if q.rate else None,
                burst=q.rate.burst if q.rate else None,
                tenant_concurrency=tenant.concurrency if tenant else None,
                tenant_rate=tenant.rate.per_second if tenant and tenant.rate else None,
                tenant_burst=tenant.rate.burst if tenant and tenant.rate else None,
            )
        )
    return rows
