"""Every key of the YAML, as the schema reads it: path, accepted values, default, meaning.

The reference page (docs/reference/configuration.md, built by the docs' hook) and the JSON
Schema shipped for editors (supervisor/config/pgq-supervisor.schema.json) are both generated
from this, so neither can drift from what `check` accepts: the keys are recorded by running the
schema itself over a file that names one pool, one job kind and one schedule, and the accepted
values come from each converter's mark (supervisor.config.fields.described).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import time
from typing import Any

from supervisor.config.fields import Section, schema_of
from supervisor.config.reader import join

# The named entries of the sample file, and how the reference writes them.
_SAMPLE = """
handlers: {KIND: "module:function"}
pools: {POOL: {queues: {QUEUE: 1}}}
jobs: {KIND: {}}
schedules: {NAME: {every: 1s, kind: KIND}}
"""
_PLACEHOLDERS = {"KIND": "<kind>", "POOL": "<pool>", "QUEUE": "<queue>", "NAME": "<name>"}

# What each key means, in a line. tests/unit/test_config_reference.py fails when a key the
# schema reads has no line here, or a line names a key the schema no longer reads.
HELP = {
    "database.dsn": "the connection string; ${VAR} expands (PGQ_DSN and --dsn override it)",
    "database.embedded": "with no DSN, start an embedded PostgreSQL (laptops; the embedded extra)",
    "database.embedded_dir": "the embedded server's data folder, relative to the current directory",
    "database.auto_migrate": "apply pending migrations at start (false for least-privilege roles)",
    "database.connect_timeout": "how long a connect may take (children and verbs)",
    "database.pooler": "transaction: the DSN goes through PgBouncer in transaction mode",
    "database.listen_dsn": "with a pooler: a direct connection used only for LISTEN",
    "handlers.<kind>": 'job kind -> "module:function"; the only way a kind maps to code',
    "pools.<pool>.queues.<queue>": "the queue's weight in the pool (its share of the claims)",
    "pools.<pool>.processes": "children forked for the pool; {min, max} makes it elastic "
    "(target_wait, quiet, weight: docs/elastic-pools.md)",
    "pools.<pool>.threads": "handler threads inside each child (I/O-bound handlers)",
    "pools.<pool>.batch": "jobs claimed per round trip",
    "pools.<pool>.memory_limit": "soft: checked between jobs; over it the child exits and is "
    "replaced",
    "pools.<pool>.memory_hard_limit": "hard: the master kills the child (default 1.5 x "
    "memory_limit)",
    "pools.<pool>.max_jobs": "recycle a child after about this many jobs (jittered +-10%)",
    "pools.<pool>.poll_interval": "an idle child's fallback poll when no wake-up comes",
    "jobs.<kind>.timeout": "a job running longer is stopped and retried",
    "jobs.<kind>.max_attempts": "attempts before a job is discarded; rules over the row's own",
    "jobs.<kind>.backoff.base": "the first retry's delay; it doubles per attempt (jittered)",
    "jobs.<kind>.backoff.cap": "the longest delay between two attempts",
    "jobs.<kind>.effects": "external: an attempt that ends without an outcome waits in unknown "
    "(docs/outcomes.md) instead of running again",
    "jobs.<kind>.reconcile": 'the hook ("module:function") that decides an unknown job\'s outcome',
    "jobs.<kind>.encrypt": "argument names that must arrive encrypted (Secret); a job holding "
    "one in clear is discarded unrun",
    "encryption.keys_file": "the keys of encrypted arguments, ID:KEY a line, the first seals "
    "(default: PGQ_KEYS)",
    "results.max_size": "the largest handler result kept with a job",
    "reconcile.interval": "how often unknown jobs are handed to their reconcile hooks",
    "reconcile.timeout": "how long one reconcile hook may take",
    "reconcile.batch": "unknown jobs reconciled per run",
    "shutdown_timeout": "how long a stop or a deploy waits for the jobs in hand",
    "lease.duration": "how long a claim holds its jobs without a renewal",
    "lease.renew_every": "how often the master renews its children's leases (at most a third "
    "of the duration)",
    "rescue.interval": "how often expired leases go back to their queues (once across the fleet)",
    "rescue.batch": "jobs rescued per statement",
    "purge.at": "the local time of the daily purge of dead letters and old history",
    "purge.discarded_after": "how long dead letters and cancelled jobs are kept",
    "purge.batch": "rows deleted per statement",
    "vacuum.enabled": "VACUUM pgq.jobs when dead rows pile up (autovacuum is too slow for a queue)",
    "vacuum.interval": "how often the dead rows are counted",
    "vacuum.dead_rows": "vacuum past this many dead rows",
    "vacuum.paced_above": "a vacuum of this many dead rows or more is paced as autovacuum's "
    "(its burst of WAL would force checkpoints that stall the claims); 1 paces every one",
    "history.enabled": "keep a row per finished job in pgq.job_history",
    "history.keep": "how long history rows are kept (daily partitions are dropped)",
    "metrics.port": "serve /metrics, /livez and /readyz on this port",
    "metrics.host": "the address the metrics listen on",
    "log.format": "text, or json lines (--log-format overrides)",
    "log.level": "the lowest level logged (--log-level overrides)",
    "schedules.<name>.cron": "five-field cron; exactly one of cron and every",
    "schedules.<name>.every": "a fixed interval, at least 1s, on whole multiples since the epoch",
    "schedules.<name>.kind": "the kind to enqueue at each tick (a key of handlers)",
    "schedules.<name>.args": "the handler's keyword arguments",
    "schedules.<name>.queue": "the queue to enqueue into",
    "schedules.<name>.priority": "the job's priority",
    "schedules.<name>.timezone": "the cron's time zone",
    "schedules.<name>.missed": "skip, or run_once: ticks missed while no supervisor ran",
    "doctor.statement_timeout": "how long each family of doctor's checks may take",
    "doctor.horizon_age": "a snapshot, transaction or prepared transaction held this long warns",
    "doctor.dead_rows": "dead rows in pgq.jobs past this many warn",
    "doctor.slot_wal": "WAL a replication slot keeps past this size warns",
    "doctor.notify_queue": "the share of the NOTIFY queue in use that warns",
    "doctor.oldest_due": "the oldest due job's wait that warns",
    "doctor.queue_share": "the queue's share of the database's row writes that warns",
    "doctor.claim_buffers": "buffers the claim may touch per job it claims",
    "doctor.sample": "how long the headroom check samples the write rates",
    "web.allowed_hosts": "Host names the dashboard answers besides the loopback ones",
    "web.trusted_proxies": "addresses whose X-Forwarded-* headers the dashboard believes",
    "web.read_only": "the dashboard shows and never acts (no button, every action refused)",
    "web.redact": "argument keys whose values no dashboard page shows",
    "aging.every": "a due job rises one priority level per this long waited past its run_at "
    "(0s: off), never past its tenant's highest waiting priority",
    "host": "this supervisor's name in worker ids and status (PGQ_HOST wins; default: the "
    "machine's host name)",
}


@dataclass(frozen=True)
class Key:
    path: str  # dot-joined, with <pool>, <kind>, <queue>, <name> for named entries
    schema: dict[str, Any]  # JSON Schema of the value
    default: Any  # as the schema reads it (seconds for durations); None: not set
    help: str

    @property
    def required(self) -> bool:
        return self.path in ("handlers.<kind>", "pools.<pool>.queues.<queue>")


def _placeholder(path: str) -> str:
    return ".".join(_PLACEHOLDERS.get(part, part) for part in path.split("."))


@contextmanager
def _recording() -> Iterator[list[tuple[str, Callable[..., Any], Any]]]:
    """Section.get and Section.read, recording each key the schema reads (docs tooling only:
    not thread-safe, and restored on the way out)."""
    seen: list[tuple[str, Callable[..., Any], Any]] = []
    get, read = Section.get, Section.read

    def recording_get(self: Section, key: str, convert: Any, default: Any) -> Any:
        seen.append((join(self.path, key), convert, default))
        return get(self, key, convert, default)

    def recording_read(self: Section, path: str, node: Any, convert: Any, default: Any) -> Any:
        seen.append((path, convert, None))
        return read(self, path, node, convert, default)

    Section.get, Section.read = recording_get, recording_read  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Section.get, Section.read = get, read  # type: ignore[method-assign]


def keys() -> list[Key]:
    """Every key the schema reads, in the order it reads them."""
    from supervisor.config import parse_config

    with _recording() as seen:
        parse_config(_SAMPLE, source="<reference>", env={})
    found: dict[str, Key] = {}
    for path, convert, default in seen:
        name = _placeholder(path)
        found.setdefault(name, Key(name, schema_of(convert), default, HELP.get(name, "")))
    return list(found.values())


def default_text(key: Key) -> str:
    """The default as one would write it in the file."""
    from supervisor.config.units import format_duration, format_size

    value, unit = key.default, key.schema.get("x-pgq-unit")
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if unit == "duration":
        return format_duration(value)
    if unit == "size":
        return format_size(value)
    if isinstance(value, time):
        return value.strftime("%H:%M")
    if isinstance(value, dict):
        return json.dumps(value)
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return str(value)


def accepts(schema: dict[str, Any]) -> str:
    """What a value may be, in words."""
    if "enum" in schema:
        return " or ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type")
    if kind == "integer":
        return f"integer {schema['minimum']:,}..{schema['maximum']:,}".replace(",", " ")
    if kind == "boolean":
        return "true or false"
    if kind == "object":
        return "mapping"
    if "description" in schema:
        return str(schema["description"])
    if kind == "string":
        return "string"
    return "value"


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the file, for editors (yaml-language-server and the like)."""
    root: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "pgq-supervisor configuration",
        "description": "The YAML read by `pgq-supervisor -c FILE`; `check` validates it in full.",
        "type": "object",
        "additionalProperties": False,
        "properties": {},
        "required": ["handlers", "pools"],
    }
    for key in keys():
        node = root
        parts = key.path.split(".")
        for part in parts[:-1]:
            node = _child(node, part)
        leaf = {k: v for k, v in key.schema.items() if not k.startswith("x-")}
        if key.help:
            leaf["description"] = key.help + (
                f" ({leaf['description']})" if "description" in leaf else ""
            )
        if key.default is not None and not isinstance(key.default, time):
            default = default_text(key) if key.schema.get("x-pgq-unit") else key.default
            leaf["default"] = list(default) if isinstance(default, tuple) else default
        _set(node, parts[-1], leaf)
    root["properties"]["pools"]["additionalProperties"]["required"] = ["queues"]
    return root


def _child(node: dict[str, Any], part: str) -> dict[str, Any]:
    """The object schema under ``part`` (a named entry: additionalProperties)."""
    if part.startswith("<"):
        if not isinstance(node.get("additionalProperties"), dict):
            node.pop("properties", None)
            node["additionalProperties"] = {
                "type": "object",
                "additionalProperties": False,
                "properties": {},
            }
        child: dict[str, Any] = node["additionalProperties"]
        return child
    properties = node.setdefault("properties", {})
    found: dict[str, Any] = properties.setdefault(
        part, {"type": "object", "additionalProperties": False, "properties": {}}
    )
    return found


def _set(node: dict[str, Any], part: str, leaf: dict[str, Any]) -> None:
    if part.startswith("<"):
        node.pop("properties", None)
        node["additionalProperties"] = leaf
    else:
        node.setdefault("properties", {})[part] = leaf


def reference_markdown() -> str:
    """docs/reference/configuration.md: every key, grouped by section."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from the config schema (supervisor/config/reference.py) when the docs",
        "     are built: edit the schema or its HELP lines, not this page. -->",
        "",
        "Every key `pgq-supervisor -c FILE check` accepts, with what it may hold and its default.",
        "`<pool>`, `<kind>`, `<queue>` and `<name>` stand for names you choose. Any string may",
        "use `${VAR}` or `${VAR:-default}` from the environment (`$$` is a literal `$`).",
        "Durations are a number of seconds or `500ms`, `30s`, `5m`, `1h30m`, `2d`; sizes a",
        "number of bytes or `512MiB`, `1.5GiB` (binary), `100MB` (decimal). An annotated",
        "example is in [the annotated file](yaml-example.md); editors can check a file against",
        "[the JSON Schema](../pgq-supervisor.schema.json).",
        "",
    ]
    section = None
    for key in keys():
        top = key.path.split(".")[0]
        if top != section:
            section = top
            lines += [
                "",
                f"## `{top}`",
                "",
                "| key | accepts | default | meaning |",
                "|---|---|---|---|",
            ]
        default = default_text(key)
        lines.append(
            f"| `{key.path}` | {accepts(key.schema)} | {f'`{default}`' if default else ''} "
            f"| {key.help.replace('|', '/')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2, sort_keys=False))
