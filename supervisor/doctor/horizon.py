"""The xmin horizon: who keeps VACUUM from removing pgq.jobs' dead rows, and for how long.

Every consumed job leaves a dead row and a dead entry at the head of the claim index; VACUUM
may remove them only once no snapshot could still see them. One old snapshot anywhere in the
database (a report in REPEATABLE READ, a session idle in a transaction, a prepared transaction,
a replication slot, a standby's feedback) holds that horizon for every table, and each claim
steps over more and more dead entries. ``judge`` turns the ``horizon`` document (sql/doctor.sql)
into checks; it is pure, so the master, `status` and the dashboard judge alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg

from supervisor.config import DoctorConfig
from supervisor.doctor.check import Check, bytes_text, graded, ok
from supervisor.doctor.runner import Family
from supervisor.doctor.sql import doctor_query
from supervisor.views.text import age, safe

# Past horizon_age a holder warns; past this many times it, it fails.
FAIL_FACTOR = 5


@dataclass(frozen=True)
class Horizon:
    """The short form fed to metrics and /readyz: how long the oldest snapshot or transaction
    of this database has been held, by which backend, and the dead rows pgq.jobs holds."""

    age_seconds: float
    holder_pid: int | None
    dead_rows: int
    findings: tuple[Check, ...]

    @property
    def culprits(self) -> list[Check]:
        """What is wrong (the visibility note is not: it says what the doctor cannot see)."""
        return [c for c in self.findings if not c.passed and c.name != "horizon.visibility"]


def visible(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The backends holding snapshots whose state and times this role may see."""
    return [b for b in doc.get("backends") or [] if b.get("visible")]


def summarize(doc: dict[str, Any], thresholds: DoctorConfig) -> Horizon:
    backends = visible(doc)
    holder = backends[0] if backends else None
    jobs = doc.get("jobs") or {}
    return Horizon(
        age_seconds=_held(holder) if holder else 0.0,
        holder_pid=holder["pid"] if holder else None,
        dead_rows=int(jobs.get("dead_rows") or 0),
        findings=tuple(judge(doc, thresholds)),
    )


def judge(doc: dict[str, Any], thresholds: DoctorConfig) -> list[Check]:
    return [
        _backends(doc, thresholds),
        _prepared(doc, thresholds),
        _slots(doc, thresholds),
        _standbys(doc),
        _visibility(doc),
    ]


def family() -> Family:
    return Family("horizon", lambda probe: judge(probe.document("horizon"), probe.thresholds))


def read_culprits(conn: psycopg.Connection[Any], thresholds: DoctorConfig) -> list[Check]:
    """What is wrong with the horizon, read on the caller's connection (`status` reads it
    inside its own snapshot, which the query leaves out)."""
    row = conn.execute(doctor_query("horizon")).fetchone()
    if row is None:
        return []
    doc = json.loads(row[0]) if isinstance(row[0], str) else row[0]
    return summarize(doc, thresholds).culprits


def _held(backend: dict[str, Any]) -> float:
    """How long it has held the horizon: its transaction's age (a lone statement's, in
    autocommit)."""
    return float(backend.get("xact_seconds") or backend.get("query_seconds") or 0.0)


def describe_backend(b: dict[str, Any]) -> str:
    who = f"pid {b['pid']}"
    parts = []
    if b.get("user"):
        parts.append(f"user {safe(b['user'])}")
    parts.append(f"application {safe(b.get('application_name') or '')!r}")
    if b.get("client"):
        parts.append(f"from {safe(b['client'])}")
    state = b.get("state") or b.get("backend_type") or "?"
    what = (
        f"transaction id {b['backend_xid']}"
        if b.get("backend_xid")
        else f"a snapshot (xmin {b.get('backend_xmin')})"
    )
    text = f"{who} ({', '.join(parts)}) {state} for {age(_held(b))}, holding {what}"
    if b.get("query_start") and b.get("query"):
        text += f"; its last query, started {age(b.get('query_seconds'))} ago: "
        text += safe(" ".join(str(b["query"]).split())[:120])
    return text


def _fix_for(b: dict[str, Any]) -> str:
    pid = b["pid"]
    if str(b.get("state") or "").startswith("idle in transaction"):
        return (
            f"end that transaction: COMMIT or ROLLBACK in the application, or "
            f"SELECT pg_terminate_backend({pid}); set idle_in_transaction_session_timeout "
            "so a forgotten transaction ends by itself"
        )
    return (
        f"if it may stop: SELECT pg_cancel_backend({pid}) (pg_terminate_backend({pid}) if "
        "that is not enough); long reports belong on a replica, or in READ COMMITTED in short "
        "statements, not in one long REPEATABLE READ transaction"
    )


def _backends(doc: dict[str, Any], t: DoctorConfig) -> Check:
    name = "horizon.backends"
    everyone = doc.get("backends") or []
    backends = visible(doc)
    dead = int((doc.get("jobs") or {}).get("dead_rows") or 0)
    unseen = (
        f"; the oldest xmin belongs to pid {everyone[0]['pid']}, whose age this role cannot "
        "see (horizon.visibility)"
        if everyone and not everyone[0].get("visible")
        else ""
    )
    if not backends:
        return ok(name, "no session of this database holds a snapshot or a transaction" + unseen)
    holder = backends[0]
    held = _held(holder)
    status = graded(held, t.horizon_age, FAIL_FACTOR * t.horizon_age)
    if status == "ok":
        return ok(
            name,
            f"the oldest snapshot or transaction is {age(held)} old (pid {holder['pid']})" + unseen,
        )
    detail = f"the xmin horizon is held by {describe_backend(holder)}"
    if len(backends) > 1:
        detail += f"; {len(backends) - 1} more hold snapshots too (pids "
        detail += ", ".join(str(b["pid"]) for b in backends[1:]) + ")"
    detail += f"; pgq.jobs holds {dead:,} dead rows that VACUUM cannot remove while it lasts"
    return Check(name, status, detail, _fix_for(holder))


def _prepared(doc: dict[str, Any], t: DoctorConfig) -> Check:
    name = "horizon.prepared"
    prepared = doc.get("prepared") or []
    if not prepared:
        return ok(name, "no prepared transactions")
    oldest = prepared[0]
    seconds = float(oldest.get("seconds") or 0)
    status = graded(seconds, t.horizon_age, FAIL_FACTOR * t.horizon_age)
    detail = (
        f"prepared transaction {safe(oldest['gid'])!r} (owner {safe(oldest['owner'])}, database "
        f"{safe(oldest['database'])}) has waited {age(seconds)} for COMMIT PREPARED"
        + (f"; {len(prepared) - 1} more" if len(prepared) > 1 else "")
    )
    if status == "ok":
        return ok(name, detail)
    gid = str(oldest["gid"]).replace("'", "''")
    return Check(
        name,
        status,
        detail + "; it holds the horizon (and its locks) until it is resolved",
        f"finish it from the transaction manager that prepared it, or by hand: COMMIT PREPARED "
        f"'{gid}' or ROLLBACK PREPARED '{gid}'",
    )


def _slots(doc: dict[str, Any], t: DoctorConfig) -> Check:
    name = "horizon.slots"
    slots = doc.get("slots") or []
    if not slots:
        return ok(name, "no replication slots")
    bad: list[tuple[str, dict[str, Any]]] = []
    for s in slots:
        retained = int(s.get("wal_retained") or 0)
        holds_xmin = s.get("xmin") is not None
        if not s.get("active") and (retained >= t.slot_wal or holds_xmin):
            bad.append(("fail", s))
        elif retained >= t.slot_wal:
            bad.append(("warn", s))
    if not bad:
        listed = ", ".join(
            f"{safe(s['name'])} ({'active' if s.get('active') else 'inactive'}, "
            f"{bytes_text(s.get('wal_retained'))} of WAL)"
            for s in slots
        )
        return ok(name, f"replication slots: {listed}")
    status = "fail" if any(level == "fail" for level, _ in bad) else "warn"
    worst = next(s for level, s in bad if level == status)
    activity = f"active, pid {worst.get('active_pid')}" if worst.get("active") else "inactive"
    detail = (
        f"replication slot {safe(worst['name'])!r} ({worst['type']}"
        + (f", database {safe(worst['database'])}" if worst.get("database") else "")
        + f", {activity}) "
        + f"keeps {bytes_text(worst.get('wal_retained'))} of WAL"
        + (f" and holds xmin {worst['xmin']}" if worst.get("xmin") else "")
        + (f", catalog_xmin {worst['catalog_xmin']}" if worst.get("catalog_xmin") else "")
        + (f" (wal_status {worst['wal_status']})" if worst.get("wal_status") else "")
    )
    if len(bad) > 1:
        detail += f"; {len(bad) - 1} more slot(s) too: " + ", ".join(
            safe(s["name"]) for _, s in bad if s is not worst
        )
    slot = str(worst["name"]).replace("'", "''")
    fix = (
        f"if nothing will consume it again: SELECT pg_drop_replication_slot('{slot}'); "
        "otherwise bring its consumer (standby, CDC connector) back; max_slot_wal_keep_size "
        "caps what a forgotten slot may keep"
        if not worst.get("active")
        else "its consumer is falling behind: look at the standby or connector that reads it"
    )
    return Check(name, status, detail, fix)


def _standbys(doc: dict[str, Any]) -> Check:
    name = "horizon.standbys"
    standbys = doc.get("standbys") or []
    feedback = doc.get("hot_standby_feedback")
    if doc.get("in_recovery") and feedback == "on":
        return ok(
            name,
            "this server is a standby with hot_standby_feedback on: its long queries hold the "
            "primary's horizon, and the primary's pgq.jobs bloats with them",
        )
    if not standbys:
        return ok(name, f"no standby sends an xmin (hot_standby_feedback here: {feedback})")
    listed = ", ".join(
        f"{safe(s.get('application_name') or '')!r} from {safe(s.get('client') or '?')} "
        f"(xmin {s.get('backend_xmin')}, {s.get('xid_age')} transactions old)"
        for s in standbys
    )
    return ok(
        name,
        f"standbys with hot_standby_feedback hold this server's horizon for their queries: "
        f"{listed}",
    )


def _visibility(doc: dict[str, Any]) -> Check:
    name = "horizon.visibility"
    hidden = doc.get("hidden") or []
    if doc.get("can_read_all_stats") or not hidden:
        return ok(name, "every session of this database is visible to this role")
    role = safe(doc.get("role") or "")
    backends = doc.get("backends") or []
    oldest = ""
    if backends and not backends[0].get("visible"):
        b = backends[0]
        oldest = (
            f"the oldest xmin of this database ({b.get('xid_age')} transactions old) is held by "
            f"pid {b['pid']} (user {safe(b.get('user'))}, application "
            f"{safe(b.get('application_name') or '')!r}), for how long this role cannot see; "
        )
    users: dict[str, list[str]] = {}
    for h in hidden:
        users.setdefault(safe(h.get("user") or "?"), []).append(
            f"pid {h['pid']} {safe(h.get('application_name') or '')!r}"
        )
    listed = "; ".join(f"{user}: {', '.join(pids)}" for user, pids in users.items())
    return Check(
        name,
        "warn",
        oldest + f"cannot see the states, times and queries of {len(hidden)} session(s) of other "
        f"roles ({listed}): without pg_read_all_stats, PostgreSQL shows {role} only its own "
        "sessions, so one of those may hold the horizon unseen",
        f"GRANT pg_read_all_stats TO {role}; (or pg_monitor, which includes it)",
    )
