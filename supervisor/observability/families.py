"""What a scrape reports: the master's knowledge turned into metric families, and readiness.

Three sources. The children's boards (shared memory) for job outcomes and latencies, summed per
pool over the live children plus the totals of children already reaped, so a counter never goes
down when a child is replaced. The master's own counters (rescues, requeues, restarts, kills).
A cached snapshot of the queue table, refreshed by a periodic service: a scrape never waits on
the database, so a slow or dead database cannot stall the master through its metrics endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from supervisor.doctor.horizon import Horizon
from supervisor.observability.exposition import Family
from supervisor.observability.view import TURN_BUCKETS, MasterCounters, MasterView
from supervisor.queue.limits import LimitUse, TenantBacklog
from supervisor.queue.maintenance import QueueStats
from supervisor.shared.board import CLAIM_BUCKETS, JOB_BUCKETS, Board, Counter, State

STATES = tuple(state.name.lower() for state in State)
# Results a child writes for the jobs it claimed; each claimed job ends in exactly one of them.
OUTCOMES = {
    Counter.COMPLETED: "completed",
    Counter.RETRIED: "retried",
    Counter.DISCARDED: "discarded",
    Counter.SNOOZED: "snoozed",
    Counter.RELEASED: "released",
    Counter.LOST: "lost_lease",
    Counter.CANCELLED: "cancelled",
}
QUEUE_STATES = (
    "available",
    "scheduled",
    "running",
    "discarded",
    "cancelled",
    "unknown",
    "waiting",
)


@dataclass
class PoolTotals:
    """Counters and histogram buckets of a pool's children, added up."""

    counters: dict[Counter, int] = field(default_factory=lambda: dict.fromkeys(Counter, 0))
    claim_buckets: list[int] = field(default_factory=lambda: [0] * (len(CLAIM_BUCKETS) + 1))
    claim_seconds: float = 0.0
    job_buckets: list[int] = field(default_factory=lambda: [0] * (len(JOB_BUCKETS) + 1))
    job_seconds: float = 0.0

    def add(self, board: Board) -> None:
        for counter, n in board.counters().items():
            self.counters[counter] += n
        buckets, seconds = board.claim_histogram()
        self.claim_buckets = [a + b for a, b in zip(self.claim_buckets, buckets, strict=True)]
        self.claim_seconds += seconds
        buckets, seconds = board.job_histogram()
        self.job_buckets = [a + b for a, b in zip(self.job_buckets, buckets, strict=True)]
        self.job_seconds += seconds

    def copy(self) -> PoolTotals:
        return PoolTotals(
            dict(self.counters),
            list(self.claim_buckets),
            self.claim_seconds,
            list(self.job_buckets),
            self.job_seconds,
        )


@dataclass(frozen=True)
class QueueSnapshot:
    queues: list[QueueStats]
    taken: float  # time.monotonic() when the database answered
    limits: list[LimitUse] = field(default_factory=list)
    tenants: list[TenantBacklog] = field(default_factory=list)
    # What attempts cost over the last hour (history kept): (kind, attempts, cpu seconds) and
    # (queue, tenant, cpu seconds), the costliest first.
    kind_costs: list[tuple[str, int, float]] = field(default_factory=list)
    tenant_costs: list[tuple[str, str, float]] = field(default_factory=list)


def pool_totals(master: MasterView, absorbed: Mapping[str, PoolTotals]) -> dict[str, PoolTotals]:
    totals = {name: t.copy() for name, t in absorbed.items()}
    for name in master.pools:
        totals.setdefault(name, PoolTotals())
    # Children of a pool retired by a reload still count under its name until they are reaped.
    for child in master.children:
        totals.setdefault(child.pool, PoolTotals()).add(child.board)
    return dict(sorted(totals.items()))


def readiness(
    master: MasterView, snapshot: QueueSnapshot | None, now: float, stale_after: float
) -> list[str]:
    """Why this supervisor is not ready to do its work; empty when it is."""
    reasons = []
    if master.stopping:
        reasons.append("stopping")
    if not master.database_up:
        reasons.append("database unreachable")
    elif snapshot is None:
        reasons.append("queue stats not read yet")
    elif now - snapshot.taken > stale_after:
        reasons.append(f"queue stats last read {now - snapshot.taken:.0f}s ago")
    for name, pool in master.pools.items():
        # An elastic pool that is growing is ready with its min up: a pod must not turn
        # unready (and lose its traffic, or be counted out by an autoscaler) while it grows.
        floor = pool.minimum or pool.processes
        if pool.ready < floor:
            reasons.append(f"pool {name}: {pool.ready} of {floor} children ready")
    return reasons


def families(
    master: MasterView,
    absorbed: Mapping[str, PoolTotals],
    snapshot: QueueSnapshot | None,
    now: float,
    horizon: Horizon | None = None,
) -> list[Family]:
    return [
        *queue_families(master, snapshot, now),
        *horizon_families(horizon),
        *limit_families(snapshot),
        *pool_families(pool_totals(master, absorbed)),
        *master_families(master.counters),
        *children_families(master),
    ]


def queue_families(master: MasterView, snapshot: QueueSnapshot | None, now: float) -> list[Family]:
    up = Family("pgq_database_up", "gauge", "1 when the master's last database operation worked.")
    up.add(1 if master.database_up else 0)
    jobs = Family("pgq_queue_jobs", "gauge", "Jobs in the queue table by queue and state.")
    oldest = Family(
        "pgq_queue_oldest_ready_age_seconds",
        "gauge",
        "How long the oldest job that is due now has been waiting (0 when none is).",
    )
    age = Family(
        "pgq_queue_stats_age_seconds",
        "gauge",
        "Seconds since pgq_queue_jobs and pgq_queue_oldest_ready_age_seconds were read.",
    )
    paused = Family(
        "pgq_queue_paused", "gauge", "1 while the queue is paused (`queues pause`), else 0."
    )
    if snapshot is not None:
        # Configured queues with no rows at all still get their zeros: a series that vanishes
        # when a queue drains would break dashboards and "absent" alerts.
        rows = {q.queue: q for q in snapshot.queues}
        for pool in master.pools.values():
            for queue in pool.queues:
                rows.setdefault(queue, QueueStats(queue, 0, 0, 0, 0, 0.0))
        for name, row in sorted(rows.items()):
            for state in QUEUE_STATES:
                jobs.add(getattr(row, state), queue=name, state=state)
            oldest.add(row.oldest_ready_age, queue=name)
            paused.add(1 if row.paused else 0, queue=name)
        age.add(max(0.0, now - snapshot.taken))
    return [up, jobs, oldest, paused, age]


def horizon_families(horizon: Horizon | None) -> list[Family]:
    """The doctor's horizon check as gauges (absent until it was first read)."""
    held = Family(
        "pgq_xmin_horizon_age_seconds",
        "gauge",
        "How long the oldest snapshot or transaction of the database has been held (VACUUM "
        "cannot remove dead rows newer than it); 0 when none is.",
    )
    pid = Family(
        "pgq_xmin_horizon_holder_pid",
        "gauge",
        "The server process (pid) holding that oldest snapshot or transaction; 0 when none.",
    )
    dead = Family(
        "pgq_jobs_dead_rows",
        "gauge",
        "Dead rows in pgq.jobs (the statistics' estimate), waiting for VACUUM and the horizon.",
    )
    if horizon is not None:
        held.add(horizon.age_seconds)
        pid.add(horizon.holder_pid or 0)
        dead.add(horizon.dead_rows)
    return [held, pid, dead]


def doctor_notes(horizon: Horizon | None) -> list[str]:
    """One line per problem the horizon check found, for /readyz's body."""
    if horizon is None:
        return []
    return [f"doctor: {c.status} {c.name}: {c.detail}" for c in horizon.culprits]


def limit_families(snapshot: QueueSnapshot | None) -> list[Family]:
    """Each queue limit in force on the database (every supervisor's claims together) and its
    use, read with the queue figures. A queue without a limit has no series."""
    cap = Family("pgq_limit_concurrency", "gauge", "A queue's concurrency limit (jobs at once).")
    running = Family(
        "pgq_limit_running",
        "gauge",
        "Jobs of a concurrency-limited queue running now, on every host: the slots its limit "
        "counts (a claimed job holds one until its claim ends).",
    )
    rate = Family("pgq_limit_rate_per_second", "gauge", "A queue's rate limit, in starts a second.")
    burst = Family("pgq_limit_burst", "gauge", "Tokens a queue's rate limit can save up.")
    tokens = Family(
        "pgq_limit_tokens",
        "gauge",
        "Tokens in a rate-limited queue's bucket now (0: its claims wait for the next one).",
    )
    for use in snapshot.limits if snapshot is not None else []:
        if use.concurrency is not None:
            cap.add(use.concurrency, queue=use.queue)
            running.add(use.running, queue=use.queue)
        if use.rate is not None and use.burst is not None and use.tokens is not None:
            rate.add(use.rate, queue=use.queue)
            burst.add(use.burst, queue=use.queue)
            tokens.add(use.tokens, queue=use.queue)
    backlog = Family(
        "pgq_tenant_jobs_due",
        "gauge",
        'Jobs due now of the ten busiest tenants (most jobs due), by queue and tenant ("": the '
        "jobs without a tenant).",
    )
    oldest = Family(
        "pgq_tenant_oldest_wait_seconds",
        "gauge",
        "How long the oldest due job of each of the ten busiest tenants has waited.",
    )
    tenant_running = Family(
        "pgq_tenant_running", "gauge", "Running jobs of each of the ten busiest tenants."
    )
    for t in snapshot.tenants if snapshot is not None else []:
        labels = {"queue": t.queue, "tenant": t.tenant or ""}
        backlog.add(t.available, **labels)
        oldest.add(t.oldest_wait, **labels)
        tenant_running.add(t.running, **labels)
    return [
        cap,
        running,
        rate,
        burst,
        tokens,
        backlog,
        oldest,
        tenant_running,
        *cost_families(snapshot),
    ]


def cost_families(snapshot: QueueSnapshot | None) -> list[Family]:
    """What finished attempts cost over the last hour, fleet-wide (pgq.attempt_costs)."""
    cpu = Family(
        "pgq_kind_cpu_seconds_last_hour",
        "gauge",
        "CPU seconds of the attempts that finished in the last hour, per kind (20 costliest).",
    )
    attempts = Family(
        "pgq_kind_attempts_last_hour", "gauge", "Attempts that finished in the last hour, per kind."
    )
    tenant_cpu = Family(
        "pgq_tenant_cpu_seconds_last_hour",
        "gauge",
        'CPU seconds of the attempts that finished in the last hour, per queue and tenant ("": '
        "the jobs without a tenant; 20 costliest).",
    )
    for kind, n, seconds in snapshot.kind_costs if snapshot is not None else []:
        cpu.add(seconds, kind=kind)
        attempts.add(n, kind=kind)
    for queue, tenant, seconds in snapshot.tenant_costs if snapshot is not None else []:
        tenant_cpu.add(seconds, queue=queue, tenant=tenant)
    return [cpu, attempts, tenant_cpu]


def pool_families(totals: Mapping[str, PoolTotals]) -> list[Family]:
    outcomes = Family(
        "pgq_jobs_total",
        "counter",
        "Results written by the children for the jobs they claimed, by pool and outcome "
        "(lost_lease: the lease had passed to another worker, the result was dropped).",
    )
    unknown = Family(
        "pgq_jobs_unknown_kind_total",
        "counter",
        "Jobs claimed whose kind has no handler in this pool (they are retried).",
    )
    claims = Family("pgq_claims_total", "counter", "Claim statements run, by pool.")
    empty = Family("pgq_claims_empty_total", "counter", "Claim statements that found no job.")
    claim_latency = Family(
        "pgq_claim_latency_seconds", "histogram", "Round trip of one claim statement."
    )
    duration = Family("pgq_job_duration_seconds", "histogram", "Time spent in the handler.")
    for pool, t in totals.items():
        for counter, outcome in OUTCOMES.items():
            outcomes.add(t.counters[counter], pool=pool, outcome=outcome)
        unknown.add(t.counters[Counter.UNKNOWN_KIND], pool=pool)
        claims.add(t.counters[Counter.CLAIMS], pool=pool)
        empty.add(t.counters[Counter.CLAIMS_EMPTY], pool=pool)
        claim_latency.add_histogram(CLAIM_BUCKETS, t.claim_buckets, t.claim_seconds, pool=pool)
        duration.add_histogram(JOB_BUCKETS, t.job_buckets, t.job_seconds, pool=pool)
    return [outcomes, unknown, claims, empty, claim_latency, duration]


def master_families(c: MasterCounters) -> list[Family]:
    rescued = Family(
        "pgq_jobs_rescued_total",
        "counter",
        "Jobs whose lease expired, returned to their queue (requeued) or discarded (no attempts "
        "left) by this supervisor's rescuer.",
    )
    rescued.add(c.rescued, outcome="requeued").add(c.rescued_discarded, outcome="discarded")
    crashed = Family(
        "pgq_jobs_after_crash_total",
        "counter",
        "Jobs held by a child that died, given back at once by the master: requeued (the "
        "attempt counts) or discarded (no attempts left).",
    )
    crashed.add(c.requeued_after_crash, outcome="requeued")
    crashed.add(c.discarded_after_crash, outcome="discarded")
    restarts = Family(
        "pgq_child_restarts_total",
        "counter",
        "Children replaced, by pool and how the old one left (signal_sigkill, crashed, "
        "boot_failed, memory_recycle, max_jobs_recycle, ...).",
    )
    for (pool, reason), n in sorted(c.restarts.items()):
        restarts.add(n, pool=pool, reason=reason)
    recycles = Family(
        "pgq_child_recycles_total",
        "counter",
        "Children recycled, by pool and kind: soft (memory_limit reached between jobs), hard "
        "(above memory_hard_limit: killed by the master), max_jobs.",
    )
    for (pool, kind), n in sorted(c.recycles.items()):
        recycles.add(n, pool=pool, kind=kind)
    simple = [
        ("pgq_job_timeouts_total", "Jobs that ran past their kind's timeout.", c.timeouts),
        (
            "pgq_cancel_stops_total",
            "Running jobs whose child was stopped because the job was cancelled.",
            c.cancel_stops,
        ),
        (
            "pgq_hard_memory_kills_total",
            "Children killed for going above their pool's hard memory limit.",
            c.hard_memory_kills,
        ),
        ("pgq_purged_jobs_total", "Dead letters deleted by the nightly purge.", c.purged),
        ("pgq_rescuer_runs_total", "Rescuer passes this supervisor ran.", c.rescuer_runs),
        ("pgq_vacuums_total", "VACUUMs of pgq.jobs this supervisor ran.", c.vacuums),
        (
            "pgq_staged_jobs_total",
            "Scheduled jobs this supervisor's stager made available at their run_at.",
            c.staged,
        ),
        (
            "pgq_schedule_jobs_total",
            "Jobs this supervisor enqueued for ticks of periodic schedules.",
            c.schedule_jobs,
        ),
    ]
    singles = [Family(name, "counter", text).add(value) for name, text, value in simple]
    turns = Family(
        "pgq_master_turn_seconds",
        "histogram",
        "How long each turn of the master's loop kept it busy (waiting for events excluded); "
        "lease renewal, reaping and signals wait behind a long one.",
    ).add_histogram(TURN_BUCKETS, c.turn_buckets, c.turn_seconds)
    longest = Family(
        "pgq_master_longest_turn_seconds",
        "gauge",
        "The longest turn of the master's loop since it started.",
    ).add(c.longest_turn)
    return [rescued, crashed, restarts, recycles, *singles, turns, longest]


def children_families(master: MasterView) -> list[Family]:
    states = Family("pgq_children", "gauge", "Live children by pool and state.")
    ready = Family(
        "pgq_children_ready", "gauge", "Children in the pool's slots that are ready to claim."
    )
    wanted = Family("pgq_pool_processes", "gauge", "Children each pool is set to run now.")
    desired = Family(
        "pgq_pool_desired",
        "gauge",
        "Children each pool's scaling wants (elastic pools; a fixed pool's processes).",
    )
    need = Family(
        "pgq_pool_need",
        "gauge",
        "Children this host's share of each elastic pool's backlog needs, before its max: "
        "summed over hosts, what the fleet needs (for an autoscaler of hosts).",
    )
    backlog = Family(
        "pgq_pool_backlog_seconds",
        "gauge",
        "Seconds of work due in each pool's queues (due jobs times measured service time).",
    )
    counts = {(pool, state): 0 for pool in master.pools for state in STATES}
    for child in master.children:
        key = (child.pool, child.board.state.name.lower())
        counts[key] = counts.get(key, 0) + 1
    for (pool, state), n in sorted(counts.items()):
        states.add(n, pool=pool, state=state)
    for name, pool in sorted(master.pools.items()):
        ready.add(pool.ready, pool=name)
        wanted.add(pool.processes, pool=name)
        desired.add(pool.desired, pool=name)
        need.add(pool.need, pool=name)
        backlog.add(pool.backlog_seconds, pool=name)
    return [states, ready, wanted, desired, need, backlog]
