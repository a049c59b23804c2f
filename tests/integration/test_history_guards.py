"""The history partition functions run with their owner's rights (SECURITY DEFINER): what a
caller may ask of them is bounded, only the roles that need them may call them, and
supervisors starting together do not race to create the same partition (issue 11, item 8)."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo, sql

from supervisor.queue import locks, maintenance


@pytest.mark.parametrize(
    ("since", "days_ahead"),
    [("now()", "400"), ("now()", "-1"), ("now() - interval '30 days'", "1"), ("'infinity'", "1")],
)
def test_partition_function_bounds_its_arguments(
    conn: psycopg.Connection[Any], since: str, days_ahead: str
) -> None:
    # Before: days_ahead 400 had the owner create 401 tables for any caller.
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="ensure_history_partitions"):
        conn.execute(f"SELECT pgq.ensure_history_partitions({since}, {days_ahead})")
    tables = conn.execute(
        "SELECT count(*) FROM pg_inherits WHERE inhparent = 'pgq.job_history'::regclass"
    ).fetchone()
    assert tables == (1,)  # the default partition alone


@pytest.fixture
def outsider(conn: psycopg.Connection[Any], dsn: str) -> Iterator[str]:
    """A login that may use the schema but was granted nothing else (not pgq_worker)."""
    role = f"pgq_outsider_{secrets.token_hex(4)}"
    conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    conn.execute(sql.SQL("GRANT USAGE ON SCHEMA pgq TO {}").format(sql.Identifier(role)))
    try:
        yield conninfo.make_conninfo(dsn, user=role)
    finally:
        conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.mark.parametrize(
    "call",
    [
        "SELECT pgq.ensure_history_partitions(now(), 1)",
        "SELECT pgq.drop_history_partitions(now())",
    ],
)
def test_partition_functions_are_not_executable_by_public(outsider: str, call: str) -> None:
    # Before: PUBLIC kept the default EXECUTE, so any role could make the owner run DDL.
    with (
        psycopg.connect(outsider, autocommit=True) as other,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        other.execute(call)


def test_supervisors_starting_together_do_not_race_on_partitions(dsn: str) -> None:
    starters = 4
    for _ in range(3):
        barrier = threading.Barrier(starters)
        made: list[int] = []
        failed: list[BaseException] = []

        def start(
            barrier: threading.Barrier = barrier,
            made: list[int] = made,
            failed: list[BaseException] = failed,
        ) -> None:
            with psycopg.connect(dsn, autocommit=True) as c:
                barrier.wait()
                try:
                    made.append(maintenance.ensure_history_partitions(c, days_ahead=3))
                except psycopg.Error as exc:
                    failed.append(exc)

        threads = [threading.Thread(target=start) for _ in range(starters)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Before: duplicate tables and deadlocks between the starters.
        assert failed == []
        assert sorted(made) == [0, 0, 0, 4]
        with psycopg.connect(dsn, autocommit=True) as c:
            later = c.execute("SELECT now() + interval '10 days'").fetchone()[0]
            while maintenance.drop_history_partition(c, later):
                pass


def test_a_starter_finding_the_partition_lock_taken_leaves_the_work_to_its_holder(dsn: str) -> None:
    # Before: it queued on the lock under the function's 200 ms lock_timeout and failed with
    # lock_not_available whenever the holder took longer (a loaded host, a slow DDL).
    with psycopg.connect(dsn) as holder, psycopg.connect(dsn, autocommit=True) as starter:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (locks.HISTORY_PARTITIONS,))
        started = time.monotonic()
        assert maintenance.ensure_history_partitions(starter, days_ahead=3) == 0
        assert time.monotonic() - started < 0.2
        holder.rollback()
        assert maintenance.ensure_history_partitions(starter, days_ahead=3) == 4
