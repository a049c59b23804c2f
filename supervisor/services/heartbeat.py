"""The registry's heartbeat: this supervisor and its children, for `status` and the dashboard."""

from __future__ import annotations

import logging
from collections.abc import Callable

from supervisor.services import registry
from supervisor.services.base import Host, Service

log = logging.getLogger("pgq.master")


class Heartbeat(Service):
    """Heartbeats this supervisor and its children into the database for `status`; prunes the
    rows of supervisors that stopped heartbeating."""

    name = "registry"

    def __init__(
        self, host: Host, interval: float, *, scaling: Callable[[], str] | None = None
    ) -> None:
        super().__init__(host, interval)
        self.scaling = scaling  # the pools' sizes and why, as JSON, published with each beat

    def run_once(self) -> int:
        host = self.host
        rows = [registry.worker_row(c, host.kinds) for c in host.live_children()]
        pruned = host.db.run(
            "registry heartbeat",
            lambda conn: registry.heartbeat(
                conn,
                host.supervisor_id,
                host.host_name,
                host.config.path,
                rows,
                host.config.external_kinds(),
                self.scaling() if self.scaling is not None else None,
            ),
        )
        for sid, other_host, pid in pruned or []:
            log.info(
                "registry: forgot supervisor %s (pid %s on %s): no heartbeat", sid, pid, other_host
            )
        return len(pruned or [])
