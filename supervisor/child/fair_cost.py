"""Fair share by cost (`tenants: {QUEUE: {fairness: cost}}`, docs/job-cost.md): the tenants of
such a queue share it by the CPU seconds their jobs use, not by their number of jobs.

The claim already gives each tenant, per visit of the rotation, as many jobs as its weight
(supervisor.child.weights). So the child keeps, per tenant of such a queue, the mean CPU
seconds of the jobs it ran for it (a moving average, from the cost meter around each attempt),
and sets each tenant's weight in proportion to its configured weight over that mean: a tenant
whose jobs cost ten times as much gets a tenth of the jobs per visit, the same CPU. Nothing
changes in the claim statement, and nothing is read from the database: each child learns from
the attempts it runs, which for a shared queue are a sample of every tenant's jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

from supervisor.child.weights import TenantRotation
from supervisor.queue.costs import Cost
from supervisor.queue.job import Job

# The costliest tenant's jobs per visit: the others get proportionally more, so the ratio
# survives rounding to whole jobs (a 1.5x cheaper tenant gets 3 against 2, not 1 against 1).
COSTLIEST_GETS = 2
MAX_WEIGHT = 1000
SMOOTHING = 0.2  # weight of the newest attempt in a tenant's mean
# A job that barely used the CPU (it waited on I/O) counts as this much, so a tenant of such
# jobs does not get every job of the queue.
FLOOR = 0.001


class CostFairness:
    def __init__(
        self,
        rotation: TenantRotation,
        configured: Mapping[str, Mapping[str, int]],
        queues: frozenset[str],
    ) -> None:
        self.rotation = rotation
        self.configured = {q: dict(configured.get(q, {})) for q in queues}
        self.queues = queues
        self.mean: dict[str, dict[str, float]] = {q: {} for q in queues}
        self.lock = threading.Lock()  # handler threads report costs side by side

    def observe(self, job: Job, cost: Cost) -> None:
        if job.queue not in self.queues:
            return
        tenant = job.tenant or ""
        seconds = max(cost.cpu_seconds, FLOOR)
        with self.lock:
            means = self.mean[job.queue]
            old = means.get(tenant)
            means[tenant] = seconds if old is None else old + SMOOTHING * (seconds - old)
            weights = self.weights(job.queue)
        # One assignment: the claim (on the main thread) reads the whole mapping at once.
        self.rotation.weights[job.queue] = weights

    def weights(self, queue: str) -> dict[str, int]:
        means, configured = self.mean[queue], self.configured[queue]
        costliest = max(means.values())
        found = dict(configured)
        for tenant, mean in means.items():
            share = configured.get(tenant, 1) * COSTLIEST_GETS * costliest / mean
            found[tenant] = max(1, min(MAX_WEIGHT, round(share)))
        return found
