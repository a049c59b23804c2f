"""What priority aging makes of a waiting job (`jobs show`, the dashboard's job page): the levels
it has risen, its effective priority and the cap, computed as the claim does
(sql/claim/aging.sql)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from supervisor.queue.queries import query
from supervisor.views.text import age

# The statement both readers run (sql/history.sql); its row goes to ``aging_of``.
AGING_QUERY = "job_aging"


def effective_priority(priority: int, waited: float, every: float, top: int) -> int:
    """least(priority + floor(waited / every), top), as the claim computes it."""
    return min(priority + math.floor(max(waited, 0.0) / every), top)


def job_aging(conn: Any, job_id: int, every: float, now: datetime) -> dict[str, Any] | None:
    """The aging of job ``job_id`` in a queue aging every ``every`` seconds (0: none), or None
    when it does not wait to be claimed."""
    if every <= 0:
        return None
    return aging_of(conn.execute(query(AGING_QUERY), {"id": job_id}).fetchone(), every, now)


def aging_of(row: Any, every: float, now: datetime) -> dict[str, Any] | None:
    """The aging from a ``job_aging`` row (None: the job does not wait to be claimed)."""
    if row is None or every <= 0:
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


def aging_words(aging: dict[str, Any]) -> str:
    """The aging in the words `jobs show` prints after its label."""
    every = age(aging["every_seconds"])
    line = (
        f"+{aging['levels']} level(s) (one per {every} waited): effective "
        f"priority {aging['effective_priority']}"
    )
    if aging["effective_priority"] >= aging["cap"]:
        line += f", at its tenant's highest waiting priority ({aging['cap']}): oldest first"
    else:
        line += f", capped at {aging['cap']}"
    return line


def aging_lines(aging: dict[str, Any] | None) -> list[str]:
    if aging is None:
        return []
    return [f"  aging       {aging_words(aging)}"]
