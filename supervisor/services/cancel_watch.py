"""Cancel requests: the running (or claimed, unstarted) jobs someone cancelled are stopped."""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

import psycopg

from supervisor.queue import control, leases
from supervisor.services.base import Host, Service
from supervisor.services.leases import held_claims

log = logging.getLogger("pgq.master")

# The signal that tells a child "a job you run was cancelled: look at your board". The child
# decides (supervisor/child/process.py), since only it knows which job is in hand when it lands.
CANCEL_SIGNAL = signal.SIGUSR1
# How long a job asked to stop may keep running before its child is stopped whole (a handler
# that swallowed JobCancelled, or one stuck in native code where no signal raises).
STOP_GRACE = 5.0


class CancelWatch(Service):
    """Stops the running jobs someone cancelled. A single-threaded child running one is sent
    CANCEL_SIGNAL, after the job is named on its board: the child ends the job in hand cancelled
    if it is that job, and leaves (the master then ends what the handler left in its process
    group); a child that has moved on to another job meanwhile ignores it. The master used to
    read the board, then stop the child's whole process group: a child that had moved on between
    the two was stopped on an innocent job. A job still running STOP_GRACE seconds after it was
    first asked has its child stopped whole, as a timeout would. A threaded child's handler is
    told through ``job.cancelled()`` instead, since stopping the child would stop its other
    threads' jobs too. A job claimed in a batch but not started yet is named on the board, and
    the child ends it cancelled instead of starting it.

    It reads the claims the children hold by primary key (their boards, as the lease renewal
    does), not "every running job of these workers with a cancel request": while a snapshot
    holds the xmin horizon, a path through the running jobs' indexes reads the entries of every
    job that ran since (issue 30)."""

    name = "cancel watch"

    def __init__(self, host: Host, interval: float) -> None:
        super().__init__(host, interval)
        self.told: set[int] = set()  # threaded jobs already logged as asked to stop
        self.asked: dict[int, float] = {}  # running jobs asked to stop: when first asked

    def run_once(self) -> int:
        by_worker = {c.worker_id: c for c in self.host.live_children()}
        claims, unknown = held_claims(by_worker.values())

        def look(conn: psycopg.Connection[Any]) -> list[control.CancelRequest]:
            found = leases.held_cancel_requests(conn, claims)
            return found + (control.cancel_requests(conn, unknown) if unknown else [])

        requests = self.host.db.run("cancel watch", look) if claims or unknown else []
        still_told: set[int] = set()
        still_asked: dict[int, float] = {}
        now = time.monotonic()
        for request in requests or []:
            child = by_worker.get(request.worker)
            if child is None or child.kill_reason:
                continue
            # Named first, so that whichever job the child holds when it reads its board is
            # judged by the board, not by what the master read a moment before.
            child.board.cancel_job(request.id)
            if request.id not in {job.job_id for job in child.board.running_jobs()}:
                # Claimed in a batch, not started: the child reads its board before starting a
                # job and ends this one cancelled without running it.
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
            first = self.asked.get(request.id, now)
            still_asked[request.id] = first
            if now - first >= STOP_GRACE:
                self.host.kill_child(
                    child, f"{what}; its handler did not stop within {STOP_GRACE:.0f}s"
                )
                continue
            if first == now:
                self.host.counters.cancel_stops += 1
                log.info(
                    "%s; asking %s#%s (pid %s) to stop it",
                    what,
                    child.pool,
                    child.slot,
                    child.pid,
                    extra={"job_id": request.id, "kind": request.kind, "pool": child.pool},
                )
            child.signal(CANCEL_SIGNAL)  # again at each look: one that landed between jobs
        self.told = still_told
        self.asked = still_asked
        return len(requests or [])
