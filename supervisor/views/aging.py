"""What priority aging makes of a waiting job (`jobs show`): the levels it has risen, its
effective priority and the cap, computed as the claim does (sql/claim/aging.sql)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from supervisor.queue.queries import query
from supervisor.views.text import age


def effective_priority(priority: int, waited: float, every: float, top: int) -> int:
    """least(priority + floor(waited / every), top), as the claim computes it."""
    return min(priority + math.floor(max(waited, 0.0) / every), top)


def job_aging(conn: Any, job_id: int, every: float, now: datetime) -> dict[str, Any] | None:
    """The aging of job ``job_id`` in a queue aging every ``every`` seconds (0: none), or None
    when it does not wait to be claimed."""
    if every <= 0:
        return None
    row = conn.execute(query("job_aging"), {"id": job_id}).fetchone()
    if row is None:
        return None
    priority, run_at, top = row
    waited = (now - run_at).total_seconds()
    effective = effective_priority(priority, waited, every, top)
    return {
        "every_seconds": every,
        "levels": effective - priority,
        "effective_priority": effective,
        "cap": top,
        "waited_seconds": round(max(waited, 0.0), 3),
    }


def aging_lines(aging: dict[str, Any] | None) -> list[str]:
    if aging is None:
        return []
    every = age(aging["every_seconds"])
    line = (
        f"  aging       +{aging['levels']} level(s) (one per {every} waited): effective "
        f"priority {aging['effective_priority']}"
    )
    if aging["effective_priority"] >= aging["cap"]:
        line += f", at its tenant's highest waiting priority ({aging['cap']}): oldest first"
    else:
        line += f", capped at {aging['cap']}"
    return [line]
