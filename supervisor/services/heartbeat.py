"""The registry's heartbeat: this supervisor and its children, for `status` and the dashboard."""

from __future__ import annotations

import logging

from supervisor.services import registry
from supervisor.services.base import Service

log = logging.getLogger("pgq.master")


class Heartbeat(Service):
    """Heartbeats this supervisor and its children into the database for `status`; prunes the
    rows of supervisors that stopped heartbeating."""

    name = "registry"

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
            ),
        )
        for sid, other_host, pid in pruned or []:
            log.info(
                "registry: forgot supervisor %s (pid %s on %s): no heartbeat", sid, pid, other_host
            )
        return len(pruned or [])
