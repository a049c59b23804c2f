"""Replication: is this server the primary, which standbys stream from it, and how far behind.

The queue needs the primary: a supervisor connected to a standby cannot claim, enqueue or
settle (every statement fails read-only), which is what a single-host DSN naming a demoted
primary gets after a failover. On the primary, each standby's lag is what an asynchronous
failover to it would lose now (the commits not yet replayed there); a synchronous standby
that is not connected makes every commit wait. A standby's xmin through hot_standby_feedback
holds this server's horizon (the horizon family names it as a holder). ``judge`` is pure.
"""

from __future__ import annotations

from typing import Any

from supervisor.doctor.check import Check, bytes_text, ok
from supervisor.doctor.runner import Family
from supervisor.views.text import age, safe

# A standby further behind than this is worth a warning: a failover to it now loses (async)
# or waits for (sync) that much. 16 MiB is also the drill's Patroni maximum_lag_on_failover.
LAG_WARN_BYTES = 16 * 1024 * 1024
LAG_WARN_SECONDS = 10.0


def family() -> Family:
    return Family("replication", lambda probe: judge(probe.document("replication")))


def judge(doc: dict[str, Any] | None) -> list[Check]:
    if not doc:
        return []
    if doc.get("in_recovery"):
        return [_standby(doc)]
    return [_primary(doc), *(_lag(s) for s in doc.get("standbys") or [])]


def _standby(doc: dict[str, Any]) -> Check:
    receiver = doc.get("receiver") or {}
    source = (
        f"streaming from {safe(str(receiver.get('sender_host')))}:{receiver.get('sender_port')}"
        f" ({receiver.get('status')})"
        if receiver
        else "no WAL receiver running"
    )
    delay = doc.get("replay_delay_seconds")
    return Check(
        "replication.role",
        "fail",
        f"this server is a standby (in recovery), {source}; last transaction replayed "
        + (f"{age(float(delay))} ago" if delay is not None else "never")
        + f", {bytes_text(doc.get('unreplayed_bytes'))} received but not replayed; "
        f"hot_standby_feedback: {doc.get('hot_standby_feedback')}: claims, enqueues and "
        "settlements fail here (read-only)",
        "point database.dsn at the primary: after a failover, a multi-host DSN with "
        "target_session_attrs=read-write finds it",
    )


def _primary(doc: dict[str, Any]) -> Check:
    standbys = doc.get("standbys") or []
    names = doc.get("synchronous_standby_names") or ""
    synced = [s for s in standbys if s.get("sync_state") in ("sync", "quorum")]
    if not standbys:
        detail = "primary; no standby streams from it (a failover has nothing to promote)"
        if names:
            return Check(
                "replication.role",
                "fail",
                f"{detail}, yet synchronous_standby_names is {names!r}: every commit waits",
                "start the synchronous standby, or clear synchronous_standby_names",
            )
        return ok("replication.role", detail)
    mode = (
        f"synchronous ({len(synced)} of {len(standbys)} standbys, "
        f"synchronous_commit {doc.get('synchronous_commit')}): a commit returns once a "
        "standby has it"
        if synced
        else "asynchronous: a failover loses the commits a standby has not yet received"
    )
    if names and not synced:
        return Check(
            "replication.role",
            "fail",
            f"primary with {len(standbys)} standbys, none synchronous, yet "
            f"synchronous_standby_names is {names!r}: every commit waits",
            "see why the synchronous standby is not streaming (pg_stat_replication)",
        )
    return ok("replication.role", f"primary with {len(standbys)} standbys; {mode}")


def _lag(s: dict[str, Any]) -> Check:
    name = f"replication.standby.{safe(s.get('application_name') or '?')}"
    behind = int(s.get("replay_lag_bytes") or 0)
    seconds = float(s.get("replay_lag_seconds") or 0.0)
    feedback = (
        f"xmin {s['backend_xmin']} through hot_standby_feedback ({s.get('xid_age')} "
        "transactions old"
        + (f", kept in slot {safe(s['slot_name'])}" if s.get("slot_name") else "")
        + ")"
        if s.get("backend_xmin")
        else "no hot_standby_feedback xmin"
    )
    detail = (
        f"from {safe(s.get('client') or '?')}: {s.get('state')}, {s.get('sync_state')}, "
        f"{bytes_text(behind)} not yet replayed (replay lag {seconds:.2f}s), {feedback}"
    )
    if s.get("state") != "streaming":
        return Check(name, "warn", detail, "a standby that is not streaming falls behind")
    if behind >= LAG_WARN_BYTES or seconds >= LAG_WARN_SECONDS:
        return Check(
            name,
            "warn",
            detail
            + ": a failover to it now "
            + ("waits for it" if s.get("sync_state") in ("sync", "quorum") else "loses that"),
            "see what slows its replay (its I/O, a long query with hot_standby_feedback off "
            "cancelled or delayed by max_standby_streaming_delay)",
        )
    return ok(name, detail)
