"""The master's periodic services, all of one shape.

Each service has a name, an interval and a ``run_once``; the master calls ``run`` on the ones
that are due. A failure is logged and retried at the next interval, never fatal: the loop that
owns the children must outlive any database hiccup. Services are silent when nothing changed.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from supervisor.master.children import Child
from supervisor.observability.view import MasterCounters
from supervisor.queue import control, maintenance
from supervisor.queue import jobs as jobs_api
from supervisor.services import registry
from supervisor.services.database import MasterDatabase
from supervisor.shared import memory

if TYPE_CHECKING:
    from supervisor.config import Config

log = logging.getLogger("pgq.master")


class Host(Protocol):
    """What the services need from the master."""

    db: MasterDatabase
    config: Config
    dsn: str
    supervisor_id: str
    host_name: str
    counters: MasterCounters
    kinds: list[str]

    def live_children(self) -> list[Child]: ...

    def kill_child(self, child: Child, reason: str) -> None: ...

    def wake_queue(self, queue: str) -> None: ...


class Service:
    name = "service"

    def __init__(self, host: Host, interval: float, *, first_in: float = 0.0) -> None:
        self.host = host
        self.interval = interval
        self.next_due = time.monotonic() + first_in

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def run(self, now: float) -> None:
        try:
            self.run_once()
        except Exception:
            log.exception("%s failed; it will run again in %.0fs", self.name, self.interval)
        finally:
            self.next_due = self.next_run(now)

    def next_run(self, now: float) -> float:
        return now + self.interval

    def run_once(self) -> None:
        raise NotImplementedError


class LeaseRenewal(Service):
    """Extends the leases of every job held by a live child of this master, in one statement,
    so a CPU-bound handler needs no heartbeat thread and its lease never runs out while its
    process lives."""

    name = "lease renewal"

    def run_once(self) -> None:
        workers = [c.worker_id for c in self.host.live_children()]
        if workers:
            self.host.db.run(
                "lease renewal",
                lambda conn: jobs_api.renew_worker_leases(
                    conn, workers, lease_seconds=self.host.config.lease.duration
                ),
            )


class MemoryWatch(Service):
    """The hard memory limit: a child (with its subprocesses) above it is killed, whatever it
    is doing; the soft limit is the child's own business between jobs."""

    name = "memory watch"

    def run_once(self) -> None:
        pools = self.host.config.pools
        for child in self.host.live_children():
            pool = pools.get(child.pool)
            limit = pool.memory_hard_limit if pool else None
            if limit is None or child.kill_reason:
                continue
            used = memory.group_uss(child.pid)
            if used > limit:
                self.host.counters.hard_memory_kills += 1
                self.host.counters.recycle(child.pool, "hard")
                self.host.kill_child(
                    child, f"memory {used >> 20} MiB is above the hard limit of {limit >> 20} MiB"
                )


class TimeoutWatch(Service):
    """A job past its kind's timeout gets its child's process group stopped (TERM, then KILL
    after a grace period); the job is then retried."""

    name = "timeout watch"

    def run_once(self) -> None:
        now = time.monotonic()
        kinds = self.host.kinds
        for child in self.host.live_children():
            if child.kill_reason:
                continue
            for job in child.board.running_jobs():
                if job.deadline is not None and now >= job.deadline:
                    kind = kinds[job.kind_index] if 0 <= job.kind_index < len(kinds) else "?"
                    self.host.counters.timeouts += 1
                    self.host.kill_child(
                        child,
                        f"job {job.job_id} ({kind}) exceeded its timeout of "
                        f"{job.deadline - job.started:g}s",
                    )
                    break


class CancelWatch(Service):
    """Stops the running jobs someone cancelled. A single-threaded child running one has its
    process group stopped, as a timeout would: told which job through its board, the child ends
    that job cancelled and exits (if it will not stop, the kill that follows ends the job through
    the requeue, which makes a job with a cancel request 'cancelled'). A threaded child's handler
    is told through ``job.cancelled()`` instead, since stopping the child would stop its other
    threads' jobs too. A job claimed in a batch but not started yet is named on the board, and
    the child ends it cancelled instead of starting it."""

    name = "cancel watch"

    def __init__(self, host: Host, interval: float) -> None:
        super().__init__(host, interval)
        self.told: set[int] = set()  # threaded jobs already logged as asked to stop

    def run_once(self) -> None:
        by_worker = {c.worker_id: c for c in self.host.live_children()}
        requests = self.host.db.run(
            "cancel watch", lambda conn: control.cancel_requests(conn, list(by_worker))
        )
        still_told: set[int] = set()
        for request in requests or []:
            child = by_worker.get(request.worker)
            if child is None or child.kill_reason:
                continue
            if request.id not in {job.job_id for job in child.board.running_jobs()}:
                # Claimed in a batch, not started: the child reads its board before starting a
                # job and ends this one cancelled without running it.
                child.board.cancel_job(request.id)
                continue
            what = f"job {request.id} ({request.kind}) on queue {request.queue} was cancelled"
            if child.board.threads > 1:
                still_told.add(request.id)
                if request.id not in self.told:
                    log.info(
                        "%s; %s#%s runs it on a thread: its handler sees job.cancelled()",
                        what,
                        child.pool,
                        child.slot,
                        extra={"job_id": request.id, "kind": request.kind, "pool": child.pool},
                    )
                continue
            self.host.counters.cancel_stops += 1
            child.board.cancel_job(request.id)
            self.host.kill_child(child, what)
        self.told = still_told


class Registry(Service):
    """Heartbeats this supervisor and its children into the database for `status`; prunes the
    rows of supervisors that stopped heartbeating."""

    name = "registry"

    def run_once(self) -> None:
        host = self.host
        rows = [registry.worker_row(c, host.kinds) for c in host.live_children()]
        pruned = host.db.run(
            "registry heartbeat",
            lambda conn: registry.heartbeat(
                conn, host.supervisor_id, host.host_name, host.config.path, rows
            ),
        )
        for sid, other_host, pid in pruned or []:
            log.info(
                "registry: forgot supervisor %s (pid %s on %s): no heartbeat", sid, pid, other_host
            )


@dataclass
class PendingRequeue:
    worker_id: str
    reason: str
    pool: str
    # Jobs the child was running when it died (from its board) that spend their attempt; its
    # other jobs get it back: those only claimed, and those interrupted (running beside the
    # job that hung, when the master stopped the child for a timeout).
    spent: list[int] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)
    # Jobs that ran and finished there but whose outcome it never wrote: they get their attempt
    # back (a success must not push a job to the dead letters) and run again.
    unrecorded: list[int] = field(default_factory=list)
    since: float = field(default_factory=time.monotonic)


class Requeuer(Service):
    """Gives back the jobs of children that died. Normally done at once when the child is
    reaped; a requeue that failed (database down) waits here and is retried."""

    name = "requeue"

    def __init__(self, host: Host, interval: float) -> None:
        super().__init__(host, interval)
        self.pending: list[PendingRequeue] = []

    def add(self, item: PendingRequeue) -> None:
        self.pending.append(item)
        self.run_once()

    def run_once(self) -> None:
        still: list[PendingRequeue] = []
        for item in self.pending:
            if not self._requeue(item):
                still.append(item)
        self.pending = still

    def _requeue(self, item: PendingRequeue) -> bool:
        config = self.host.config
        moved = self.host.db.run(
            f"requeue of {item.worker_id}'s jobs",
            lambda conn: maintenance.requeue_worker(
                conn,
                item.worker_id,
                item.reason,
                spent=item.spent,
                max_attempts=config.max_attempts_overrides(),
                history=config.history.enabled,
            ),
        )
        if moved is None:
            return False
        discarded = [m for m in moved if m.state == "discarded"]
        self.host.counters.requeued_after_crash += len(moved) - len(discarded)
        self.host.counters.discarded_after_crash += len(discarded)
        for m in moved:
            fields = {
                "job_id": m.id,
                "kind": m.kind,
                "queue": m.queue,
                "attempt": m.attempts,
                "pool": item.pool,
            }
            if m.id in item.interrupted:
                log.warning(
                    "job %s (%s) on queue %s given back without spending an attempt "
                    "(interrupted while running beside a job that hung): %s",
                    m.id,
                    m.kind,
                    m.queue,
                    item.reason,
                    extra=fields,
                )
            elif m.id in item.unrecorded and m.id not in item.spent:
                log.warning(
                    "job %s (%s) on queue %s ran, but its outcome was not recorded before its "
                    "worker stopped; given back without spending an attempt, it runs again: %s",
                    m.id,
                    m.kind,
                    m.queue,
                    item.reason,
                    extra=fields,
                )
            elif m.id not in item.spent:
                log.info(
                    "job %s (%s) on queue %s given back without spending an attempt "
                    "(claimed, not running): %s",
                    m.id,
                    m.kind,
                    m.queue,
                    item.reason,
                    extra=fields,
                )
            elif m.state == "discarded":
                log.error(
                    "job %s (%s) on queue %s discarded after attempt %s (no attempts left): %s",
                    m.id,
                    m.kind,
                    m.queue,
                    m.attempts,
                    item.reason,
                    extra=fields,
                )
            else:
                log.warning(
                    "job %s (%s) on queue %s requeued after attempt %s: %s",
                    m.id,
                    m.kind,
                    m.queue,
                    m.attempts,
                    item.reason,
                    extra=fields,
                )
        return True
