"""The rescuer, in slices (``slices.py``): jobs whose lease expired go back to their queue.

A lease expires when its worker stopped renewing it: a host that died, a network partition.
Once per ``rescue.interval`` across every supervisor on the database, one of them claims the
run (the maintenance record, under the rescuer's advisory lock) and moves the expired jobs back
one slice per turn of its loop: after a host with big batches died there may be many, and the
loop that renews this host's own leases must not wait behind them. A slice goes ahead only
while the run is still the latest one, so a run that outlasts its interval stops when another
supervisor starts the next, instead of running beside it.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

import psycopg

from supervisor.queue import locks, maintenance
from supervisor.services.base import Host
from supervisor.services.slices import STEP_RETRY_AFTER, SlicedService, SliceSize

log = logging.getLogger("pgq.master")

# Jobs named in the log line of a run; the count covers them all.
NAMED_IN_LOG = 10


class RescueRun:
    """One interval's rescue, claimed at ``started_at``; ``step`` moves one slice."""

    def __init__(self, host: Host, started_at: datetime) -> None:
        self.host = host
        self.started_at = started_at
        self.size = SliceSize(host.config.rescue.batch)
        self.requeued = 0
        self.discarded = 0
        self.named: list[maintenance.Moved] = []
        self.superseded = False
        self.clock = time.monotonic()
        self.slices = 0

    def step(self) -> float | None:
        self.slices += 1
        done = self.size.take(
            lambda limit: self.host.db.run("rescuer", lambda conn: self._slice(conn, limit)),
            rows=lambda done: len(done.moved),
        )
        if done is None:
            return STEP_RETRY_AFTER
        if not done.current:
            self.superseded = True
            return None
        discarded = sum(1 for m in done.moved if m.state == "discarded")
        self.requeued += len(done.moved) - discarded
        self.discarded += discarded
        self.host.counters.rescued += len(done.moved) - discarded
        self.host.counters.rescued_discarded += discarded
        self.named.extend(done.moved[: NAMED_IN_LOG - len(self.named)])
        return 0.0 if self.size.full(len(done.moved)) else None

    def _slice(self, conn: psycopg.Connection[Any], limit: int) -> maintenance.RescueSlice:
        config = self.host.config
        return maintenance.rescue_slice(
            conn,
            self.host.supervisor_id,
            self.started_at,
            limit=limit,
            max_attempts=config.max_attempts_overrides(),
            external_kinds=config.external_kinds(),
            history=config.history.enabled,
        )


class Rescuer(SlicedService[RescueRun]):
    """Starts a rescue run once per interval across the fleet, then moves one slice per turn."""

    name = "rescuer"

    def start(self) -> RescueRun | None:
        host = self.host
        started_at = host.db.run(
            "rescuer",
            lambda conn: maintenance.claim_turn(
                conn, locks.RESCUE, "rescue", host.supervisor_id, self.interval
            ),
        )
        if started_at is None:
            return None
        host.counters.rescuer_runs += 1
        log.debug("rescuer: running (supervisor %s)", host.supervisor_id)
        return RescueRun(host, started_at)

    def finish(self, run: RescueRun) -> None:
        if run.superseded:
            log.info(
                "rescuer: another supervisor started the next run; this one stops after "
                "returning %d jobs",
                run.requeued + run.discarded,
            )
        if not run.requeued and not run.discarded:
            return
        log.warning(
            "rescuer: %d jobs with expired leases returned to their queues, %d "
            "discarded (no attempts left)%s: %s",
            run.requeued,
            run.discarded,
            f" in {time.monotonic() - run.clock:.1f}s" if run.slices > 1 else "",
            ", ".join(f"{m.kind} job {m.id} ({m.queue})" for m in run.named),
        )
