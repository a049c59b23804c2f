"""`status`: what each queue holds, what it finished lately, and who is working on it.

``gather`` reads everything from one snapshot (the caller runs it in one read-only REPEATABLE
READ transaction, so counts and registry rows agree and every age is measured on the server's
clock). ``to_json`` and ``render`` show the same data, for scripts and for people.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import psycopg

from supervisor.config import Config, PoolConfig
from supervisor.doctor import Check
from supervisor.doctor.horizon import read_culprits
from supervisor.queue import costs, maintenance
from supervisor.queue.progress import progress_query
from supervisor.queue.queries import query
from supervisor.queue.scaling import scaling_query
from supervisor.queue.unknown import count_unknown
from supervisor.views import limits as limits_view
from supervisor.views import schedules
from supervisor.views.limits import LimitsView
from supervisor.views.schedules import ScheduleRow
from supervisor.views.text import age, clock_time, iso, safe, table

# The window of the cost totals (status, the dashboard).
COST_WINDOW = 3600.0
# A queue whose oldest ready job has waited longer than this is flagged: at 3 a.m. that is the
# first sign that workers are missing, stuck or outnumbered.
LATE_AFTER = 300.0
# Supervisors heartbeat every 5 s and are pruned by their peers after 30 s (registry.STALE_AFTER);
# three missed beats mean it is stopped or stuck, and the last one left alone is never pruned.
STALE_AFTER = 15.0
# Throughput windows, as a load average: the last 1, 5 and 15 minutes.
WINDOWS = (("1m", 60.0), ("5m", 300.0), ("15m", 900.0))
OUTCOMES = ("completed", "discarded")


@dataclass
class QueueRow:
    queue: str
    available: int = 0
    scheduled: int = 0
    running: int = 0
    discarded: int = 0
    cancelled: int = 0
    # Workflow steps waiting for their parents: not due, not claimable, not late.
    waiting: int = 0
    paused: bool = False
    oldest_ready_age: float | None = None
    pools: list[str] = field(default_factory=list)
    # window -> outcome -> jobs; None when history is off.
    throughput: dict[str, dict[str, int]] | None = None

    @property
    def late(self) -> bool:
        return self.oldest_ready_age is not None and self.oldest_ready_age > LATE_AFTER

    @property
    def unserved(self) -> bool:
        """Jobs wait here but no pool of this config claims from it (a typo, or another
        deploy's queue)."""
        return not self.pools and self.available + self.scheduled > 0


@dataclass(frozen=True)
class WorkerView:
    worker_id: str
    pool: str
    slot: int
    pid: int
    state: str
    job_id: int | None
    kind: str | None
    job_started: datetime | None
    job_age: float | None
    spawned_at: datetime
    rss_bytes: int | None = None
    # What the running job's handler last said of its progress (0-1), and at what.
    progress: float | None = None
    progress_message: str | None = None


@dataclass
class SupervisorView:
    id: str
    host: str
    pid: int
    config: str
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age: float
    workers: list[WorkerView] = field(default_factory=list)
    # Each pool as this supervisor's scaling last published it (docs/elastic-pools.md).
    scaling: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def stale(self) -> bool:
        return self.heartbeat_age > STALE_AFTER


@dataclass
class Status:
    generated_at: datetime
    database: str
    config_path: str
    history: bool
    queues: list[QueueRow]
    pools: list[PoolConfig]
    supervisors: list[SupervisorView]
    schedules: list[ScheduleRow] = field(default_factory=list)
    # What the doctor's horizon check finds wrong (a snapshot held too long, a slot keeping WAL).
    doctor: list[Check] = field(default_factory=list)
    # (queue, kind, jobs) of the jobs whose outcome is unknown (effects: external).
    unknown: list[tuple[str, str, int]] = field(default_factory=list)
    hooked: frozenset[str] = frozenset()  # kinds with a reconcile hook
    limits: LimitsView = field(default_factory=LimitsView)
    # What attempts cost over the last hour (history kept): per kind and per queue and tenant.
    costs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # (queue, kind, waiting, dead letters) of kinds no handler of the config serves.
    unhandled: list[tuple[str, str, int, int]] = field(default_factory=list)

    def warnings(self) -> list[str]:
        """Everything an operator should look at, in words."""
        found = []
        for queue_name, kind, count in self.unknown:
            hook = "its reconcile hook asks again later; " if kind in self.hooked else ""
            found.append(
                f"queue {safe(queue_name)}: {_jobs(count)} of kind {safe(kind)} with outcome "
                f"unknown (effects: external): {hook}decide with `jobs list --state unknown` "
                "and `jobs resolve ID --as completed|retry|discarded`"
            )
        for queue_name, kind, waiting, dead in self.unhandled:
            found.append(
                f"queue {safe(queue_name)}: {_count_of(waiting, dead)} of kind {safe(kind)}, "
                f"which no handler in {self.config_path} serves (retried until their attempts "
                f"run out): add it under handlers:, or cancel them with `jobs cancel --kind "
                f"{safe(kind)}`"
            )
        for q in self.queues:
            if q.late:
                found.append(
                    f"queue {safe(q.queue)}: the oldest ready job has waited "
                    f"{age(q.oldest_ready_age)} (more than {age(LATE_AFTER)})"
                )
            if q.paused:
                found.append(
                    f"queue {safe(q.queue)} is paused: {_jobs(q.available)} due and waiting for "
                    "`queues resume`"
                )
            if q.unserved:
                found.append(
                    f"queue {safe(q.queue)}: {_jobs(q.available + q.scheduled)} waiting, but no "
                    f"pool in {self.config_path} claims from it"
                )
        for s in self.supervisors:
            if s.stale:
                found.append(
                    f"supervisor pid {s.pid} on {safe(s.host)}: no heartbeat for "
                    f"{age(s.heartbeat_age)} (it beats every 5s): stopped or stuck?"
                )
        found += self.limits.warnings(self.config_path)
        ready = sum(q.available for q in self.queues)
        if ready and not any(not s.stale for s in self.supervisors):
            found.append(f"no supervisor is running (no fresh heartbeat), and {_jobs(ready)} due")
        for c in self.doctor:
            found.append(f"{c.name}: {c.detail}; fix: {c.fix} (more: `doctor`)")
        return found


def _count_of(waiting: int, dead: int) -> str:
    parts = [f"{waiting} job{'' if waiting == 1 else 's'} waiting"] if waiting else []
    if dead:
        parts.append("1 dead letter" if dead == 1 else f"{dead} dead letters")
    return " and ".join(parts)


def unhandled_kinds(rows: Iterable[Sequence[Any]]) -> list[tuple[str, str, int, int]]:
    """The rows of the unhandled_kinds query (sql/operator.sql), for Status.unhandled."""
    return [(queue, kind, int(waiting), int(dead)) for queue, kind, waiting, dead in rows]


# Rows of each state the unhandled_kinds query samples (its counts are lower bounds past it).
UNHANDLED_SAMPLE = 1_000


def share(pool: PoolConfig, queue: str) -> float:
    """The part of the pool's claims that goes to ``queue`` while every queue has work."""
    return pool.queues[queue] / sum(pool.queues.values())


def gather(conn: psycopg.Connection[Any], config: Config, database: str) -> Status:
    row = conn.execute(query("clock")).fetchone()
    assert row is not None
    now: datetime = row[0]
    queues: dict[str, QueueRow] = {}

    def queue(name: str) -> QueueRow:
        return queues.setdefault(name, QueueRow(name))

    for pool in config.pools.values():
        for name in pool.queues:
            queue(name).pools.append(pool.name)
    for stats in maintenance.queue_stats(conn):
        q = queue(stats.queue)
        q.available, q.scheduled = stats.available, stats.scheduled
        q.running, q.discarded = stats.running, stats.discarded
        q.cancelled, q.paused = stats.cancelled, stats.paused
        q.waiting = stats.waiting
        # The query reports 0 for a queue with nothing due; "no ready job" is not "fresh".
        q.oldest_ready_age = stats.oldest_ready_age if stats.available else None
    if config.history.enabled:
        _add_throughput(conn, queues, queue)
    return Status(
        generated_at=now,
        database=database,
        config_path=config.path,
        history=config.history.enabled,
        queues=[queues[name] for name in sorted(queues)],
        pools=list(config.pools.values()),
        supervisors=_supervisors(conn),
        schedules=schedules.gather(conn, config, now),
        doctor=read_culprits(conn, config.doctor),
        unknown=count_unknown(conn),
        hooked=frozenset(k for k, p in config.jobs.items() if p.reconcile),
        limits=limits_view.gather(conn, config),
        costs=_costs(conn) if config.history.enabled else {},
        unhandled=unhandled_kinds(
            conn.execute(
                query("unhandled_kinds"),
                {"kinds": sorted(config.handlers), "cap": UNHANDLED_SAMPLE},
            ).fetchall()
        ),
    )


def _costs(conn: psycopg.Connection[Any]) -> dict[str, list[dict[str, Any]]]:
    return {
        "kinds": costs.by_kind(conn, COST_WINDOW),
        "tenants": costs.by_tenant(conn, COST_WINDOW),
    }


def _add_throughput(conn: psycopg.Connection[Any], queues: dict[str, QueueRow], queue: Any) -> None:
    counts: dict[tuple[str, str, str], int] = {}
    for window, seconds in WINDOWS:
        for name, outcome, jobs in conn.execute(
            query("history_throughput"), {"seconds": seconds}
        ).fetchall():
            queue(name)
            counts[(name, window, outcome)] = int(jobs)
    for name, q in queues.items():
        q.throughput = {
            window: {outcome: counts.get((name, window, outcome), 0) for outcome in OUTCOMES}
            for window, _ in WINDOWS
        }


def _supervisors(conn: psycopg.Connection[Any]) -> list[SupervisorView]:
    found = supervisors_from(
        conn.execute(query("list_supervisors")).fetchall(),
        conn.execute(query("list_workers")).fetchall(),
        conn.execute(scaling_query("list_scaling")).fetchall(),
    )
    ids = running_job_ids(found)
    if ids:
        add_progress(found, conn.execute(progress_query("read_progress"), {"ids": ids}))
    return found


def supervisors_from(
    supervisor_rows: Iterable[Sequence[Any]],
    worker_rows: Iterable[Sequence[Any]],
    scaling_rows: Iterable[Sequence[Any]] = (),
) -> list[SupervisorView]:
    """Live supervisors with their children, from the rows of list_supervisors and list_workers
    (the web dashboard reads the same rows on its async connections)."""
    supervisors = {
        sid: SupervisorView(sid, host, pid, config, started, beat, float(beat_age))
        for sid, host, pid, config, started, beat, beat_age in supervisor_rows
    }
    for sid, *worker in worker_rows:
        if sid in supervisors:
            supervisors[sid].workers.append(WorkerView(*worker))
    for sid, scaling in scaling_rows:
        if sid in supervisors and isinstance(scaling, dict):
            supervisors[sid].scaling = scaling
    return list(supervisors.values())


def running_job_ids(supervisors: list[SupervisorView]) -> list[int]:
    return [w.job_id for s in supervisors for w in s.workers if w.job_id is not None]


def add_progress(supervisors: list[SupervisorView], rows: Iterable[Sequence[Any]]) -> None:
    """Each running job's progress (rows of read_progress) onto its worker."""
    said = {row[0]: (row[2], row[3]) for row in rows}
    for s in supervisors:
        s.workers = [
            replace(w, progress=said[w.job_id][0], progress_message=said[w.job_id][1])
            if w.job_id in said
            else w
            for w in s.workers
        ]


def to_json(status: Status) -> dict[str, Any]:
    """The same data as ``render``, with stable keys, numbers as numbers, times in ISO 8601."""
    return {
        "generated_at": iso(status.generated_at),
        "database": status.database,
        "config": status.config_path,
        "history": status.history,
        "late_after_seconds": LATE_AFTER,
        "stale_after_seconds": STALE_AFTER,
        "queues": [
            {
                "queue": q.queue,
                "available": q.available,
                "scheduled": q.scheduled,
                "running": q.running,
                "discarded": q.discarded,
                "cancelled": q.cancelled,
                "waiting": q.waiting,
                "paused": q.paused,
                "oldest_ready_age_seconds": q.oldest_ready_age,
                "late": q.late,
                "pools": q.pools,
                "throughput": q.throughput,
            }
            for q in status.queues
        ],
        "pools": [
            {
                "pool": p.name,
                "processes": p.processes,
                "threads": p.threads,
                "batch": p.batch,
                "queues": [
                    {"queue": name, "weight": weight, "share": share(p, name)}
                    for name, weight in p.queues.items()
                ],
            }
            for p in status.pools
        ],
        "hosts": [
            {"host": host, "supervisors": [_supervisor_json(s) for s in members]}
            for host, members in _by_host(status.supervisors)
        ],
        "schedules": schedules.to_json(status.schedules),
        "unknown": [{"queue": q, "kind": k, "jobs": n} for q, k, n in status.unknown],
        "unhandled_kinds": [
            {"queue": q, "kind": k, "waiting": w, "dead_letters": d}
            for q, k, w, d in status.unhandled
        ],
        "limits": limits_view.to_json(status.limits),
        "busiest_tenants": limits_view.tenants_json(status.limits),
        "cost_last_hour": status.costs,
        "warnings": status.warnings(),
    }


def _supervisor_json(s: SupervisorView) -> dict[str, Any]:
    return {
        "id": s.id,
        "pid": s.pid,
        "config": s.config,
        "started_at": iso(s.started_at),
        "heartbeat_at": iso(s.heartbeat_at),
        "heartbeat_age_seconds": s.heartbeat_age,
        "stale": s.stale,
        "pools": [{"pool": name, **state} for name, state in sorted(s.scaling.items())],
        "workers": [
            {
                "worker_id": w.worker_id,
                "pool": w.pool,
                "slot": w.slot,
                "pid": w.pid,
                "state": w.state,
                "spawned_at": iso(w.spawned_at),
                "rss_bytes": w.rss_bytes,
                "job": None
                if w.job_id is None
                else {
                    "id": w.job_id,
                    "kind": w.kind,
                    "started_at": iso(w.job_started),
                    "running_seconds": w.job_age,
                    "progress": w.progress,
                    "progress_message": w.progress_message,
                },
            }
            for w in s.workers
        ],
    }


def _by_host(
    supervisors: Iterable[SupervisorView],
) -> list[tuple[str, list[SupervisorView]]]:
    hosts: dict[str, list[SupervisorView]] = {}
    for s in supervisors:
        hosts.setdefault(s.host, []).append(s)
    return sorted(hosts.items())


def render(status: Status) -> list[str]:
    lines = [f"pgq status of {status.database} at {clock_time(status.generated_at)}", ""]
    lines += _queue_lines(status)
    lines += ["", f"POOLS (from {status.config_path})"]
    lines += _pool_lines(status.pools)
    lines += _cost_lines(status.costs)
    lines += ["", "SUPERVISORS"]
    lines += _supervisor_lines(status.supervisors)
    lines += schedules.lines(status.schedules)
    lines += limits_view.lines(status.limits)
    warnings = status.warnings()
    lines += ["", "ATTENTION" if warnings else "Nothing needs attention."]
    lines += [f"  ! {w}" for w in warnings]
    return lines


def _queue_lines(status: Status) -> list[str]:
    if not status.queues:
        return ["QUEUES: none configured and no jobs"]
    headers = [
        "QUEUE",
        "AVAILABLE",
        "SCHEDULED",
        "RUNNING",
        "DISCARDED",
        "CANCELLED",
        "WAITING",
        "OLDEST READY",
    ]
    if status.history:
        headers += ["COMPLETED 1m/5m/15m", "DISCARDED 1m/5m/15m"]
    headers.append("NOTE")
    rows = []
    for q in status.queues:
        row: list[object] = [
            q.queue,
            q.available,
            q.scheduled,
            q.running,
            q.discarded,
            q.cancelled,
            q.waiting,
            age(q.oldest_ready_age),
        ]
        if q.throughput is not None:
            row += [
                "/".join(str(q.throughput[w][outcome]) for w, _ in WINDOWS) for outcome in OUTCOMES
            ]
        notes = (
            (["PAUSED"] if q.paused else [])
            + (["LATE"] if q.late else [])
            + (["NO POOL"] if q.unserved else [])
        )
        row.append(", ".join(notes))
        rows.append(row)
    lines = ["QUEUES", *table(headers, rows, right=range(1, len(headers) - 1))]
    if not status.history:
        lines.append("throughput: not recorded (history.enabled is false in the config)")
    return lines


def _pool_lines(pools: list[PoolConfig]) -> list[str]:
    rows: list[list[object]] = []
    for pool in pools:
        for i, (name, weight) in enumerate(pool.queues.items()):
            first = i == 0
            rows.append(
                [
                    pool.name if first else "",
                    pool.processes if first else "",
                    pool.threads if first else "",
                    pool.batch if first else "",
                    name,
                    weight,
                    f"{share(pool, name):.0%}",
                ]
            )
    headers = ["POOL", "PROCESSES", "THREADS", "BATCH", "QUEUE", "WEIGHT", "SHARE"]
    return [
        *table(headers, rows, right=(1, 2, 3, 5, 6)),
        "share: a queue's part of its pool's claims while all the pool's queues have work "
        "(an empty queue's turns go to the others)",
    ]


def _cost_lines(spent: dict[str, list[dict[str, Any]]]) -> list[str]:
    kinds = spent.get("kinds") or []
    if not kinds:
        return []
    rows = [
        [
            k["kind"],
            k["attempts"],
            f"{k['cpu_seconds']:.1f}",
            "-" if k["peak_memory"] is None else f"{k['peak_memory'] / 2**20:.0f} MiB",
        ]
        for k in kinds[:10]
    ]
    headers = ["KIND", "ATTEMPTS", "CPU SECONDS", "PEAK MEMORY"]
    return ["", "TOP KINDS BY CPU (last hour)", *table(headers, rows, right=(1, 2, 3))]


def _scaling_lines(s: SupervisorView) -> list[str]:
    """An elastic pool's size and why, one line each (fixed pools say nothing new)."""
    lines = []
    for name, state in sorted(s.scaling.items()):
        if not state.get("elastic"):
            continue
        lines.append(
            f"  pool {safe(name)}: {state.get('actual')} children, desired "
            f"{state.get('desired')} of {state.get('min')}-{state.get('max')}, backlog "
            f"{state.get('backlog_seconds', 0):g}s: {safe(str(state.get('reason', '')))}"
        )
    return lines


def _supervisor_lines(supervisors: list[SupervisorView]) -> list[str]:
    if not supervisors:
        return ["none registered (a running supervisor heartbeats every 5s)"]
    lines: list[str] = []
    for host, members in _by_host(supervisors):
        for s in members:
            note = "  STALE: stopped or stuck?" if s.stale else ""
            lines.append(
                f"{safe(host)}  pid {s.pid}  started {clock_time(s.started_at)}  "
                f"heartbeat {age(s.heartbeat_age)} ago  config {safe(s.config)}{note}"
            )
            lines += _scaling_lines(s)
            rows = [
                [
                    w.pool,
                    w.slot,
                    w.pid,
                    w.state,
                    w.job_id,
                    w.kind,
                    age(w.job_age) if w.job_id is not None else "-",
                ]
                for w in s.workers
            ]
            headers = ["POOL", "SLOT", "PID", "STATE", "JOB", "KIND", "RUNNING FOR"]
            if rows:
                lines += table(headers, rows, right=(1, 2, 4), indent="  ")
            else:
                lines.append("  no children")
    return lines


def _jobs(n: int) -> str:
    return "1 job is" if n == 1 else f"{n} jobs are"
