"""The claim: its plan and buffers for each queue with work, and its latency as children see it.

The statement explained is the children's own: the claim variant a child sends for that batch
(``supervisor.queue.claim_builder.variant``: with limits when the database holds one) with the
parameters ``supervisor.queue.jobs.claim_params`` builds, so whatever the claim becomes, the
doctor explains that. EXPLAIN ANALYZE runs it for real inside a transaction that is rolled
back (see sql/doctor.sql, explain_options): the rows it locks are free again at once.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from typing import Any

from psycopg import sql

from supervisor.config import Config
from supervisor.doctor.check import Check, ok
from supervisor.doctor.runner import Family, Probe
from supervisor.doctor.sql import doctor_query
from supervisor.queue import claim_builder
from supervisor.queue.jobs import claim_params
from supervisor.queue.queries import query

MAX_QUEUES = 20
# A sequential scan of a table this small (in pages) is the planner's right choice.
SMALL_TABLE_PAGES = 16
CLAIM_INDEX_PREFIX = "jobs_claim"
SLOW_CLAIM = 0.05  # mean seconds per claim, from the children's histogram
SCRAPE_TIMEOUT = 2.0
_SAMPLE = re.compile(r"^pgq_claim_latency_seconds_(bucket|sum|count)\{([^}]*)\}\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def family() -> Family:
    return Family("claim", run)


def run(probe: Probe) -> list[Check]:
    checks = [_invalid_indexes(probe)]
    pages = int(probe.rows("table_pages")[0][0] or 0)
    queues = [row[0] for row in probe.conn.execute(query("due_queues")).fetchall()]
    if not queues:
        checks.append(ok("claim.plan", "no queue has jobs due now: nothing to explain"))
    for queue in queues[:MAX_QUEUES]:
        checks.append(explain(probe, queue, pages))
    if len(queues) > MAX_QUEUES:
        checks.append(
            ok("claim.plan", f"{len(queues) - MAX_QUEUES} more queues with work not explained")
        )
    checks.append(latency(probe.config))
    return checks


def batch_for(config: Config, queue: str) -> int:
    """The batch the first pool serving ``queue`` claims (1 when none does)."""
    return next((p.batch for p in config.pools.values() if queue in p.queues), 1)


def explain(probe: Probe, queue: str, pages: int) -> Check:
    name = f"claim.plan[{queue}]"
    limit = batch_for(probe.config, queue)
    aging = probe.config.aging.of([queue])
    params = claim_params(queue, worker="pgq-doctor:explain", limit=limit, aging=aging)
    limits = bool(probe.conn.execute(doctor_query("any_limit")).fetchone()[0])  # type: ignore[index]
    variant = claim_builder.variant(limits=limits, batch=limit, aging=bool(aging))
    statement = sql.SQL(" ").join(
        [sql.SQL(doctor_query("explain_options")), sql.SQL(query(variant))]
    )
    with probe.conn.transaction(force_rollback=True):
        row = probe.conn.execute(statement, params).fetchone()
    assert row is not None
    plan = row[0][0]
    return judge(name, plan, pages, limit, probe.thresholds.claim_buffers)


def nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from nodes(child)


def judge(name: str, plan: dict[str, Any], pages: int, limit: int, per_job: int) -> Check:
    top = plan["Plan"]
    every = list(nodes(top))
    on_jobs = [n for n in every if n.get("Relation Name") == "jobs"]
    indexes = sorted({n["Index Name"] for n in every if n.get("Index Name")})
    claim_index = any(i.startswith(CLAIM_INDEX_PREFIX) for i in indexes)
    seq = any(n["Node Type"] == "Seq Scan" for n in on_jobs)
    claimed = sum(
        int(n.get("Actual Rows") or 0)
        for n in every
        if n["Node Type"] == "ModifyTable" and n.get("Operation") == "Update"
    )
    buffers = int(top.get("Shared Hit Blocks") or 0) + int(top.get("Shared Read Blocks") or 0)
    took = float(plan.get("Execution Time") or 0) + float(plan.get("Planning Time") or 0)
    seen = (
        f"claimed {claimed} of {limit} in {took:.2f} ms, {buffers} buffers "
        f"({int(top.get('Shared Read Blocks') or 0)} read from disk); "
        f"indexes used: {', '.join(indexes) or 'none'}"
    )
    if (seq or not claim_index) and pages >= SMALL_TABLE_PAGES:
        how = "reads pgq.jobs sequentially" if seq else "does not use the claim index"
        return Check(
            name,
            "fail",
            f"the claim {how} ({pages:,} pages) and sorts what it finds: {seen}",
            "the claim index jobs_claim is missing, invalid or not chosen: check "
            "claim.indexes; ANALYZE pgq.jobs; look for enable_indexscan/enable_bitmapscan or "
            "random_page_cost set on the supervisor's role or database (ALTER ROLE ... RESET)",
        )
    if claimed and buffers > per_job * claimed:
        return Check(
            name,
            "warn",
            f"the claim touched {buffers / claimed:,.0f} buffers per job claimed (more than "
            f"doctor.claim_buffers, {per_job}): {seen}; it steps over dead entries at the head "
            "of the claim index",
            "vacuum pgq.jobs (see vacuum.dead_rows), and first whatever holds the horizon "
            "(horizon.*)",
        )
    return ok(name, seen + ("" if claim_index else f"; the table is small ({pages} pages)"))


def _invalid_indexes(probe: Probe) -> Check:
    name = "claim.indexes"
    invalid = [row[0] for row in probe.rows("invalid_indexes")]
    if not invalid:
        return ok(name, "every index on pgq.jobs is valid")
    return Check(
        name,
        "fail",
        f"invalid indexes on pgq.jobs (PostgreSQL maintains but never reads them): "
        f"{', '.join(invalid)}",
        "; ".join(f"REINDEX INDEX CONCURRENTLY pgq.{i}" for i in invalid),
    )


def latency(config: Config) -> Check:
    """The children's claim round trip, from this host's supervisor's /metrics."""
    name = "claim.latency"
    port = config.metrics.port
    if port is None:
        return ok(
            name,
            "not measured: metrics.port is not set, so the children's histogram cannot be read",
        )
    host = config.metrics.host
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    url = f"http://{host}:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT) as response:
            text = response.read().decode("utf-8", "replace")
    except OSError as exc:
        return ok(name, f"not measured: no supervisor answers on {url} ({exc})")
    pools = parse_histogram(text)
    if not pools or not any(p["count"] for p in pools.values()):
        return ok(name, f"not measured: no claims counted yet on {url}")
    parts, slow = [], []
    for pool, h in sorted(pools.items()):
        if not h["count"]:
            continue
        mean = h["sum"] / h["count"]
        parts.append(
            f"pool {pool}: {h['count']:,.0f} claims, mean {mean * 1000:.2f} ms, "
            f"p99 under {quantile(h['buckets'], h['count'], 0.99)}"
        )
        if mean > SLOW_CLAIM:
            slow.append(pool)
    detail = "; ".join(parts) + " (since each child started)"
    if not slow:
        return ok(name, detail)
    return Check(
        name,
        "warn",
        f"claims are slow ({', '.join(slow)} above {SLOW_CLAIM * 1000:.0f} ms): {detail}",
        "see claim.plan and the horizon: dead index entries and a held horizon make claims slow",
    )


def parse_histogram(text: str) -> dict[str, dict[str, Any]]:
    pools: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match:
            continue
        kind, labels, value = match.groups()
        named = dict(_LABEL.findall(labels))
        pool = pools.setdefault(named.get("pool", ""), {"buckets": [], "sum": 0.0, "count": 0.0})
        if kind == "bucket":
            pool["buckets"].append((named.get("le", "+Inf"), float(value)))
        else:
            pool[kind] = float(value)
    return pools


def quantile(buckets: list[tuple[str, float]], count: float, q: float) -> str:
    for le, cumulative in buckets:
        if cumulative >= q * count:
            return "+Inf" if le == "+Inf" else f"{float(le) * 1000:g} ms"
    return "+Inf"
