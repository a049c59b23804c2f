"""Lease renewal: the master extends its children's leases, so handlers need no heartbeat."""

from __future__ import annotations

from supervisor.queue import jobs as jobs_api
from supervisor.services.base import Service


class LeaseRenewal(Service):
    """Extends the leases of every job held by a live child of this master, in one statement,
    so a CPU-bound handler needs no heartbeat thread and its lease never runs out while its
    process lives."""

    name = "lease renewal"

    def run_once(self) -> int:
        workers = [c.worker_id for c in self.host.live_children()]
        if not workers:
            return 0
        renewed = self.host.db.run(
            "lease renewal",
            lambda conn: jobs_api.renew_worker_leases(
                conn, workers, lease_seconds=self.host.config.lease.duration
            ),
        )
        return renewed or 0
