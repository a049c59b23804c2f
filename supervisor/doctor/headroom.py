"""Headroom: how much of this database's write work is the queue's, over a short sample.

The row counters of pg_stat_user_tables (inserts, updates, deletes) are read twice,
``doctor.sample`` apart, each time in its own transaction (a transaction keeps the statistics
it read first). The WAL the server wrote in between is the difference of its WAL position; it
is the whole server's, so the queue's part of it is estimated by its part of the row writes.
Backends report their counters at most once a second, so a short sample is an estimate.
"""

from __future__ import annotations

import time

from supervisor.doctor.check import Check, bytes_text, ok
from supervisor.doctor.runner import Family, Probe

# Fewer row writes than this per second are too few to judge a share by.
MIN_WRITES_PER_SECOND = 50


def family() -> Family:
    return Family("headroom", run)


def run(probe: Probe) -> list[Check]:
    queue0, other0, wal0, at0 = probe.rows("row_writes")[0]
    time.sleep(probe.thresholds.sample)
    queue1, other1, wal1, at1 = probe.rows("row_writes")[0]
    seconds = max(1e-3, (at1 - at0).total_seconds())
    return [judge(queue1 - queue0, other1 - other0, wal1 - wal0, seconds, probe.thresholds)]


def judge(queue: int, other: int, wal: int, seconds: float, thresholds: object) -> Check:
    name = "headroom.writes"
    share_limit: float = getattr(thresholds, "queue_share", 0.5)
    total = queue + other
    rate = total / seconds
    share = queue / total if total else 0.0
    detail = (
        f"over {seconds:.1f}s: {queue / seconds:,.0f} row writes/s to pgq's tables, "
        f"{other / seconds:,.0f}/s to the rest of this database"
        + (f" (the queue's share: {share:.0%})" if total else "")
        + f"; the server wrote {bytes_text(wal / seconds)}/s of WAL"
        + (f", about {bytes_text(share * wal / seconds)}/s of it the queue's" if total else "")
    )
    if rate < MIN_WRITES_PER_SECOND or share < share_limit:
        return ok(name, detail)
    if not other:
        return ok(name, detail + "; only the queue writes in this database (a database of its own)")
    return Check(
        name,
        "warn",
        detail + f": the database does more queue work than other work (doctor.queue_share: "
        f"{share_limit:.0%})",
        "bigger batches (pools.*.batch) and history.enabled: false cut the queue's writes per "
        "job; past that, the queue wants a database of its own, or a broker",
    )
