"""What each section of the file may hold, with bounds, and how it becomes a Config.

Bounds are there to catch typos (``processes: 2000``, ``timeout: 120d``), not to second-guess
tuning: each is far beyond any sensible setting but well short of what would hurt the host or
the database.
"""

from __future__ import annotations

import keyword
import re
from datetime import time

from yaml.nodes import Node

from supervisor.config.aging import aging
from supervisor.config.elastic import budget, host_section, processes
from supervisor.config.encryption import encryption
from supervisor.config.fields import (
    MAX_NAME,
    Section,
    boolean,
    check_kind,
    choice,
    clock,
    described,
    duration,
    fraction,
    integer,
    named_bodies,
    optional,
    size,
    text,
)
from supervisor.config.limits import limits
from supervisor.config.model import (
    DAY,
    Config,
    DatabaseConfig,
    DoctorConfig,
    HistoryConfig,
    JobPolicy,
    LeaseConfig,
    LogConfig,
    MetricsConfig,
    PoolConfig,
    PurgeConfig,
    ReconcileConfig,
    RescueConfig,
    ResultsConfig,
    VacuumConfig,
)
from supervisor.config.reader import Bad, Reader
from supervisor.config.schedules import schedules
from supervisor.config.units import format_duration, format_size
from supervisor.config.web import names, web
from supervisor.queue.dsn import parse_problem

MiB = 2**20
TiB = 2**40
MEMORY = (16 * MiB, TiB)
MAX_DURATION = 30 * DAY
MAX_TIMEOUT = DAY
# Retention is measured in weeks or months, so it gets a longer bound than other durations.
MAX_RETENTION = 365 * DAY
MAX_BATCH = 100_000

TOP_KEYS = (
    "database",
    "handlers",
    "pools",
    "jobs",
    "shutdown_timeout",
    "lease",
    "rescue",
    "purge",
    "vacuum",
    "doctor",
    "history",
    "metrics",
    "log",
    "web",
    "schedules",
    "tenants",
    "limits",
    "host",
    "results",
    "reconcile",
    "aging",
    "encryption",
)
POOL_KEYS = (
    "queues",
    "processes",
    "threads",
    "batch",
    "memory_limit",
    "memory_hard_limit",
    "max_jobs",
    "poll_interval",
)
_POOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def build_config(reader: Reader, top: Section, source: str) -> Config:
    top.only(*TOP_KEYS)
    handlers, kinds = _handlers(top)
    pools = _pools(top)
    tenants, fair_by_cost = _tenants(top)
    return Config(
        path=source,
        database=_database(top.section("database", "dsn, embedded, embedded_dir, auto_migrate...")),
        handlers=handlers,
        pools=pools,
        jobs=_jobs(top, kinds),
        shutdown_timeout=top.get("shutdown_timeout", duration(MAX_TIMEOUT), 30.0),
        lease=_lease(top.section("lease", "duration, renew_every")),
        rescue=_rescue(top.section("rescue", "interval, batch")),
        purge=_purge(top.section("purge", "at, discarded_after, batch")),
        vacuum=_vacuum(top.section("vacuum", "enabled, interval, dead_rows, paced_above")),
        doctor=_doctor(top.section("doctor", "horizon_age, dead_rows, notify_queue...")),
        history=_history(top.section("history", "enabled, keep")),
        metrics=_metrics(top.section("metrics", "port, host")),
        log=_log(top.section("log", "format, level")),
        web=web(top.section("web", "allowed_hosts, trusted_proxies, read_only, redact")),
        encryption=encryption(top, source, reader.env),
        schedules=schedules(top, kinds),
        results=_results(top.section("results", "max_size")),
        reconcile=_reconcile(top.section("reconcile", "interval, timeout, batch")),
        tenants=tenants,
        fair_by_cost=fair_by_cost,
        limits=limits(top, pools),
        aging=aging(top, pools),
        host=_host(reader, top),
        budget=budget(top),
        lines=dict(reader.lines),
    )


def _name_problem(name: str, what: str) -> str | None:
    if not name.strip():
        return f"{what} must not be empty"
    if len(name) > MAX_NAME:
        return f"{what} must be at most {MAX_NAME} characters, got {len(name)}"
    if "\0" in name:
        return f"{what} must not contain a NUL character"
    return None


def _named_entries(section: Section, what: str) -> list[tuple[str, Node, Node]]:
    """The section's entries whose key is an acceptable name; the others are reported."""
    accepted = []
    for name, key_node, node in section:
        problem = _name_problem(name, what)
        if problem:
            section.reader.report(section.key_path(name), problem, key_node)
        else:
            accepted.append((name, key_node, node))
    return accepted


@described({"type": "string", "pattern": "^[A-Za-z_][\\w.]*:[A-Za-z_][\\w.]*$"})
def _handler_target(reader: Reader, node: Node) -> str:
    value = text(max_chars=1000)(reader, node)
    module, colon, function = value.partition(":")
    dotted = [*module.split("."), *function.split(".")]
    if not colon or not all(p.isidentifier() and not keyword.iskeyword(p) for p in dotted):
        raise Bad("must look like 'package.module:function'", value)
    return value


def _handlers(top: Section) -> tuple[dict[str, str], list[str]]:
    """The valid handlers, and every kind named under handlers (valid or not)."""
    section = top.section("handlers", "map each job kind to 'module:function'", required=True)
    handlers = {}
    for kind, _, node in _named_entries(section, "job kind"):
        target = section.read(section.key_path(kind), node, _handler_target, None)
        if target is not None:
            handlers[kind] = target
    return handlers, [kind for kind, _, _ in section]


def _database(s: Section) -> DatabaseConfig:
    s.only(
        "dsn", "embedded", "embedded_dir", "auto_migrate", "connect_timeout", "pooler", "listen_dsn"
    )
    dsn = s.get("dsn", _dsn, None)
    embedded = s.get("embedded", boolean, False)
    if dsn is not None and embedded:
        s.report("embedded", "cannot be true with database.dsn set: choose one")
    pooler = s.get("pooler", choice("none", "session", "transaction"), "none")
    return DatabaseConfig(
        dsn=dsn,
        embedded=embedded,
        embedded_dir=s.get("embedded_dir", text(max_chars=4096), ".pgq"),
        auto_migrate=s.get("auto_migrate", boolean, True),
        connect_timeout=s.get("connect_timeout", duration(MAX_TIMEOUT), 5.0),
        pooler=None if pooler == "none" else pooler,
        listen_dsn=s.get("listen_dsn", _dsn, None),
    )


_HOST_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@described({"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"})
def _host_name(reader: Reader, node: Node) -> str:
    value = text(max_chars=64)(reader, node)
    if not _HOST_NAME.fullmatch(value):
        raise Bad(HOST_RULE, value)
    return value


HOST_RULE = "must be 1-64 letters, digits, '.', '_' or '-'"


@described(
    {
        "oneOf": [
            {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$"},
                    "cpu": {"type": ["number", "string"]},
                    "memory": {"type": ["integer", "string"]},
                },
            },
        ],
        "description": "a name, or {name, cpu, memory}: the name and the budgets of the "
        "elastic pools (docs/elastic-pools.md)",
    }
)
def _host_entry(reader: Reader, node: Node) -> str:
    return _host_name(reader, node)


def _host(reader: Reader, top: Section) -> str | None:
    """The host identity: PGQ_HOST, else the YAML's `host`, else None (the machine's name).
    The environment wins so one file can serve several supervisors on one machine."""
    section = host_section(top)
    if section is not None:
        configured = section.get("name", _host_name, None)
    else:
        configured = top.get("host", _host_entry, None)
    override = reader.env.get("PGQ_HOST")
    if override is None:
        return configured
    if not _HOST_NAME.fullmatch(override):
        reader.report("host", f"PGQ_HOST {HOST_RULE}, got {override[:80]!r}")
        return None
    return override


@described({"type": "string", "minLength": 1, "description": "a connection string"})
def _dsn(reader: Reader, node: Node) -> str:
    value = reader.text(node, "a connection string")
    # An empty dsn (often an unset variable) must not quietly fall back to a throwaway
    # embedded database in production.
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Bad("is empty (an unset variable?); give a connection string or remove the key")
    if not isinstance(value, str):
        raise Bad("must be a connection string like postgresql://user@host/dbname")
    problem = parse_problem(value)
    if problem:
        # Here, not at the first connect: every verb (and `check`) stops on it with the key.
        raise Bad(problem)
    return value


def _pools(top: Section) -> dict[str, PoolConfig]:
    entries = named_bodies(
        top,
        "pools",
        "each pool lists its queues and processes",
        _POOL_NAME,
        "pool name must be 1-64 letters, digits, '_' or '-'",
        "with at least 'queues'",
        required=True,
    )
    return {name: _pool(name, body) for name, _, body in entries}


def _pool(name: str, s: Section) -> PoolConfig:
    s.only(*POOL_KEYS)
    count, scaling = processes(s)
    memory_limit = s.get("memory_limit", optional(size(*MEMORY)), None)
    hard_limit = s.get("memory_hard_limit", optional(size(*MEMORY)), None)
    if memory_limit is not None and hard_limit is not None and hard_limit < memory_limit:
        s.report(
            "memory_hard_limit",
            f"must be at least memory_limit ({format_size(memory_limit)}), "
            f"got {format_size(hard_limit)}",
        )
    return PoolConfig(
        name=name,
        queues=_queues(s.section("queues", "queue: weight, like {pdf: 3}", required=True)),
        processes=count,
        threads=s.get("threads", integer(1, 256), 1),
        batch=s.get("batch", integer(1, 1000), 1),
        memory_limit=memory_limit,
        memory_hard_limit=hard_limit,
        max_jobs=s.get("max_jobs", optional(integer(1, 10**9)), None),
        poll_interval=s.get("poll_interval", duration(MAX_DURATION), 1.0),
        scaling=scaling,
    )


def _queues(s: Section) -> dict[str, int]:
    queues = {}
    for queue, _, node in _named_entries(s, "queue name"):
        weight = s.read(s.key_path(queue), node, integer(1, 1000, noun="weight"), None)
        if weight is not None:
            queues[queue] = weight
    return queues


def _tenants(top: Section) -> tuple[dict[str, dict[str, int]], frozenset[str]]:
    """Per queue, the tenants whose share of its claims is not 1 (the default weight), and the
    queues whose tenants share them by cost (`fairness: cost`, docs/job-cost.md)."""
    section = top.section("tenants", "per queue: {weights: {tenant: weight}, fairness}")
    tenants = {}
    by_cost = set()
    for queue, _, node in _named_entries(section, "queue name"):
        body = Section.of(section.reader, node, section.key_path(queue), "weights, fairness")
        body.only("weights", "fairness")
        if body.get("fairness", choice("count", "cost"), "count") == "cost":
            by_cost.add(queue)
        listed = body.section("weights", "tenant: weight, like {acme: 3}")
        weights = {}
        for tenant, _, weight_node in _named_entries(listed, "tenant"):
            weight = listed.read(
                listed.key_path(tenant), weight_node, integer(1, 1000, noun="weight"), None
            )
            if weight is not None:
                weights[tenant] = weight
        tenants[queue] = weights
    return tenants, frozenset(by_cost)


def _jobs(top: Section, kinds: list[str]) -> dict[str, JobPolicy]:
    section = top.section(
        "jobs", "per-kind policy: {kind: {timeout, max_attempts, backoff, effects, reconcile}}"
    )
    jobs = {}
    for kind, key_node, node in _named_entries(section, "job kind"):
        path = section.key_path(kind)
        check_kind(section.reader, path, kind, kinds, key_node)
        jobs[kind] = _policy(kind, Section.of(section.reader, node, path, "timeout, max_attempts"))
    return jobs


def _policy(kind: str, s: Section) -> JobPolicy:
    s.only("timeout", "max_attempts", "backoff", "effects", "reconcile", "encrypt")
    effects = s.get("effects", choice("internal", "external"), "internal")
    reconcile = s.get("reconcile", optional(_handler_target), None)
    if reconcile is not None and effects != "external":
        s.report(
            "reconcile", "a reconcile hook needs effects: external (only such jobs end unknown)"
        )
    backoff = s.section("backoff", "base, cap")
    backoff.only("base", "cap")
    base = backoff.get("base", duration(MAX_DURATION), 2.0)
    cap = backoff.get("cap", duration(MAX_DURATION), 3600.0)
    if cap < base:
        which = "cap" if "cap" in backoff else "base"
        backoff.report(
            which,
            f"backoff.cap ({format_duration(cap)}) must be at least backoff.base "
            f"({format_duration(base)})",
        )
    return JobPolicy(
        kind=kind,
        timeout=s.get("timeout", optional(duration(MAX_TIMEOUT)), None),
        max_attempts=s.get("max_attempts", optional(integer(1, 1000)), None),
        backoff_base=base,
        backoff_cap=cap,
        effects=effects,
        reconcile=reconcile,
        encrypt=s.get("encrypt", names(_field_name), ()),
    )


def _field_name(value: str) -> str:
    if not value.strip():
        raise Bad("must be an argument name (a top-level key of the job's args)")
    return value


def _results(s: Section) -> ResultsConfig:
    s.only("max_size")
    return ResultsConfig(max_size=s.get("max_size", size(1, 64 * MiB), 64 * 1024))


def _reconcile(s: Section) -> ReconcileConfig:
    s.only("interval", "timeout", "batch")
    return ReconcileConfig(
        interval=s.get("interval", duration(MAX_DURATION), 10.0),
        timeout=s.get("timeout", duration(MAX_TIMEOUT), 30.0),
        batch=s.get("batch", integer(1, 1000), 20),
    )


def _lease(s: Section) -> LeaseConfig:
    s.only("duration", "renew_every")
    length = s.get("duration", duration(MAX_DURATION), 60.0)
    renew_every = s.get("renew_every", duration(MAX_DURATION), None)
    if renew_every is None:
        # A shorter lease with the default renewal would break the rule below; follow it.
        return LeaseConfig(length, min(LeaseConfig.renew_every, length / 3))
    if renew_every > length / 3:
        s.report(
            "renew_every",
            f"must be at most a third of lease.duration ({format_duration(length / 3)}) so "
            f"two renewals can fail before the lease expires, got {format_duration(renew_every)}",
        )
    return LeaseConfig(length, renew_every)


def _rescue(s: Section) -> RescueConfig:
    s.only("interval", "batch")
    return RescueConfig(
        interval=s.get("interval", duration(MAX_DURATION), 60.0),
        batch=s.get("batch", integer(1, MAX_BATCH), 1000),
    )


def _purge(s: Section) -> PurgeConfig:
    s.only("at", "discarded_after", "batch")
    return PurgeConfig(
        at=s.get("at", clock, time(3, 0)),
        discarded_after=s.get("discarded_after", duration(MAX_RETENTION), 14 * DAY),
        batch=s.get("batch", integer(1, MAX_BATCH), 5000),
    )


def _vacuum(s: Section) -> VacuumConfig:
    s.only("enabled", "interval", "dead_rows", "paced_above")
    d = VacuumConfig()
    return VacuumConfig(
        enabled=s.get("enabled", boolean, d.enabled),
        interval=s.get("interval", duration(MAX_DURATION), d.interval),
        dead_rows=s.get("dead_rows", integer(1, 1_000_000_000), d.dead_rows),
        paced_above=s.get("paced_above", integer(1, 10**12), d.paced_above),
    )


DOCTOR_KEYS = (
    "statement_timeout",
    "horizon_age",
    "dead_rows",
    "slot_wal",
    "notify_queue",
    "oldest_due",
    "queue_share",
    "claim_buffers",
    "sample",
)


def _doctor(s: Section) -> DoctorConfig:
    s.only(*DOCTOR_KEYS)
    d = DoctorConfig()
    return DoctorConfig(
        statement_timeout=s.get("statement_timeout", duration(600.0), d.statement_timeout),
        horizon_age=s.get("horizon_age", duration(MAX_DURATION), d.horizon_age),
        dead_rows=s.get("dead_rows", integer(1, 10**12), d.dead_rows),
        slot_wal=s.get("slot_wal", size(1, 2**50), d.slot_wal),
        notify_queue=s.get("notify_queue", fraction, d.notify_queue),
        oldest_due=s.get("oldest_due", duration(MAX_DURATION), d.oldest_due),
        queue_share=s.get("queue_share", fraction, d.queue_share),
        claim_buffers=s.get("claim_buffers", integer(1, 10**9), d.claim_buffers),
        sample=s.get("sample", duration(60.0), d.sample),
    )


def _history(s: Section) -> HistoryConfig:
    s.only("enabled", "keep")
    return HistoryConfig(
        enabled=s.get("enabled", boolean, False),
        keep=s.get("keep", duration(MAX_RETENTION), 7 * DAY),
    )


def _metrics(s: Section) -> MetricsConfig:
    s.only("port", "host")
    return MetricsConfig(
        port=s.get("port", optional(integer(1, 65535)), None),
        host=s.get("host", text(max_chars=255), "127.0.0.1"),
    )


def _log(s: Section) -> LogConfig:
    s.only("format", "level")
    return LogConfig(
        format=s.get("format", choice("text", "json"), "text"),
        level=s.get("level", choice("debug", "info", "warning", "error"), "info"),
    )
