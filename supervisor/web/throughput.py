"""Jobs finished per queue and minute over the last hour, kept up to date incrementally.

Counting an hour of pgq.job_history at every refresh would cost what the hour wrote (millions
of rows on a busy queue). The web process counts the hour once, then at each refresh recounts
only the minutes since its last count plus a margin for transactions that commit late (a row's
finished_at is the time of its statement, not of its commit), and forgets minutes older than an
hour. Each refresh therefore reads a few minutes of history, whatever the hour held.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

MINUTES = 60
OUTCOMES = ("completed", "discarded")
# Minutes recounted before the last count: a row committed later than this after its
# finished_at (a transaction open for minutes) is missed by the chart, never counted twice.
LATE_COMMIT_MARGIN = timedelta(minutes=2)


def minute_of(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


class Throughput:
    def __init__(self, sql: str) -> None:
        self._sql = sql
        # minute -> (queue, outcome) -> jobs
        self._minutes: dict[datetime, dict[tuple[str, str], int]] = {}
        self._counted_to: datetime | None = None

    async def refresh(self, conn: AsyncConnection[Any], now: datetime) -> None:
        first = minute_of(now) - timedelta(minutes=MINUTES - 1)
        since = first
        if self._counted_to is not None:
            since = max(first, minute_of(self._counted_to - LATE_COMMIT_MARGIN))
        counted: dict[datetime, dict[tuple[str, str], int]] = defaultdict(dict)
        async with conn.cursor() as cur:
            await cur.execute(self._sql, {"since": since})
            for queue, outcome, minute, jobs in await cur.fetchall():
                counted[minute][(queue, outcome)] = int(jobs)
        kept = {m: c for m, c in self._minutes.items() if first <= m < since}
        self._minutes = {**kept, **counted}
        self._counted_to = now

    def per_minute(self, now: datetime) -> dict[str, dict[str, list[int]]]:
        """queue -> outcome -> jobs per minute, oldest minute first, the current one last."""
        first = minute_of(now) - timedelta(minutes=MINUTES - 1)
        found: dict[str, dict[str, list[int]]] = {}
        for minute, counts in self._minutes.items():
            index = round((minute - first).total_seconds() / 60)
            if not 0 <= index < MINUTES:
                continue
            for (queue, outcome), jobs in counts.items():
                if outcome in OUTCOMES:
                    series = found.setdefault(queue, {o: [0] * MINUTES for o in OUTCOMES})
                    series[outcome][index] += jobs
        return found
