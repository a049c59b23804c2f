"""The validated configuration: plain frozen dataclasses, and the error that lists every issue.

Import these from ``supervisor.config``; they live apart only so the YAML reader and the schema
can use them without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import time

DAY = 86400.0


@dataclass(frozen=True)
class ConfigIssue:
    """One thing wrong with the file; ``path`` is the dot-joined key path ("" for the file)."""

    path: str
    message: str
    line: int | None = None
    column: int | None = None

    def render(self, source: str) -> str:
        if self.path:
            line = f" (line {self.line})" if self.line is not None else ""
            return f"{source}: {self.path}: {self.message}{line}"
        if self.line is None:
            return f"{source}: {self.message}"
        column = f", column {self.column}" if self.column is not None else ""
        return f"{source}: line {self.line}{column}: {self.message}"


class ConfigError(Exception):
    """Every issue found in one configuration file, one line each when printed."""

    def __init__(self, issues: Iterable[ConfigIssue], source: str) -> None:
        # File order reads best; issues without a line (missing sections) come first.
        self.issues = sorted(issues, key=lambda i: (i.line is not None, i.line or 0, i.column or 0))
        self.source = source
        super().__init__("\n".join(issue.render(source) for issue in self.issues))

    def __reduce__(self) -> tuple[type[ConfigError], tuple[list[ConfigIssue], str]]:
        # Keeps the issues when the error crosses a process boundary (pickle).
        return (ConfigError, (self.issues, self.source))


@dataclass(frozen=True)
class DatabaseConfig:
    dsn: str | None = None  # None: PGQ_DSN or --dsn, or the embedded server if opted in
    # Start an embedded PostgreSQL when no DSN is given. Only by choice: a production host
    # whose environment lost PGQ_DSN must refuse to start, not run on an empty local database.
    embedded: bool = False
    embedded_dir: str = ".pgq"  # data folder of the embedded server, relative to the cwd
    auto_migrate: bool = True
    connect_timeout: float = 5.0
    # "transaction": the DSN reaches PostgreSQL through a transaction-mode pooler (PgBouncer),
    # so nothing may rely on session state: no prepared statements, no session advisory locks,
    # no LISTEN on it. None: a direct connection (or a session-mode pooler).
    pooler: str | None = None
    # A direct connection used only for LISTEN; behind a transaction pooler without it, idle
    # children poll.
    listen_dsn: str | None = None

    @property
    def pooled(self) -> bool:
        return self.pooler == "transaction"

    def wakeup_dsn(self, dsn: str) -> str | None:
        """Where the master LISTENs: listen_dsn, else the main DSN unless it is pooled."""
        if self.listen_dsn is not None:
            return self.listen_dsn
        return None if self.pooled else dsn


@dataclass(frozen=True)
class ScalingConfig:
    """An elastic pool (YAML `processes: {min, max, ...}`; docs/elastic-pools.md): the master
    sizes it between min and max from its backlog and measured service time."""

    min: int = 1
    max: int = 1
    target_wait: float = 5.0  # the wait a due job may see before the pool grows
    quiet: float = 60.0  # the need stays below the size this long before it shrinks
    weight: int = 1  # the pool's share of the host budgets when they bind


@dataclass(frozen=True)
class HostBudget:
    """What all elastic pools of a supervisor may use together (YAML `host: {cpu, memory}`)."""

    cpu: float | None = None  # share of the machine's cores (0.9: 90% of all of them)
    memory: int | None = None  # bytes: the children's USS (subprocesses included) and the master's


@dataclass(frozen=True)
class PoolConfig:
    name: str
    queues: dict[str, int]  # queue -> weight, in file order
    processes: int = 1  # an elastic pool starts with scaling.min children
    threads: int = 1
    batch: int = 1
    memory_limit: int | None = None  # bytes; the child checks it between jobs
    memory_hard_limit: int | None = None  # bytes; the master kills a child above it
    max_jobs: int | None = None  # recycle a child after this many jobs
    poll_interval: float = 1.0  # seconds between polls of an idle child
    scaling: ScalingConfig | None = None  # None: a fixed number of children

    def __post_init__(self) -> None:
        # A soft limit alone still gets a hard one, so a child stuck inside one job (where the
        # soft check never runs) cannot grow without bound.
        if self.memory_limit is not None and self.memory_hard_limit is None:
            object.__setattr__(self, "memory_hard_limit", int(self.memory_limit * 1.5))


@dataclass(frozen=True)
class JobPolicy:
    kind: str
    timeout: float | None = None
    max_attempts: int | None = None
    backoff_base: float = 2.0
    backoff_cap: float = 3600.0
    # "external": the handler has effects outside the database (a payment, a mail), so an
    # attempt that ends without a recorded outcome leaves the job 'unknown' instead of retrying.
    effects: str = "internal"
    reconcile: str | None = None  # "module:function" asked what happened to an unknown job
    # Top-level argument names that must arrive encrypted (an envelope); a job of this kind
    # holding one in clear is discarded unrun (supervisor/crypto).
    encrypt: tuple[str, ...] = ()

    @property
    def external(self) -> bool:
        return self.effects == "external"


@dataclass(frozen=True)
class ResultsConfig:
    max_size: int = 64 * 1024  # bytes of JSON a handler's return value may take


@dataclass(frozen=True)
class ReconcileConfig:
    interval: float = 10.0  # how often due unknown jobs are looked for
    timeout: float = 30.0  # the longest a round of hooks may run before it is killed
    batch: int = 20  # unknown jobs per round


@dataclass(frozen=True)
class AgingConfig:
    """Seconds a waiting job takes to rise one priority level (0: no aging), per queue."""

    every: float = 0.0
    queues: Mapping[str, float] = field(default_factory=dict)

    def period(self, queue: str) -> float:
        return self.queues.get(queue, self.every)

    def of(self, queues: Iterable[str]) -> dict[str, float]:
        """The queues of ``queues`` that age, with their periods (the claim's ``aging``)."""
        return {q: seconds for q in queues if (seconds := self.period(q)) > 0}


@dataclass(frozen=True)
class LeaseConfig:
    duration: float = 60.0
    renew_every: float = 10.0  # at most duration / 3, so two renewals can fail before expiry


@dataclass(frozen=True)
class RescueConfig:
    interval: float = 60.0
    batch: int = 1000


@dataclass(frozen=True)
class VacuumConfig:
    enabled: bool = True
    interval: float = 5.0  # how often the dead-row count is checked
    dead_rows: int = 10_000  # vacuum pgq.jobs once it holds this many dead rows
    # A vacuum of this many dead rows or more is paced as autovacuum's (the burst of WAL after
    # a long-held horizon forces checkpoints that stall every claim for seconds).
    paced_above: int = 1_000_000


@dataclass(frozen=True)
class DoctorConfig:
    """Thresholds of `pgq-supervisor doctor` (and of the findings fed to status, /readyz, the
    metrics and the dashboard). Past a threshold a check warns; far past it (see each check) it
    fails."""

    statement_timeout: float = 5.0  # every check's statements are cut short past this
    horizon_age: float = 60.0  # a snapshot or transaction held this long warns
    dead_rows: int = 100_000  # dead rows in pgq.jobs
    slot_wal: int = 1024**3  # WAL kept by one replication slot (bytes)
    notify_queue: float = 0.01  # share of the NOTIFY queue in use
    oldest_due: float = 300.0  # the oldest due job has waited this long
    queue_share: float = 0.5  # share of the database's row writes that are the queue's
    claim_buffers: int = 50  # buffers the claim touches per job it claims
    sample: float = 1.0  # how long the headroom check samples the write counters


@dataclass(frozen=True)
class PurgeConfig:
    at: time = time(3, 0)
    discarded_after: float = 14 * DAY
    batch: int = 5000


@dataclass(frozen=True)
class HistoryConfig:
    enabled: bool = False
    keep: float = 7 * DAY


@dataclass(frozen=True)
class MetricsConfig:
    port: int | None = None
    host: str = "127.0.0.1"


@dataclass(frozen=True)
class WebConfig:
    """How the dashboard is exposed (docs/dashboard-security.md)."""

    allowed_hosts: tuple[str, ...] = ()  # Host names answered besides the loopback ones
    trusted_proxies: tuple[str, ...] = ()  # networks whose X-Forwarded-* headers are believed
    read_only: bool = False  # every action refused
    redact: tuple[str, ...] = ()  # argument keys whose values no page shows


@dataclass(frozen=True)
class EncryptionConfig:
    """Where the keys of encrypted arguments come from: a file, else PGQ_KEYS."""

    keys_file: str | None = None  # absolute (made so relative to the YAML's folder)


@dataclass(frozen=True)
class LogConfig:
    format: str = "text"  # or "json"
    level: str = "info"  # debug, info, warning, error


@dataclass(frozen=True)
class ScheduleConfig:
    """A periodic job: one job of ``kind`` per tick of ``cron`` (in ``timezone``) or ``every``."""

    name: str
    kind: str
    cron: str | None = None  # five-field cron expression; exactly one of cron / every
    every: float | None = None  # seconds; ticks fall on multiples of it since the Unix epoch
    args: Mapping[str, object] = field(default_factory=dict)
    queue: str = "default"
    priority: int = 0
    timezone: str = "UTC"
    missed: str = "skip"  # or "run_once": what to do about ticks missed while none ran


@dataclass(frozen=True)
class Rate:
    """A token bucket: ``per_second`` tokens a second, at most ``burst`` saved up."""

    per_second: float
    burst: int
    text: str  # as written in the file ("50/s"), for status and errors


@dataclass(frozen=True)
class TenantLimits:
    """Limits for each tenant of a queue, separately."""

    concurrency: int | None = None
    rate: Rate | None = None


@dataclass(frozen=True)
class QueueLimits:
    """`limits.QUEUE`: enforced by every claim on the database, whichever supervisor makes it."""

    queue: str
    concurrency: int | None = None
    rate: Rate | None = None
    per_tenant: TenantLimits | None = None


@dataclass(frozen=True)
class Config:
    path: str
    database: DatabaseConfig
    handlers: dict[str, str]  # kind -> "module:function"
    pools: dict[str, PoolConfig]
    jobs: dict[str, JobPolicy]
    shutdown_timeout: float = 30.0
    lease: LeaseConfig = field(default_factory=LeaseConfig)
    rescue: RescueConfig = field(default_factory=RescueConfig)
    purge: PurgeConfig = field(default_factory=PurgeConfig)
    vacuum: VacuumConfig = field(default_factory=VacuumConfig)
    doctor: DoctorConfig = field(default_factory=DoctorConfig)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    log: LogConfig = field(default_factory=LogConfig)
    web: WebConfig = field(default_factory=WebConfig)
    encryption: EncryptionConfig = field(default_factory=EncryptionConfig)
    schedules: dict[str, ScheduleConfig] = field(default_factory=dict)
    results: ResultsConfig = field(default_factory=ResultsConfig)
    reconcile: ReconcileConfig = field(default_factory=ReconcileConfig)
    # queue -> tenant -> weight (YAML `tenants: {QUEUE: {weights: {TENANT: N}}}`); a tenant
    # not listed has weight 1.
    tenants: dict[str, dict[str, int]] = field(default_factory=dict)
    # Queues whose tenants share them by the CPU seconds their jobs use, not by job count
    # (`tenants: {QUEUE: {fairness: cost}}`, docs/job-cost.md).
    fair_by_cost: frozenset[str] = frozenset()
    limits: dict[str, QueueLimits] = field(default_factory=dict)
    aging: AgingConfig = field(default_factory=AgingConfig)
    # This supervisor's host name in worker ids and the registry (YAML `host`; PGQ_HOST wins);
    # None: the machine's host name.
    host: str | None = None
    budget: HostBudget = field(default_factory=HostBudget)
    # Key path -> line in the file, so later checks (handler imports) can point at the line.
    lines: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def policy(self, kind: str) -> JobPolicy:
        """The kind's configured policy, or the defaults."""
        policy = self.jobs.get(kind)
        return policy if policy is not None else JobPolicy(kind)

    def attempt_limit(self, kind: str, row_limit: int) -> int:
        """The attempts a job really gets: its kind's jobs.KIND.max_attempts when set (the
        supervisor retries by it), else the row's own. Every list, page and --json shows this
        one figure, so "3/10" never stands beside "attempt 3 of 3: no attempts left"."""
        policy = self.jobs.get(kind)
        configured = policy.max_attempts if policy is not None else None
        return configured if configured is not None else row_limit

    def external_kinds(self) -> list[str]:
        """Kinds declared ``effects: external`` (the requeue and the rescuer need them)."""
        return sorted(kind for kind, policy in self.jobs.items() if policy.external)

    def encrypted_fields(self) -> dict[str, tuple[str, ...]]:
        """Kinds with ``encrypt:`` fields, and those fields."""
        return {kind: p.encrypt for kind, p in self.jobs.items() if p.encrypt}

    def max_attempts_overrides(self) -> dict[str, int]:
        """Kinds whose policy sets max_attempts (the rescuer applies them to rescued jobs)."""
        return {
            kind: policy.max_attempts
            for kind, policy in self.jobs.items()
            if policy.max_attempts is not None
        }
