"""Lease renewal: the master extends its children's leases, so handlers need no heartbeat.

By key: each child shows on its board the claims it holds (claimed, running, or finished with
the outcome not yet written: supervisor.child.parts.publish_held), and the master renews those
through the primary key (sql/leases.sql, renew_held_leases). The statement it replaced renewed
"every running job of these workers", which reads the partial index of running jobs; while a
snapshot holds the xmin horizon, that index keeps the entry of every job that ran since, and
over a 600 s hold at 3,000 jobs/s the renewal ran into the master's 1 s statement timeout every
turn for six minutes (issue 30): a job longer than its lease would have lost it while its worker
lived, and been run twice. By key, its cost is the held jobs' own versions, whatever the hold.
A child whose claims do not fit its board is renewed by worker identity, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg

from supervisor.queue import jobs as jobs_api
from supervisor.queue import leases
from supervisor.services.base import ChildRecord, Service


def held_claims(children: Iterable[ChildRecord]) -> tuple[list[leases.Claim], list[str]]:
    """The claims the children hold (their boards, and the job each thread runs), and the
    workers whose claims are not known that way (more than their board's room)."""
    claims: dict[int, int] = {}
    unknown: list[str] = []
    for child in children:
        held = child.board.held()
        if held is None:
            unknown.append(child.worker_id)
            continue
        claims.update(held)
        claims.update((job.job_id, job.lease_id) for job in child.board.running_jobs())
    return sorted(claims.items()), unknown


class LeaseRenewal(Service):
    """Extends the leases of every job held by a live child of this master, in one round trip,
    so a CPU-bound handler needs no heartbeat thread and its lease never runs out while its
    process lives."""

    name = "lease renewal"

    def run_once(self) -> int:
        claims, unknown = held_claims(self.host.live_children())
        if not claims and not unknown:
            return 0
        seconds = self.host.config.lease.duration
        # A lease claimed or renewed in the last half interval is left for the next turn: a
        # busy host's claims mostly finish before it, and each rewrite is a row version.
        fresh_for = max(0.0, seconds - self.interval / 2)

        def renew(conn: psycopg.Connection[Any]) -> int:
            renewed = leases.renew_held(conn, claims, lease_seconds=seconds, fresh_for=fresh_for)
            if unknown:
                renewed += jobs_api.renew_worker_leases(conn, unknown, lease_seconds=seconds)
            return renewed

        renewed = self.host.db.run("lease renewal", renew)
        return renewed or 0
