"""A claimed job: the row a claim hands to a worker, with the fence (lease_id) it holds."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    queue: str
    kind: str
    args: dict[str, Any]
    priority: int
    run_at: datetime
    attempts: int
    max_attempts: int
    lease_id: int
    lease_until: datetime
    created_at: datetime

    @property
    def sort_key(self) -> tuple[int, datetime, int]:
        return (-self.priority, self.run_at, self.id)
