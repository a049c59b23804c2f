"""The audit log of the dashboard's actions: one structured log line per action taken (or
failed), saying who (the authenticated user, "token", or "anonymous" on the loopback), from
where (the client's address, or the one a trusted proxy forwarded), what (the action and its
target) and which jobs it changed.

Log lines rather than a table: the dashboard may run on a read-only role (``read_only``), an
audit write must never make an action fail or need a migration, and an operator's logs are
where an audit trail is collected, kept and searched (with ``log.format: json`` each line
carries an ``audit`` object). A table would also be writable by the very role being audited.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request

from supervisor.web.actions import Done

log = logging.getLogger("pgq.web.audit")

# Job ids written in full up to this many; a bulk replay's line says how many more.
IDS_SHOWN = 1000


def who(request: Request) -> str:
    return str(request.scope.get("state", {}).get("who", "anonymous"))


def record(
    request: Request,
    action: str,
    fields: Mapping[str, str],
    *,
    done: Done | None = None,
    failed: str | None = None,
) -> None:
    params = {k: v for k, v in {**request.path_params, **fields}.items() if k != "rest"}
    client = request.client.host if request.client else "?"
    jobs = list(done.jobs) if done else []
    entry: dict[str, Any] = {
        "action": action,
        "who": who(request),
        "client": client,
        "target": params,
        "job_ids": jobs[:IDS_SHOWN],
        "jobs": len(jobs),
        "outcome": "failed" if failed else "done",
    }
    target = " ".join(f"{k}={v}" for k, v in sorted(params.items())) or "-"
    said = failed if failed else done.said if done else ""
    log.info(
        "dashboard action %s (%s) by %s from %s: %s%s",
        action,
        target,
        entry["who"],
        client,
        "FAILED: " if failed else "",
        said,
        extra={"audit": entry},
    )
