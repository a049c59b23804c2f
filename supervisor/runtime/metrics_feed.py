"""The master's services that feed its metrics server: queue figures and connection sweeps.

They run on the master's loop like every other service, so a scrape never touches the database
and never waits: it reads what these left behind.
"""

from __future__ import annotations

import time

from supervisor.observability.metrics import STATS_INTERVAL, MetricsServer
from supervisor.queue import maintenance
from supervisor.runtime.services import Host, Service

# The refresh counts every row of pgq.jobs on the master's loop (about 0.25s for a million
# rows, most of them dead letters): it may take at most this share of the loop's time.
STATS_LOOP_SHARE = 0.05


def metrics_services(host: Host, server: MetricsServer) -> list[Service]:
    return [QueueStatsRefresh(host, server), ConnectionSweep(host, server)]


class QueueStatsRefresh(Service):
    """Reads the queue table's figures for /metrics and /readyz on the master's session, so a
    scrape never touches the database."""

    name = "queue stats"

    def __init__(self, host: Host, server: MetricsServer) -> None:
        super().__init__(host, STATS_INTERVAL)
        self.server = server

    def run_once(self) -> None:
        started = time.monotonic()
        queues = self.host.db.run("queue stats", maintenance.queue_stats)
        if queues is None:
            return
        now = time.monotonic()
        # A big table slows the refresh down instead of the master's loop.
        self.interval = max(STATS_INTERVAL, (now - started) / STATS_LOOP_SHARE)
        self.server.queue_stats_read(queues, now, self.interval)


class ConnectionSweep(Service):
    """Closes metrics connections that sat too long (a client that connects and sends nothing
    must not keep a slot forever)."""

    name = "metrics connections"

    def __init__(self, host: Host, server: MetricsServer) -> None:
        super().__init__(host, 1.0, first_in=1.0)
        self.server = server

    def run_once(self) -> None:
        self.server.expire(time.monotonic())
