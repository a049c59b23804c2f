"""Pressure on the queue now: the NOTIFY queue, connections, lock waits, leases, the backlog."""

from __future__ import annotations

from typing import Any

from supervisor.config import DoctorConfig
from supervisor.doctor.check import Check, graded, ok
from supervisor.doctor.runner import Family, Probe
from supervisor.views.text import age, safe

NOTIFY_FAIL = 0.5  # PostgreSQL itself warns from half full; at full, every NOTIFY fails
CONNECTIONS_WARN = 0.8
CONNECTIONS_FAIL = 0.95
LOCK_WAIT = 1.0  # seconds a session may wait for a lock on pgq's tables before it is named
OLDEST_DUE_FAIL_FACTOR = 6


def family() -> Family:
    return Family("pressure", run)


def run(probe: Probe) -> list[Check]:
    renew_every = probe.config.lease.renew_every
    doc = probe.document("pressure", {"lease_margin": renew_every})
    return [
        *judge(doc, probe.thresholds, renew_every),
        oldest_due(probe.document("oldest_due"), probe.thresholds),
    ]


def judge(doc: dict[str, Any], thresholds: DoctorConfig, renew_every: float) -> list[Check]:
    """The cheap pressure checks (the dashboard's too). ``renew_every``: how often leases are
    renewed (lease.renew_every); a running job with less lease left than that missed its
    renewal."""
    return [
        notify(doc, thresholds),
        connections(doc),
        locks(doc),
        leases(doc, renew_every),
    ]


def notify(doc: dict[str, Any], thresholds: DoctorConfig) -> Check:
    name = "pressure.notify"
    usage = float(doc.get("notify_usage") or 0)
    warn_at = thresholds.notify_queue
    status = graded(usage, warn_at, max(warn_at, NOTIFY_FAIL))
    detail = f"the NOTIFY queue is {usage:.3%} full"
    if status == "ok":
        return ok(name, detail)
    suspects = doc.get("notify_suspects") or []
    if suspects:
        s = suspects[0]
        why = (
            "is not reading what it is sent (waiting to write to its client)"
            if s.get("wait_event") == "ClientWrite"
            else f"is {s.get('state')} for {age(s.get('seconds'))} and reads nothing until it ends"
        )
        detail += (
            f" (doctor.notify_queue: {warn_at:.3%}): the queue drains only as fast as its "
            f"slowest listener, and pid {s['pid']} (user {safe(s.get('user'))}, application "
            f"{safe(s.get('application_name') or '')!r}, database {safe(s.get('database'))}) "
            f"{why}"
        )
        if len(suspects) > 1:
            detail += "; other candidates: pids " + ", ".join(str(x["pid"]) for x in suspects[1:])
        fix = (
            f"make that listener read its notifications or end its transaction; if it is "
            f"stuck: SELECT pg_terminate_backend({s['pid']}). When the queue fills, every "
            "enqueue fails"
        )
    else:
        detail += f" (doctor.notify_queue: {warn_at:.3%}); no listener in sight stands out"
        fix = "find the session that LISTENs but does not read (pg_stat_activity, ClientWrite)"
    return Check(name, status, detail, fix)


def connections(doc: dict[str, Any]) -> Check:
    name = "pressure.connections"
    limit = int(doc.get("max_connections") or 0) - int(doc.get("reserved") or 0)
    used = int(doc.get("connections") or 0)
    ours = doc.get("ours") or []
    by_host = ", ".join(f"{safe(o['host'])}: {o['sessions']}" for o in ours) or "none"
    share = used / max(1, limit)
    detail = (
        f"{used} of {limit} client connections in use ({share:.0%}; max_connections "
        f"{doc.get('max_connections')}); ours (application_name pgq-supervisor*) by host: "
        f"{by_host}"
    )
    status = graded(share, CONNECTIONS_WARN, CONNECTIONS_FAIL)
    if status == "ok":
        return ok(name, detail)
    return Check(
        name,
        status,
        detail,
        "fewer processes or threads per pool, a pooler (database.pooler: transaction), or a "
        "higher max_connections",
    )


def locks(doc: dict[str, Any]) -> Check:
    name = "pressure.locks"
    waits = [w for w in doc.get("lock_waits") or [] if float(w.get("seconds") or 0) >= LOCK_WAIT]
    if not waits:
        return ok(name, "no session waits for a lock on pgq's tables")
    w = waits[0]
    blockers = w.get("blockers") or []
    by = (
        ", ".join(
            f"pid {b['pid']} ({safe(b.get('application_name') or '')!r}, {b.get('state')}, in a "
            f"transaction for {age(b.get('xact_seconds'))})"
            for b in blockers
        )
        or "a session this role cannot see"
    )
    first = blockers[0]["pid"] if blockers else None
    return Check(
        name,
        "warn",
        f"pid {w['pid']} ({safe(w.get('application_name') or '')!r}) has waited "
        f"{age(w.get('seconds'))} for {w.get('mode')} on pgq.{safe(w.get('table'))}, blocked "
        f"by {by}" + (f"; {len(waits) - 1} more waiting" if len(waits) > 1 else ""),
        f"end the blocking transaction (SELECT pg_terminate_backend({first}))"
        if first
        else "find the blocker with pg_blocking_pids() as a role that sees every session",
    )


def leases(doc: dict[str, Any], renew_every: float) -> Check:
    name = "pressure.leases"
    lease = doc.get("leases") or {}
    running = int(lease.get("running") or 0)
    expired, expiring = int(lease.get("expired") or 0), int(lease.get("expiring") or 0)
    detail = (
        f"{running} running jobs; {expiring} with less than lease.renew_every "
        f"({age(renew_every)}) of lease left, {expired} past their lease"
    )
    if not expired and not expiring:
        return ok(name, detail)
    return Check(
        name,
        "warn",
        detail + ": their supervisor is not renewing (stuck, cut off from the database, or gone)",
        "see `status` for the supervisors' heartbeats; expired jobs go back to their queue "
        "at the next rescue (rescue.interval)",
    )


def oldest_due(oldest: dict[str, Any] | None, thresholds: DoctorConfig) -> Check:
    name = "pressure.oldest_due"
    if not oldest:
        return ok(name, "no job is due and waiting")
    seconds = float(oldest.get("seconds") or 0)
    warn_at = thresholds.oldest_due
    status = graded(seconds, warn_at, OLDEST_DUE_FAIL_FACTOR * warn_at)
    detail = (
        f"the oldest due job (id {oldest['id']}, queue {safe(oldest['queue'])}) has waited "
        f"{age(seconds)}"
    )
    if status == "ok":
        return ok(name, detail)
    return Check(
        name,
        status,
        detail + f" (doctor.oldest_due: {age(warn_at)})",
        "more children for that queue's pool, a higher weight for it, or find what slows the "
        "claims (claim.*, horizon.*); `status` shows whether the queue is paused or unserved",
    )
