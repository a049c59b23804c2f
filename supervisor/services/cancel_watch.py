"""Cancel requests: the running (or claimed, unstarted) jobs someone cancelled are stopped."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from supervisor.queue import control, leases
from supervisor.services.base import Host, Service
from supervisor.services.leases import held_claims

log = logging.getLogger("pgq.master")


class CancelWatch(Service):
    """Stops the running jobs someone cancelled. A single-threaded child running one has its
    process group stopped, as a timeout would: told which job through its board, the child ends
    that job cancelled and exits (if it will not stop, the kill that follows ends the job through
    the requeue, which makes a job with a cancel request 'cancelled'). A threaded child's handler
    is told through ``job.cancelled()`` instead, since stopping the child would stop its other
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

    def run_once(self) -> int:
        by_worker = {c.worker_id: c for c in self.host.live_children()}
        claims, unknown = held_claims(by_worker.values())

        def look(conn: psycopg.Connection[Any]) -> list[control.CancelRequest]:
            found = leases.held_cancel_requests(conn, claims)
            return found + (control.cancel_requests(conn, unknown) if unknown else [])

        requests = self.host.db.run("cancel watch", look) if claims or unknown else []
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
        return len(requests or [])
