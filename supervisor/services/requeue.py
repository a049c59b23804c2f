"""Requeues: the jobs of children that died, given back (retried while the database is away)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from supervisor.queue import maintenance
from supervisor.services.base import Host, Service

log = logging.getLogger("pgq.master")


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

    def run_once(self) -> int:
        still: list[PendingRequeue] = []
        for item in self.pending:
            if not self._requeue(item):
                still.append(item)
        given_back = len(self.pending) - len(still)
        self.pending = still
        return given_back

    def _requeue(self, item: PendingRequeue) -> bool:
        config = self.host.config
        moved = self.host.db.run(
            f"requeue of {item.worker_id}'s jobs",
            lambda conn: maintenance.requeue_worker(
                conn,
                item.worker_id,
                item.reason,
                spent=item.spent,
                started=[*item.interrupted, *item.unrecorded],
                max_attempts=config.max_attempts_overrides(),
                external_kinds=config.external_kinds(),
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
            level, what = _said(m, item)
            log.log(
                level,
                "job %s (%s) on queue %s %s: %s",
                m.id,
                m.kind,
                m.queue,
                what,
                item.reason,
                extra=fields,
            )
        return True


def _said(m: maintenance.Moved, item: PendingRequeue) -> tuple[int, str]:
    """What the log says of one job given back: how loud, and what became of it."""
    if m.id in item.interrupted:
        return logging.WARNING, (
            "given back without spending an attempt "
            "(interrupted while running beside a job that hung)"
        )
    if m.id in item.unrecorded and m.id not in item.spent:
        return logging.WARNING, (
            "ran, but its outcome was not recorded before its worker stopped; "
            "given back without spending an attempt, it runs again"
        )
    if m.id not in item.spent:
        return logging.INFO, "given back without spending an attempt (claimed, not running)"
    if m.state == "discarded":
        return logging.ERROR, f"discarded after attempt {m.attempts} (no attempts left)"
    return logging.WARNING, f"requeued after attempt {m.attempts}"
