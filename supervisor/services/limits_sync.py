"""Writes this supervisor's `limits:` into the database, where every claim enforces them.

Runs once at start and once after each reload (a reload builds the services afresh), and again
only while the write has not succeeded (a database outage at start). While a file with limits
has not been written yet, the master forks no child (``settled``): a child that claimed first
would start jobs its limits forbid, whatever kept the write out (an outage, a lock held on
pgq.queue_limits past the master's statement timeout, a role without rights on it). Each failed
try is logged, with what the children wait for, and tried again every RETRY_EVERY seconds. Until
issue 30 a write refused for another reason than an outage let children start without the
limits until a retry succeeded. It writes the limits of
the queues this supervisor's pools serve, and lifts those of served queues the file leaves
unlimited; the last supervisor to write a queue's limits wins, so a rolling deploy moves the
fleet to the new limits as it goes. A queue whose limits changed gets its idle children woken:
a child waiting for a slot or a token under the old limit claims again at once.
"""

from __future__ import annotations

import logging
import math
import time

from supervisor.config import QueueLimits
from supervisor.config.limits import limit_rows
from supervisor.queue import limits as limits_db
from supervisor.services.base import Host, Service

log = logging.getLogger("pgq.master")

RETRY_EVERY = 5.0
WARN_EVERY = 60.0  # a write that keeps failing is said again this often


class LimitSync(Service):
    name = "limits"

    def __init__(self, host: Host) -> None:
        super().__init__(host, RETRY_EVERY)
        self.done = False
        # Children may be forked: the limits are written, or there are none to write.
        self.settled = not host.config.limits
        self.warned = -math.inf

    def next_run(self, now: float) -> float:
        # Written: never due again (a reload builds a new one). Not a due time left in the
        # past: the master's wait sleeps until the earliest one, and would not sleep at all.
        return math.inf if self.done else now + self.interval

    def run_once(self) -> None:
        config = self.host.config
        served = {queue for pool in config.pools.values() for queue in pool.queues}
        changed = self.host.db.run(
            "limits",
            lambda conn: limits_db.write_limits(
                conn, limit_rows(config), served, self.host.supervisor_id
            ),
        )
        if changed is None:
            if not self.host.db.in_outage and time.monotonic() - self.warned >= WARN_EVERY:
                self.warned = time.monotonic()
                log.error(
                    "the limits of %s could not be written to pgq.queue_limits (the error is "
                    "logged above); no child starts before they are, since it would claim "
                    "without them; the write is tried again every %.0fs",
                    ", ".join(sorted(config.limits)),
                    RETRY_EVERY,
                )
            return  # try again in RETRY_EVERY
        self.done = self.settled = True
        for queue, change in changed:
            limit = config.limits.get(queue)
            log.info(
                "limits of queue %s %s%s",
                queue,
                change,
                f": {describe(limit)}" if limit is not None else "",
                extra={"queue": queue},
            )
            self.host.wake_queue(queue)


def describe(limit: QueueLimits) -> str:
    parts = []
    if limit.concurrency is not None:
        parts.append(f"concurrency {limit.concurrency}")
    if limit.rate is not None:
        parts.append(f"rate {limit.rate.text} (burst {limit.rate.burst})")
    tenant = limit.per_tenant
    if tenant is not None and tenant.concurrency is not None:
        parts.append(f"per tenant concurrency {tenant.concurrency}")
    if tenant is not None and tenant.rate is not None:
        parts.append(f"per tenant rate {tenant.rate.text} (burst {tenant.rate.burst})")
    return ", ".join(parts)
