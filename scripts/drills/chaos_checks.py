"""The verdict of a chaos drill: what must hold after the supervisor's final clean stop.

- Every job that was not made to fail completed exactly once: its row was deleted by the
  fenced completion (a trigger recorded the deletion and the lease it held), and that lease
  is an execution in the ledger. Jobs made to fail are discarded; nothing else is.
- No job was lost (neither completed nor in the table), none is left running.
- At-least-once has a price, and each extra execution (one that neither completed nor failed on
  purpose) must be explained by a fault: its child was killed, its master was killed or
  stopped, its lease was lost (the worker logged the dropped result), or the database went away
  while it ran. Their number is bounded by the handler slots times the faults.
- No process of any supervisor incarnation survives, nor any in a killed child's group.
- The supervisors logged no bug: no crash of a worker loop, no failing master step.
- While the database was down, no process of the supervisor spun (scripts/drills/chaos.py measures
  their CPU during each outage and reports any above its bound as trouble).
"""

from __future__ import annotations

import argparse
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg
from chaos_procs import Incarnation, Tracker

# Wall clocks of this process and of the database are the same machine's; this absorbs the
# gap between a ledger row's timestamp and the moment its handler was actually interrupted.
SLACK = 1.0
# Children of a killed master leave within the orphan grace of supervisor.child.process.
LEFTOVER_WAIT = 10.0
DB_FAULTS = ("pg_restart", "pg_kill", "terminate", "outage_deploy", "outage_reload", "read_only")
# Faults that end the incarnation: every execution of theirs that was cut short is explained.
MASTER_FAULTS = ("master_kill", "deploy", "outage_deploy", "host_kill")
_LEASE_LOST = re.compile(
    r"lease lost, result dropped: job (\d+) \(.*?\) on queue .*? while attempt (\d+) ran here"
)
_BUGS = ("crashed in the worker loop", "; carrying on", "failed; it will run again")


class Drill(Protocol):
    """What the verdict reads of a finished drill (scripts/drills/chaos.py runs it)."""

    args: argparse.Namespace
    dsn: str
    tracker: Tracker
    incarnations: list[Incarnation]
    faults: list[Fault]
    problems: list[str]
    capacity: int
    modes: dict[int, str]
    cpu_while_down: list[float]


@dataclass
class Fault:
    kind: str
    at: float
    sid: int  # the incarnation (master pid) current when it was injected
    pids: set[int] = field(default_factory=set)
    detail: str = ""
    ended: float | None = None

    def describe(self) -> str:
        took = f" ({self.ended - self.at:.1f}s)" if self.ended else ""
        pids = f" pid {','.join(map(str, sorted(self.pids)))}" if self.pids else ""
        return f"{self.detail}{pids}{took}".strip()


@dataclass(frozen=True)
class Execution:
    job_id: int
    lease_id: int
    attempt: int
    pid: int
    planned_fail: bool
    at: float


def _rows(dsn: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def _explain(
    e: Execution, next_at: float, sid: int | None, faults: list[Fault], lost: set[tuple[int, int]]
) -> str | None:
    # The most specific evidence first: the worker itself said its result was dropped.
    if (e.job_id, e.attempt) in lost:
        return "lease_lost"
    for f in faults:
        if f.kind == "child_kill" and e.pid in f.pids and f.at >= e.at - SLACK:
            return "child_kill"
    for f in faults:
        if f.kind in MASTER_FAULTS and sid is not None and f.sid == sid:
            return f.kind
    for f in faults:
        end = f.ended or f.at
        if f.kind in DB_FAULTS and e.at - SLACK <= end and f.at <= next_at + SLACK:
            return f.kind
    return None


def _wait_leftovers(drill: Drill) -> list[str]:
    deadline = time.monotonic() + LEFTOVER_WAIT
    while True:
        left = drill.tracker.leftovers()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return [f"pid {s.pid} (session {s.sid}, group {s.pgid}, parent {s.ppid})" for s in left]


def verify(drill: Drill, ids: list[int], began: float, ended: float) -> dict[str, Any]:
    problems = list(drill.problems)
    leftovers = _wait_leftovers(drill)
    drill.tracker.stop()
    dsn = drill.dsn
    modes = drill.modes
    planned_discard = {i for i in ids if modes.get(i) == "fail"}
    table = _rows(dsn, "SELECT id, state FROM pgq.jobs")
    running = [i for i, state in table if state == "running"]
    not_done = [i for i, state in table if state != "discarded"]
    discarded = {i for i, state in table if state == "discarded"}
    completions = _rows(
        dsn, "SELECT job_id, count(*), min(lease_id), min(state) FROM chaos_completed GROUP BY 1"
    )
    completed = {job_id: lease for job_id, _, lease, _ in completions}
    twice = [job_id for job_id, n, _, _ in completions if n > 1]
    not_running = [job_id for job_id, _, _, state in completions if state != "running"]
    history_twice = _rows(
        dsn,
        "SELECT id FROM pgq.job_history WHERE outcome = 'completed' "
        "GROUP BY id HAVING count(*) > 1",
    )
    ledger = [
        Execution(*row[:5], float(row[5]))
        for row in _rows(
            dsn,
            "SELECT job_id, lease_id, attempt, pid, planned_fail, extract(epoch FROM at) "
            "FROM chaos_ledger ORDER BY job_id, at",
        )
    ]
    executed = {(e.job_id, e.lease_id) for e in ledger}
    unproven = [j for j, lease in completed.items() if (j, lease) not in executed]
    lost_jobs = [i for i in ids if i not in completed and i not in {t[0] for t in table}]
    wrongly_discarded = sorted(discarded - planned_discard)
    fail_completed = sorted(planned_discard & set(completed))

    logs = "\n".join(inc.log() for inc in drill.incarnations)
    lease_lost = {(int(a), int(b)) for a, b in _LEASE_LOST.findall(logs)}
    bugs = [line for line in logs.splitlines() if any(b in line for b in _BUGS)]

    extras: list[Execution] = []
    causes: Counter[str] = Counter()
    unexplained: list[str] = []
    for index, e in enumerate(ledger):
        if e.planned_fail or completed.get(e.job_id) == e.lease_id:
            continue
        extras.append(e)
        following = ledger[index + 1] if index + 1 < len(ledger) else None
        next_at = following.at if following and following.job_id == e.job_id else ended
        sid = drill.tracker.session_of(e.pid, e.at)
        cause = _explain(e, next_at, sid, drill.faults, lease_lost)
        causes[cause or "unexplained"] += 1
        if cause is None:
            unexplained.append(
                f"job {e.job_id} attempt {e.attempt} lease {e.lease_id} pid {e.pid} "
                f"(supervisor {sid}) at {time.strftime('%H:%M:%S', time.localtime(e.at))}"
            )
    bound = drill.capacity * max(1, len(drill.faults))

    checks = {
        "drained": not not_done,
        "none_running_after_stop": not running,
        "none_lost": not lost_jobs,
        "completed_at_most_once": not twice and not history_twice,
        "completions_were_fenced_deletes": not not_running,
        "every_completion_has_its_execution": not unproven,
        "only_planned_discards": not wrongly_discarded and not fail_completed,
        "planned_failures_discarded": planned_discard <= discarded,
        "extras_explained": not unexplained,
        "extras_bounded": len(extras) <= bound,
        "no_leftover_processes": not leftovers,
        "no_supervisor_bugs_logged": not bugs,
        "no_supervisor_trouble": not drill.problems,
    }
    details = {
        "not_done": not_done[:10],
        "running": running[:10],
        "lost": lost_jobs[:10],
        "twice": twice[:10],
        "unproven": unproven[:10],
        "wrongly_discarded": wrongly_discarded[:10],
        "unexplained": unexplained[:10],
        "leftovers": leftovers[:10],
        "bugs": bugs[:10],
    }
    problems += [f"{k}: {v}" for k, v in details.items() if v]
    duration = ended - began
    completed_ok = len(completed)
    return {
        "ok": all(checks.values()),
        "seed": drill.args.seed,
        "faults_mode": drill.args.faults,
        "jobs": len(ids),
        "completed": completed_ok,
        "discarded": len(discarded),
        "executions": len(ledger),
        "planned_failures": sum(e.planned_fail for e in ledger),
        "extra_executions": len(extras),
        "extra_by_cause": dict(causes),
        "extra_bound": bound,
        "lease_lost_logged": len(lease_lost),
        "max_cpu_while_db_down": round(max(drill.cpu_while_down, default=0.0), 3),
        "faults": dict(Counter(f.kind for f in drill.faults)),
        "incarnations": len(drill.incarnations),
        "processes_seen": len(drill.tracker.seen),
        "duration_s": round(duration, 1),
        "jobs_per_s": round(len(ids) / duration, 1) if duration > 0 else None,
        "checks": checks,
        "problems": problems[:30],
    }
