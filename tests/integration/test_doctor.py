"""`doctor` against real PostgreSQL: each condition provoked for real, its culprit named, and
the same check back to ok once the cause is gone."""

from __future__ import annotations

import dataclasses
import json
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from supervisor import NewJob, enqueue_many
from supervisor.config import Config, parse_config
from supervisor.doctor import claim, headroom, horizon, pressure, vacuum
from supervisor.doctor.check import Check
from supervisor.doctor.runner import Family, Probe, bound, run_families
from supervisor.queue.queries import sql_dir
from tests.integration.operator_helpers import Cli, Restore
from tests.lifecycle.harness import wait_for

CONFIG = """
handlers:
  render_pdf: tests.handlers:noop
pools:
  pdf:
    processes: 1
    batch: 4
    queues: {pdf: 1}
doctor:
  horizon_age: 1s
  dead_rows: 500
  slot_wal: 1MiB
  notify_queue: 0.1%
  statement_timeout: 2s
  sample: 100ms
"""


def config(**thresholds: Any) -> Config:
    cfg = parse_config(textwrap.dedent(CONFIG), source="doctor.yaml")
    return dataclasses.replace(cfg, doctor=dataclasses.replace(cfg.doctor, **thresholds))


def run(dsn: str, *families: Family, **thresholds: Any) -> dict[str, Check]:
    """The checks of ``families`` as the doctor runs them, by name."""
    cfg = config(**thresholds)
    with psycopg.connect(dsn, autocommit=True) as conn:
        bound(conn, cfg.doctor.statement_timeout)
        return {c.name: c for c in run_families(Probe(conn, cfg), list(families))}


def session(dsn: str, application_name: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, application_name=application_name)


def held_by(dsn: str, pid: int) -> Callable[[], Check | None]:
    def check() -> Check | None:
        found = run(dsn, horizon.family())["horizon.backends"]
        return found if not found.passed and f"pid {pid} " in found.detail else None

    return check


def test_a_session_idle_in_a_transaction_is_named_with_its_fix(dsn: str) -> None:
    with session(dsn, "forgotten-tx") as forgotten:
        forgotten.execute("BEGIN")
        forgotten.execute("SELECT pg_current_xact_id()")  # it wrote, or as good as
        pid = forgotten.info.backend_pid
        found = wait_for(held_by(dsn, pid), 20, what="the idle transaction named")
        assert "'forgotten-tx'" in found.detail
        assert "idle in transaction" in found.detail
        assert "transaction id" in found.detail
        assert f"pg_terminate_backend({pid})" in found.fix
        assert "idle_in_transaction_session_timeout" in found.fix
        forgotten.execute("ROLLBACK")
        assert run(dsn, horizon.family())["horizon.backends"].passed


def test_a_repeatable_read_reader_is_named_and_ok_once_cancelled(dsn: str) -> None:
    reader = session(dsn, "nightly-report")
    pid = reader.info.backend_pid
    done = threading.Event()
    errors: list[BaseException] = []

    def report() -> None:
        try:
            with reader.transaction():
                reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                reader.execute("SELECT count(*), pg_sleep(60) FROM pgq.jobs")
        except psycopg.errors.QueryCanceled as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=report)
    thread.start()
    try:
        found = wait_for(held_by(dsn, pid), 20, what="the reader named")
        assert "'nightly-report'" in found.detail
        assert "active" in found.detail
        assert "a snapshot (xmin" in found.detail
        assert "pg_sleep(60)" in found.detail  # the start of its query
        assert f"pg_cancel_backend({pid})" in found.fix
    finally:
        reader.cancel_safe()
        done.wait(10)
        thread.join(10)
        reader.close()
    assert errors, "the reader was cancelled"
    assert run(dsn, horizon.family())["horizon.backends"].passed


def test_an_unused_replication_slot_keeping_wal_is_named(dsn: str) -> None:
    slot = f"pgq_doctor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        # A physical slot reserving WAL from now on: works on wal_level replica.
        conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (slot,))
        try:
            # The slot keeps WAL from the last checkpoint on: the threshold is 2 MiB above that.
            (kept,) = conn.execute(RETAINED, (slot,)).fetchone() or (0,)
            limit = int(kept) + 2 * MIB
            before = run(dsn, horizon.family(), slot_wal=limit)["horizon.slots"]
            assert before.passed and slot in before.detail, before

            def retaining() -> Check | None:
                enqueue_many(conn, [NewJob("render_pdf", {"pad": "x" * 200}) for _ in range(2000)])
                found = run(dsn, horizon.family(), slot_wal=limit)["horizon.slots"]
                return None if found.passed else found

            found = wait_for(retaining, 30, interval=0, what="the slot to keep 2 MiB more WAL")
            assert found.status == "fail", found
            assert f"replication slot '{slot}' (physical" in found.detail
            assert "inactive" in found.detail
            assert f"pg_drop_replication_slot('{slot}')" in found.fix
        finally:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    after = run(dsn, horizon.family(), slot_wal=limit)["horizon.slots"]
    assert after.passed and slot not in after.detail


RETAINED = (
    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn) FROM pg_replication_slots "
    "WHERE slot_name = %s"
)
MIB = 2**20


def _backlog(conn: psycopg.Connection[Any], n: int) -> None:
    enqueue_many(conn, [NewJob("render_pdf", {"n": i}, queue="pdf") for i in range(n)])
    conn.execute("ANALYZE pgq.jobs")


def test_a_claim_forced_off_its_index_is_named(dsn: str, conn: psycopg.Connection[Any]) -> None:
    _backlog(conn, 3000)
    good = run(dsn, claim.family())["claim.plan[pdf]"]
    assert good.passed, good
    assert "jobs_claim" in good.detail and "claimed 4 of 4" in good.detail
    # The explain was rolled back: nothing claimed, no row changed.
    assert conn.execute("SELECT count(*) FROM pgq.jobs WHERE state <> 'available'").fetchone() == (
        0,
    )

    # The claim's index (or indexes: jobs_claim*), dropped and later made again as they were.
    indexes = conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = 'pgq' AND tablename = 'jobs' AND indexname LIKE 'jobs\\_claim%'"
    ).fetchall()
    assert indexes
    for name, _ in indexes:
        conn.execute(sql.SQL("DROP INDEX pgq.{}").format(sql.Identifier(name)))
    checks = run(dsn, claim.family(), vacuum.family())
    off = checks["claim.plan[pdf]"]
    assert off.status == "fail", off
    assert "reads pgq.jobs sequentially" in off.detail
    assert "jobs_claim" not in off.detail.split("indexes used:")[1]
    assert checks["vacuum.bloat"].status == "fail"
    assert "no claim index" in checks["vacuum.bloat"].detail

    for _, definition in indexes:
        conn.execute(definition)
    conn.execute("ANALYZE pgq.jobs")
    assert run(dsn, claim.family())["claim.plan[pdf]"].passed


def test_dead_rows_above_the_threshold(dsn: str, conn: psycopg.Connection[Any]) -> None:
    conn.execute("ALTER TABLE pgq.jobs SET (autovacuum_enabled = false)")
    _backlog(conn, 1200)
    conn.execute("DELETE FROM pgq.jobs")

    def flagged() -> dict[str, Check] | None:
        checks = run(dsn, vacuum.family())
        return checks if not checks["vacuum.dead_rows"].passed else None

    # Backends report their row counts to the statistics within a second or so.
    checks = wait_for(flagged, 20, what="dead rows counted")
    dead = checks["vacuum.dead_rows"]
    assert dead.status == "warn" and "1,200 dead rows" in dead.detail, dead
    assert "VACUUM" in dead.fix
    autovac = checks["vacuum.autovacuum"]
    assert autovac.status == "fail" and "autovacuum_enabled=false on pgq.jobs" in autovac.detail

    conn.execute("ALTER TABLE pgq.jobs RESET (autovacuum_enabled)")
    conn.execute("VACUUM pgq.jobs")
    after = wait_for(
        lambda: (c := run(dsn, vacuum.family()))["vacuum.dead_rows"].passed and c,
        20,
        what="dead rows gone",
    )
    assert "autovacuum_enabled=false" not in after["vacuum.autovacuum"].detail


def test_a_queue_table_never_analyzed_is_named_and_ok_once_analyzed(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    # No autoanalyze behind the test's back (the embedded server runs autovacuum).
    conn.execute("ALTER TABLE pgq.jobs SET (autovacuum_enabled = false)")
    enqueue_many(conn, [NewJob("render_pdf", {"n": i}, queue="pdf") for i in range(20_000)])
    conn.execute("VACUUM pgq.jobs")  # counts the live rows; gathers no statistics

    def named() -> Check | None:
        check = run(dsn, vacuum.family())["vacuum.statistics"]
        return check if not check.passed else None

    check = wait_for(named, 20, what="the missing statistics named")
    assert check.status == "warn" and "never analyzed" in check.detail, check
    assert "ANALYZE pgq.jobs" in check.fix
    conn.execute("ANALYZE pgq.jobs")
    assert run(dsn, vacuum.family())["vacuum.statistics"].passed
    conn.execute("ALTER TABLE pgq.jobs RESET (autovacuum_enabled)")


def test_the_notify_queue_filling_behind_a_listener_that_never_reads(dsn: str) -> None:
    deaf = session(dsn, "deaf-listener")
    pid = deaf.info.backend_pid
    deaf.execute("LISTEN pgq_doctor_test")  # and never reads its socket again
    try:
        with psycopg.connect(dsn, autocommit=True) as sender:

            def filled() -> Check | None:
                with sender.transaction():
                    sender.execute(
                        "SELECT pg_notify('pgq_doctor_test', repeat('x', 7900) || g::text) "
                        "FROM generate_series(1, 200) AS g"
                    )
                found = run(dsn, pressure.family())["pressure.notify"]
                return None if found.passed else found

            found = wait_for(filled, 60, interval=0, what="the NOTIFY queue to fill")
        assert f"pid {pid} " in found.detail, found
        assert "'deaf-listener'" in found.detail
        assert "not reading" in found.detail
        assert f"pg_terminate_backend({pid})" in found.fix
    finally:
        deaf.close()
    wait_for(
        lambda: run(dsn, pressure.family())["pressure.notify"].passed, 20, what="queue drained"
    )


def test_a_lock_on_the_table_makes_a_family_time_out_and_say_so(dsn: str) -> None:
    with session(dsn, "migration-in-progress") as locker:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE pgq.jobs IN ACCESS EXCLUSIVE MODE")
        checks = run(dsn, vacuum.family(), horizon.family())
        locker.execute("ROLLBACK")
    assert checks["vacuum"].status == "warn"
    assert "timed out" in checks["vacuum"].detail and "lock" in checks["vacuum"].detail
    assert "2s" in checks["vacuum"].detail
    # The families after it still ran.
    assert "horizon.backends" in checks


@pytest.fixture
def least_privilege(dsn: str) -> Iterator[tuple[str, str]]:
    """A login in the worker role of sql/roles/, and its DSN."""
    role = f"pgq_doctor_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute((sql_dir() / "roles" / "worker_role.sql").read_text())
        create = sql.SQL("CREATE ROLE {} LOGIN IN ROLE pgq_worker")
        admin.execute(create.format(sql.Identifier(role)))
    try:
        yield role, conninfo.make_conninfo(dsn, user=role)
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_the_worker_role_says_what_it_cannot_see_and_which_grant_lifts_it(
    dsn: str, least_privilege: tuple[str, str]
) -> None:
    role, role_dsn = least_privilege
    with session(dsn, "admin-console") as admin:
        admin.execute("BEGIN")
        admin.execute("SELECT pg_current_xact_id()")
        pid = admin.info.backend_pid

        def hidden() -> dict[str, Check] | None:
            checks = run(role_dsn, horizon.family())
            return checks if not checks["horizon.visibility"].passed else None

        checks = wait_for(hidden, 20, what="the admin's session hidden")
        seen = checks["horizon.visibility"]
        assert f"pid {pid} 'admin-console'" in seen.detail, seen
        assert "cannot see" in seen.detail and "pg_read_all_stats" in seen.detail
        assert seen.fix == f"GRANT pg_read_all_stats TO {role}; (or pg_monitor, which includes it)"
        # What it cannot see, it does not judge: it points at what it could not see.
        assert f"belongs to pid {pid}, whose age this role cannot see" in (
            checks["horizon.backends"].detail
        )
        # Every other family runs on the worker role, the claim's EXPLAIN ANALYZE included.
        everything = run(role_dsn, vacuum.family(), claim.family(), pressure.family())
        assert not any("cannot see" in c.detail for c in everything.values()), everything

        with psycopg.connect(dsn, autocommit=True) as owner:
            owner.execute(sql.SQL("GRANT pg_read_all_stats TO {}").format(sql.Identifier(role)))
        found = wait_for(held_by(role_dsn, pid), 20, what="the admin named once granted")
        assert "'admin-console'" in found.detail
        assert run(role_dsn, horizon.family())["horizon.visibility"].passed
        admin.execute("ROLLBACK")


def test_the_command_exits_1_names_the_holder_and_prints_json(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQ_DSN", dsn)
    restore = Restore()
    cli = Cli(tmp_path, capsys, config=CONFIG, name="doctor")
    try:
        with session(dsn, "forgotten-tx") as forgotten:
            forgotten.execute("BEGIN")
            forgotten.execute("SELECT pg_current_xact_id()")
            pid = forgotten.info.backend_pid
            wait_for(held_by(dsn, pid), 20, what="the holder seen")
            result = cli("doctor")
            assert result.code == 1, result.err
            assert result.out.startswith("pgq doctor on ")
            assert any(
                line.startswith(("WARN  horizon.backends", "FAIL  horizon.backends"))
                for line in result.out.splitlines()
            ), result.out
            assert f"pid {pid} " in result.out and "forgotten-tx" in result.out
            assert "  fix " in result.out
            as_json = cli("doctor", "--json")
            assert as_json.code == 1
            document = json.loads(as_json.out)
            assert set(document) == {"checks"}
            for check in document["checks"]:
                assert set(check) == {"name", "status", "detail", "fix"}
                assert check["status"] in ("ok", "warn", "fail")
            names = {c["name"]: c for c in document["checks"]}
            assert {
                "horizon.backends",
                "vacuum.dead_rows",
                "claim.latency",
                "pressure.notify",
                "headroom.writes",
            } <= set(names)
            assert names["horizon.backends"]["status"] != "ok"
            forgotten.execute("ROLLBACK")
        after = json.loads(cli("doctor", "--json").out)
        statuses = {c["name"]: c["status"] for c in after["checks"]}
        assert statuses["horizon.backends"] == "ok"
        # Exit 0 exactly when every check passes (this server's own settings may fail one).
        assert cli("doctor").code == (0 if set(statuses.values()) == {"ok"} else 1)
    finally:
        restore()


def _writer(dsn: str, statement: str, stop: threading.Event) -> threading.Thread:
    """A session writing rows in a loop (autocommit: its counts reach the statistics)."""

    def write() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                conn.execute(statement)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_headroom_weighs_the_queue_s_writes_against_the_rest(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    conn.execute("CREATE TABLE orders (id bigint GENERATED ALWAYS AS IDENTITY, note text)")
    queue_writes = (
        "INSERT INTO pgq.jobs (kind, args) SELECT 'render_pdf', '{}' FROM generate_series(1, 50)"
    )
    stop = threading.Event()
    threads = [_writer(dsn, queue_writes, stop)]
    try:

        def sampled(*words: str) -> Check | None:
            found = run(dsn, headroom.family(), sample=2.0)["headroom.writes"]
            return found if all(w in found.detail for w in words) else None

        # Only the queue writes: a database of its own.
        alone = wait_for(lambda: sampled("only the queue writes"), 30, what="queue writes")
        assert alone.passed and "(the queue's share: 100%)" in alone.detail
        # Some business writes, far fewer than the queue's: the queue does most of the work.
        threads.append(_writer(dsn, "INSERT INTO orders (note) VALUES ('a')", stop))
        busy = wait_for(
            lambda: (c := sampled("to the rest")) and c.status == "warn" and c,
            30,
            what="the queue's share flagged",
        )
        assert "more queue work than other work" in busy.detail
        assert "WAL" in busy.detail and "batch" in busy.fix
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    # Quiet again: too few writes to judge.
    assert run(dsn, headroom.family(), sample=0.5)["headroom.writes"].passed


def test_pgstattuple_figures_when_installed_and_the_grant_it_needs(
    dsn: str, conn: psycopg.Connection[Any], least_privilege: tuple[str, str]
) -> None:
    if not conn.execute(
        "SELECT 1 FROM pg_available_extensions WHERE name = 'pgstattuple'"
    ).fetchone():
        pytest.skip("this server has no pgstattuple extension")
    assert "vacuum.pgstattuple" not in run(dsn, vacuum.family())  # not installed: not run
    conn.execute("CREATE EXTENSION pgstattuple")
    _backlog(conn, 500)
    found = run(dsn, vacuum.family())["vacuum.pgstattuple"]
    assert found.passed and "% dead" in found.detail and "leaf density" in found.detail, found
    _, role_dsn = least_privilege
    refused = run(role_dsn, vacuum.family())["vacuum.pgstattuple"]
    assert refused.status == "warn" and "may not use it" in refused.detail
    assert "pg_stat_scan_tables" in refused.fix


def test_a_statement_past_the_timeout_is_cut_short_and_said(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    # The oldest due job reads every due job's entry: 50,000 of them take far more than 1 ms.
    _backlog(conn, 50_000)
    checks = run(dsn, pressure.family(), horizon.family(), statement_timeout=0.001)
    assert checks["pressure"].status == "warn", checks
    assert checks["pressure"].detail == (
        "timed out: a statement ran longer than doctor.statement_timeout (1ms) and was cancelled"
    )
    assert "horizon.backends" in checks or "horizon" in checks  # the next family still ran


def test_a_database_without_the_schema_is_told_to_migrate(
    empty_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGQ_DSN", empty_dsn)
    restore = Restore()
    try:
        result = Cli(tmp_path, capsys, config=CONFIG, name="doctor")("doctor")
    finally:
        restore()
    assert result.code == 1 and result.out == ""
    assert "has no pgq schema (or an old one): run `pgq-supervisor -c" in result.err
    assert "migrate` first" in result.err
