"""Vacuum and bloat of pgq.jobs: dead rows, autovacuum, sizes against live content.

Sizes come from the catalog and the statistics views, not from reading the table: the live
content is estimated from n_live_tup and pg_stats' average row width (at the table's fillfactor
of 70%), the claim index's from the number of available jobs it holds (a count the index
answers). With pgstattuple installed, its approximate figures are added.
"""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor.config import DoctorConfig
from supervisor.doctor.check import Check, bytes_text, graded, ok
from supervisor.doctor.runner import Family, Probe
from supervisor.views.text import age

DEAD_FAIL_FACTOR = 10
# Bloat is judged only past these sizes: a small table is cheap to read whatever its shape.
MIN_TABLE_BYTES = 8 * 2**20
MIN_INDEX_BYTES = 1 * 2**20
TABLE_BLOAT = 4.0  # table size against the estimated size of its live rows
# A btree entry of the claim index takes about 40 bytes (key, tid, line pointer) on a page
# filled to 90%; this many bytes per live entry means most of the index is dead or empty.
INDEX_BYTES_PER_ENTRY = 400
ROW_OVERHEAD = 28  # tuple header and line pointer
FILLFACTOR = 0.7


def family() -> Family:
    return Family("vacuum", run)


def run(probe: Probe) -> list[Check]:
    doc = probe.document("vacuum")
    available = int(probe.rows("available_jobs")[0][0])
    checks = [
        dead_rows(doc, probe.thresholds),
        autovacuum(doc),
        statistics(doc),
        bloat(doc, available),
        service(doc, probe),
    ]
    if doc.get("pgstattuple"):
        checks.append(_pgstattuple(probe))
    return checks


def dead_rows(doc: dict[str, Any], t: DoctorConfig) -> Check:
    name = "vacuum.dead_rows"
    dead, live = int(doc.get("dead_rows") or 0), int(doc.get("live_rows") or 0)
    since = doc.get("vacuum_seconds_ago")
    last = f"last vacuum {age(since)} ago" if since is not None else "never vacuumed"
    detail = f"pgq.jobs: {dead:,} dead rows, {live:,} live (estimates); {last}"
    status = graded(dead, t.dead_rows, DEAD_FAIL_FACTOR * t.dead_rows)
    if status == "ok":
        return ok(name, detail)
    return Check(
        name,
        status,
        detail + f" (doctor.dead_rows: {t.dead_rows:,}); every claim steps over dead entries",
        "first make sure nothing holds the horizon (horizon.*), then VACUUM (VERBOSE) pgq.jobs "
        "and read its 'dead but not yet removable' line; if autovacuum cannot keep up, lower "
        "the vacuum service's vacuum.dead_rows or raise autovacuum_max_workers",
    )


def autovacuum(doc: dict[str, Any]) -> Check:
    name = "vacuum.autovacuum"
    options = [str(o) for o in doc.get("reloptions") or []]
    problems = []
    if doc.get("autovacuum") != "on":
        problems.append("autovacuum is off for the whole server")
    if doc.get("track_counts") != "on":
        problems.append("track_counts is off, so autovacuum never learns of dead rows")
    if "autovacuum_enabled=false" in options or "autovacuum_enabled=off" in options:
        problems.append("autovacuum_enabled=false on pgq.jobs")
    settings = ", ".join(options) or "none"
    counts = (
        f"{doc.get('autovacuum_count') or 0} autovacuums and {doc.get('vacuum_count') or 0} "
        f"vacuums since the statistics were reset; autovacuum_naptime {doc.get('naptime')}"
    )
    if not problems:
        return ok(name, f"settings on pgq.jobs: {settings}; {counts}")
    return Check(
        name,
        "fail",
        "; ".join(problems) + f" (settings on pgq.jobs: {settings})",
        "ALTER TABLE pgq.jobs RESET (autovacuum_enabled); turn autovacuum and track_counts "
        "on in postgresql.conf (a queue table dies without them)",
    )


# Below this many rows any plan reads the table quickly, statistics or not.
STATISTICS_MIN_ROWS = 10_000
# Statistics gathered when the table held a tenth of its rows or fewer are stale.
STATISTICS_GROWTH = 10


def statistics(doc: dict[str, Any]) -> Check:
    """Whether the planner knows the table's size: the claim's plan (the tenant walk's probes,
    the pick) is chosen from the statistics, and on a table never analyzed, or analyzed while a
    fraction of its size, it can scan and sort the whole queue at every step of the walk."""
    name = "vacuum.statistics"
    live = int(doc.get("live_rows") or 0)
    changed = int(doc.get("changed_since_analyze") or 0)
    at_analyze = max(0.0, float(doc.get("rows_at_analyze") or 0))
    since = doc.get("analyze_seconds_ago")
    last = f"last analyzed {age(since)} ago" if since is not None else "never analyzed"
    detail = f"pgq.jobs: {live:,} live rows, {changed:,} changed since the statistics; {last}"
    stale = not doc.get("analyzed") or live > STATISTICS_GROWTH * max(at_analyze, 1.0)
    if live < STATISTICS_MIN_ROWS or not stale:
        return ok(name, detail)
    return Check(
        name,
        "warn",
        detail + f" (planned for about {at_analyze:,.0f} rows); the claim's plan is chosen "
        "from these statistics and may read the whole queue at every claim",
        "ANALYZE pgq.jobs (autovacuum's autoanalyze does it on its own once it runs; after a "
        "bulk load, do it yourself)",
    )


def bloat(doc: dict[str, Any], available: int) -> Check:
    name = "vacuum.bloat"
    table_bytes = int(doc.get("table_bytes") or 0)
    live = int(doc.get("live_rows") or 0)
    width = float(doc.get("row_width") or 0) or 150.0  # before the first ANALYZE
    expected = live * (width + ROW_OVERHEAD) / FILLFACTOR
    indexes = doc.get("claim_index") or []
    index_bytes = sum(int(i.get("bytes") or 0) for i in indexes)
    per_entry = index_bytes / max(1, available)
    found = []
    if table_bytes >= MIN_TABLE_BYTES and table_bytes > TABLE_BLOAT * max(expected, 8192):
        found.append(
            f"pgq.jobs takes {bytes_text(table_bytes)} for about {bytes_text(expected)} of "
            "live rows"
        )
    if index_bytes >= MIN_INDEX_BYTES and per_entry > INDEX_BYTES_PER_ENTRY:
        found.append(
            f"the claim index takes {bytes_text(index_bytes)} for {available:,} available jobs "
            f"({per_entry:,.0f} bytes each, about 40 when compact)"
        )
    detail = (
        f"pgq.jobs {bytes_text(table_bytes)} (live rows about {bytes_text(expected)}); claim index "
        f"{bytes_text(index_bytes)} for {available:,} available jobs"
    )
    if not indexes:
        return Check(
            name,
            "fail",
            "pgq.jobs has no claim index (jobs_claim): every claim reads the table",
            "pgq-supervisor migrate does not recreate it; create it again as in "
            "sql/migrations/0001_jobs.sql, with CREATE INDEX CONCURRENTLY",
        )
    if not found:
        return ok(name, detail)
    return Check(
        name,
        "warn",
        "; ".join(found),
        "once nothing holds the horizon: REINDEX INDEX CONCURRENTLY pgq.jobs_claim for the "
        "index; for the table, the queue refills its free pages (vacuums keep them, "
        "vacuum_truncate = false: giving them back locks out every claim), VACUUM (TRUNCATE) "
        "pgq.jobs at a quiet hour gives back the empty ones at its end, pg_repack (online) or "
        "VACUUM FULL pgq.jobs (locks it) the rest",
    )


def service(doc: dict[str, Any], probe: Probe) -> Check:
    name = "vacuum.service"
    runs = doc.get("service_runs") or {}
    count = int(runs.get("last_hour") or 0)
    cfg = probe.config.vacuum
    if not cfg.enabled:
        return ok(name, "the supervisor's vacuum service is off (vacuum.enabled: false)")
    if count:
        return ok(
            name,
            f"the vacuum service ran {count} time(s) in the last hour, the last "
            f"{age(runs.get('last_seconds_ago'))} ago (it runs past {cfg.dead_rows:,} dead rows)",
        )
    return ok(
        name,
        f"the vacuum service did not run in the last hour (it runs once pgq.jobs holds "
        f"{cfg.dead_rows:,} dead rows; a role that does not own the table leaves it to "
        "autovacuum)",
    )


def _pgstattuple(probe: Probe) -> Check:
    name = "vacuum.pgstattuple"
    try:
        with probe.conn.transaction():
            doc = probe.document("pgstattuple")
    except psycopg.errors.InsufficientPrivilege:
        return Check(
            name,
            "warn",
            "pgstattuple is installed, but this role may not use it",
            "GRANT pg_stat_scan_tables TO this role (or run the doctor as the table's owner)",
        )
    except psycopg.errors.UndefinedFunction:
        return ok(name, "pgstattuple is installed in a schema outside the search_path")
    return ok(
        name,
        f"pgstattuple: pgq.jobs {doc.get('dead_percent') or 0:.1f}% dead, "
        f"{doc.get('free_percent') or 0:.1f}% free; claim index leaf density "
        f"{doc.get('leaf_density') or 0:.0f}%",
    )
