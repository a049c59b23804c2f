"""The master's lease work by key (sql/leases.sql): renewal and the cancel watch through the
primary key, for the claims its children say they hold; the rescue one window of expiry times
at a time. None of them walks the entries a held xmin horizon keeps of the jobs that ran."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from supervisor.queue import locks
from supervisor.queue.control import CancelRequest
from supervisor.queue.maintenance import Moved, _policy_params, _try_xact_lock, run_is_current
from supervisor.queue.queries import query

# A claim held by a child: (job id, lease id), the fence its writes carry.
Claim = tuple[int, int]


def _by_key(
    conn: psycopg.Connection[Any], name: str, params: Mapping[str, Any]
) -> list[tuple[Any, ...]]:
    """Run one of sql/leases.sql's statements under by_key_plan's settings, prepared (so its
    generic plan is made once per session), in the caller's transaction."""
    conn.execute(query("by_key_plan"))
    # Behind a transaction pooler nothing is prepared (the connection says so).
    prepare = None if conn.prepare_threshold is None else True
    return conn.execute(query(name), params, prepare=prepare).fetchall()


def _pairs(claims: Sequence[Claim]) -> dict[str, list[int]]:
    return {"ids": [c[0] for c in claims], "lease_ids": [c[1] for c in claims]}


def renew_held(
    conn: psycopg.Connection[Any],
    claims: Sequence[Claim],
    *,
    lease_seconds: float,
    fresh_for: float = 0.0,
) -> int:
    """Extend the leases of these claims (fenced) that have at most ``fresh_for`` seconds left;
    how many were renewed."""
    if not claims:
        return 0
    params = {**_pairs(claims), "lease_seconds": lease_seconds, "fresh_for": fresh_for}
    with conn.transaction():
        return len(_by_key(conn, "renew_held_leases", params))


def held_cancel_requests(
    conn: psycopg.Connection[Any], claims: Sequence[Claim]
) -> list[CancelRequest]:
    """Of these claims, the jobs someone asked to cancel."""
    if not claims:
        return []
    with conn.transaction():
        rows = _by_key(conn, "held_cancel_requests", _pairs(claims))
    return [CancelRequest(*row) for row in rows]


@dataclass(frozen=True)
class RescueWindow:
    """One window of a rescue run: the jobs it moved, where the next window starts (None: the
    run is no longer the latest, it stops), and whether it came back full (the rest of the
    window is left for the next one, from the last expiry it took)."""

    moved: list[Moved]
    next_since: datetime | None
    full: bool


def rescue_start(conn: psycopg.Connection[Any]) -> tuple[datetime | None, datetime | None]:
    """Where the last windows stopped (None before the first windowed run) and, only then, the
    earliest running lease."""
    row = conn.execute(query("rescue_scanned_through")).fetchone()
    if row is not None and row[0] is not None:
        return row[0], None
    earliest = conn.execute(query("earliest_running_lease")).fetchone()
    return None, earliest[0] if earliest else None


def rescue_window(
    conn: psycopg.Connection[Any],
    run_by: str,
    started_at: datetime,
    since: datetime,
    until: datetime,
    *,
    limit: int,
    max_attempts: Mapping[str, int] | None = None,
    external_kinds: Sequence[str] = (),
    history: bool = False,
) -> RescueWindow:
    """Rescue the leases that expired in [since, until), at most ``limit``, in one transaction
    under the rescuer's advisory lock and only while the run ``run_by`` claimed at
    ``started_at`` is the latest; the mark moves to where the window stopped."""
    with conn.transaction():
        if not _try_xact_lock(conn, locks.RESCUE) or not run_is_current(
            conn, "rescue", run_by, started_at
        ):
            return RescueWindow([], None, False)
        rows = _by_key(
            conn,
            "rescue_window",
            {
                "since": since,
                "until": until,
                "limit": limit,
                "history": history,
                "external_kinds": list(external_kinds),
                **_policy_params(max_attempts),
            },
        )
        full = len(rows) >= limit
        # A full window goes on from its last expiry (renewals give many jobs the same one);
        # the rest of the window was looked at.
        reached = rows[-1][5] if full else until
        conn.execute(
            query("rescue_scanned"),
            {"through": reached, "run_by": run_by, "started_at": started_at},
        )
    return RescueWindow([Moved(*row[:5]) for row in rows], reached, full)
