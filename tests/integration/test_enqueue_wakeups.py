"""Enqueue NOTIFYs only while a master has raised the queue's wake-up flag (migration 0021; a
row per change in pgq.wakeup_flags, read newest first, since 0071), on every way in: the first
enqueue takes the flag and notifies, the next finds it down and does not, and a flag another
open transaction holds is skipped, never waited for."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, enqueue, enqueue_async, enqueue_many, enqueue_many_async
from supervisor.queue.migrations import available, migrate


def _sync(conn: psycopg.Connection[Any], dsn: str, queue: str) -> None:
    enqueue(conn, "k", queue=queue)


def _many(conn: psycopg.Connection[Any], dsn: str, queue: str) -> None:
    enqueue_many(conn, [NewJob("k", queue=queue), NewJob("k", queue=queue)])


def _sql(conn: psycopg.Connection[Any], dsn: str, queue: str) -> None:
    conn.execute("SELECT pgq.enqueue('k', queue => %s)", (queue,))


def _async(conn: psycopg.Connection[Any], dsn: str, queue: str) -> None:
    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            await enqueue_async(aconn, "k", queue=queue)

    asyncio.run(go())


def _many_async(conn: psycopg.Connection[Any], dsn: str, queue: str) -> None:
    async def go() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            await enqueue_many_async(aconn, [NewJob("k", queue=queue)])

    asyncio.run(go())


PATHS: dict[str, Callable[[psycopg.Connection[Any], str, str], None]] = {
    "enqueue": _sync,
    "enqueue_many": _many,
    "pgq.enqueue": _sql,
    "enqueue_async": _async,
    "enqueue_many_async": _many_async,
}


def _raise(conn: psycopg.Connection[Any], queue: str, *hosts: str) -> None:
    for host in hosts:
        conn.execute("SELECT * FROM pgq.want_wakeups(%s, ARRAY[%s])", (host, queue))


def _raised(conn: psycopg.Connection[Any], queue: str) -> bool:
    """Whether the queue's flag is up: its newest row says so."""
    row = conn.execute(
        "SELECT up FROM pgq.wakeup_flags WHERE queue = %s ORDER BY seq DESC LIMIT 1", (queue,)
    ).fetchone()
    return bool(row and row[0])


def _rows(conn: psycopg.Connection[Any], queue: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM pgq.wakeup_flags WHERE queue = %s", (queue,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def _heard(listener: psycopg.Connection[Any], expect: int = 0) -> list[str]:
    """The NOTIFYs heard: waits up to 5 s for ``expect`` of them, then 0.2 s for any more."""
    heard = [n.payload for n in listener.notifies(timeout=5.0, stop_after=expect)] if expect else []
    return heard + [n.payload for n in listener.notifies(timeout=0.2, stop_after=50)]


@pytest.mark.parametrize("path", PATHS)
def test_a_raised_flag_is_taken_by_one_enqueue_and_notifies_once(dsn: str, path: str) -> None:
    enqueue_by = PATHS[path]
    with (
        psycopg.connect(dsn, autocommit=True) as listener,
        psycopg.connect(dsn, autocommit=True) as app,
    ):
        listener.execute("LISTEN pgq_jobs")
        # No master wants the queue: the job is written and nobody is woken.
        enqueue_by(app, dsn, "q")
        assert _heard(listener) == []
        # Two hosts have a child asleep for it: the second finds the flag up already, and the
        # one NOTIFY wakes both (every master hears it). The queue's flag is down after it.
        _raise(listener, "q", "host-a", "host-b")
        _raise(listener, "other", "host-a")
        enqueue_by(app, dsn, "q")
        assert _heard(listener, expect=1) == ["q"]
        assert not _raised(listener, "q")
        assert _raised(listener, "other")  # another queue's flag is its own
        assert _rows(listener, "q") == 1  # the take replaced the raised row
        # The flags are down until a master raises them again: no second NOTIFY.
        enqueue_by(app, dsn, "q")
        assert _heard(listener) == []
        n = listener.execute("SELECT count(*) FROM pgq.jobs WHERE queue = 'q'").fetchone()
        assert n is not None and n[0] == (6 if path == "enqueue_many" else 3)


def test_a_job_due_later_leaves_the_flag_up(conn: psycopg.Connection[Any]) -> None:
    _raise(conn, "q", "host-a")
    enqueue(conn, "k", queue="q", delay=60)
    enqueue_many(conn, [NewJob("k", queue="q", delay=60)])
    conn.execute("SELECT pgq.enqueue('k', queue => 'q', run_at => now() + interval '1 hour')")
    assert _raised(conn, "q")


@pytest.mark.parametrize("path", ["enqueue", "enqueue_many", "pgq.enqueue"])
def test_a_flag_held_by_an_open_transaction_is_skipped_not_waited_for(dsn: str, path: str) -> None:
    enqueue_by = PATHS[path]
    with (
        psycopg.connect(dsn, autocommit=True) as listener,
        psycopg.connect(dsn) as first,
        psycopg.connect(dsn, autocommit=True) as second,
    ):
        listener.execute("LISTEN pgq_jobs")
        _raise(listener, "q", "host-a")
        enqueue_by(first, dsn, "q")  # took the flag; its NOTIFY goes at its commit
        # A waiting enqueue would hit this and fail instead of passing the held flag.
        second.execute("SET lock_timeout = '200ms'")
        enqueue_by(second, dsn, "q")
        assert _heard(listener) == []
        first.commit()
        assert _heard(listener, expect=1) == ["q"]
        # A transaction that took the flag and rolled back leaves it up for the next one.
        _raise(listener, "q", "host-a")
        enqueue_by(first, dsn, "q")
        first.rollback()
        assert _raised(listener, "q")
        enqueue_by(second, dsn, "q")
        assert _heard(listener, expect=1) == ["q"]


def _want(conn: psycopg.Connection[Any], *queues: str) -> list[str]:
    rows = conn.execute(
        "SELECT queue, waiting FROM pgq.want_wakeups(%s, %s::text[]) ORDER BY 1",
        ("host-a", list(queues)),
    ).fetchall()
    # `waiting` is kept for the masters of earlier releases, always null (read as false).
    assert all(w is None for _, w in rows), rows
    return [q for q, _ in rows]


def test_a_master_raises_only_lowered_flags(conn: psycopg.Connection[Any]) -> None:
    # Missing flags are added and reported; raised ones are neither written nor reported.
    assert _want(conn, "a", "b") == ["a", "b"]
    assert _want(conn, "a", "b") == []
    assert _raised(conn, "a")
    # An enqueue takes the flag; the raise puts it up again and reports it, replacing the
    # lowered row: a queue keeps one row, however many changes it sees.
    for _ in range(3):
        enqueue(conn, "k", queue="a")
        assert not _raised(conn, "a")
        assert _want(conn, "a", "b") == ["a"]
        assert _raised(conn, "a")
    assert (_rows(conn, "a"), _rows(conn, "b")) == (1, 1)
    # The flags are hints: the raise does not wait for the WAL flush (transaction-local). Set
    # on first: a test server may run with it off (the embedded one does).
    conn.execute("SET synchronous_commit = on")
    with conn.transaction():
        conn.execute("SELECT * FROM pgq.want_wakeups('host-b', ARRAY['a'])")
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("off",)
    assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)


def test_two_masters_raising_at_once_leave_one_current_row(dsn: str) -> None:
    with (
        psycopg.connect(dsn, autocommit=True) as first,
        psycopg.connect(dsn) as second,
        psycopg.connect(dsn, autocommit=True) as third,
    ):
        assert _want(first, "q") == ["q"]
        enqueue(first, "k", queue="q")  # lowered: the row a raise replaces
        assert _want(second, "q") == ["q"]  # open: its lock on the lowered row is held
        # The other master skips the held row (never waits: it would hit the timeout) and
        # writes nothing; the first one's raise stands once it commits.
        third.execute("SET lock_timeout = '200ms'")
        assert _want(third, "q") == []
        assert not _raised(third, "q")
        second.commit()
        assert _raised(third, "q")
        assert _want(third, "q") == []
        assert _rows(third, "q") == 1
        # A take and a raise are the same step the other way: a flag already down is not
        # taken again, and nothing is written for it.
        assert third.execute("SELECT pgq.take_wakeups('q')").fetchone() == (True,)
        assert third.execute("SELECT pgq.take_wakeups('q')").fetchone() == (False,)
        assert third.execute("SELECT pgq.take_wakeups('never')").fetchone() == (False,)
        assert (_rows(third, "q"), _rows(third, "never")) == (1, 0)


def test_the_raise_reads_no_job_while_a_held_horizon_keeps_the_dead_ones(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    # The raise runs on the master's loop at every child's sleep and wake-up. It once probed
    # the head of jobs_claim for a waiting job, and while an xmin horizon was held that probe
    # walked every dead entry the hold kept there: tens of milliseconds within minutes at 3,000
    # jobs/s, which every wake-up then waited behind. Whatever the table holds, the raise's
    # statements (nested: auto_explain logs each) must not read pgq.jobs.
    _want(conn, "a")
    with psycopg.connect(dsn) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1").fetchone()  # its snapshot holds the horizon from here
        conn.execute(
            "INSERT INTO pgq.jobs (kind, args, queue)"
            " SELECT 'k', '{}', 'a' FROM generate_series(1, 2000)"
        )
        conn.execute("DELETE FROM pgq.jobs WHERE queue = 'a'")  # dead, and kept by the hold
        conn.execute("LOAD 'auto_explain'")
        conn.execute("SET auto_explain.log_min_duration = 0")
        conn.execute("SET auto_explain.log_nested_statements = on")
        conn.execute("SET auto_explain.log_level = notice")
        notices: list[str] = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
        conn.execute("SELECT pgq.take_wakeups('a')")
        assert _want(conn, "a") == ["a"]
    # auto_explain logged the function's statement (nested), and it touched no job.
    assert any("wakeup_flags" in n for n in notices), notices
    assert not any(" on jobs" in n or "pgq.jobs" in n for n in notices), notices


LOOK = "SELECT f.up FROM pgq.wakeup_flags AS f WHERE f.queue = 'a' ORDER BY f.seq DESC LIMIT 1"


def _buffers(conn: psycopg.Connection[Any], statement: str) -> int:
    row = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}").fetchone()
    assert row is not None
    plan = row[0][0]["Plan"]
    return int(plan.get("Shared Hit Blocks", 0)) + int(plan.get("Shared Read Blocks", 0))


@pytest.mark.parametrize("up", [True, False])
def test_the_flag_is_read_newest_first_whatever_a_held_horizon_keeps(
    dsn: str, conn: psycopg.Connection[Any], up: bool
) -> None:
    # Every take and raise is a change of the flag. Updated in place, a held xmin horizon kept
    # each version, and the enqueue's look (and the take, and the raise) walked them all: 3.5 ms
    # and 608 buffers after 12 minutes at 3,000 jobs/s. Each change is a new row now, and the
    # look reads the queue's newest entry first: what it costs does not grow with the changes.
    _want(conn, "a")
    with psycopg.connect(dsn) as holder:
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1").fetchone()  # its snapshot holds the horizon from here
        fresh = _buffers(conn, LOOK)
        for _ in range(3000):
            conn.execute("SELECT pgq.take_wakeups('a')")
            _want(conn, "a")
        if not up:
            conn.execute("SELECT pgq.take_wakeups('a')")
        assert _rows(conn, "a") == 1
        held = _buffers(conn, LOOK)
        assert held <= fresh + 2, (fresh, held)
        # The enqueue reads it as it did before the changes.
        assert _raised(conn, "a") is up


def test_the_flags_stay_readable_and_deletable_by_earlier_releases(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    # Producers and masters of releases before 0071 name pgq.queue_wakeups: their enqueues look
    # there for a raised flag (then call this release's pgq.take_wakeups), their masters delete
    # their rows when they stop, reload or prune a dead supervisor (in a WITH, as they did).
    old_look = "SELECT EXISTS (SELECT FROM pgq.queue_wakeups AS f WHERE f.queue = %s AND f.wanted)"
    _want(conn, "a")
    assert conn.execute(old_look, ("a",)).fetchone() == (True,)
    assert conn.execute(old_look, ("b",)).fetchone() == (False,)
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq_jobs")
        assert conn.execute("SELECT pgq.take_wakeups('a')").fetchone() == (True,)
        assert _heard(listener, expect=1) == ["a"]
    assert conn.execute(old_look, ("a",)).fetchone() == (False,)
    _want(conn, "a")
    conn.execute("DELETE FROM pgq.queue_wakeups WHERE supervisor_id = 'host-a'")
    conn.execute(
        "WITH flags AS (DELETE FROM pgq.queue_wakeups AS w USING (SELECT 'host-a' AS id) AS gone"
        " WHERE w.supervisor_id = gone.id) SELECT 1"
    )
    conn.execute(
        "WITH flags AS (DELETE FROM pgq.queue_wakeups WHERE supervisor_id = 'host-a'"
        " AND (NULL::text[] IS NULL OR NOT queue = ANY(NULL::text[]))) SELECT 1"
    )
    conn.execute("DELETE FROM pgq.queue_wakeups WHERE queue = 'a'")  # nor by queue
    assert _raised(conn, "a")
    assert conn.execute(old_look, ("a",)).fetchone() == (True,)


def test_the_migration_keeps_the_raised_flags_and_the_rights_on_them(empty_dsn: str) -> None:
    # Every enqueue reads the flags: a role set up by sql/roles/worker_role.sql before 0071
    # must not start failing its enqueues until someone runs the script again.
    role = f"pgq_flags_{uuid.uuid4().hex[:8]}"
    migrate(empty_dsn, shipped=[m for m in available() if m.version < 71])
    with psycopg.connect(empty_dsn, autocommit=True) as owner:
        owner.execute(f"CREATE ROLE {role} LOGIN")
        try:
            owner.execute(f"GRANT USAGE ON SCHEMA pgq TO {role}")
            owner.execute(
                f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgq TO {role}"
            )
            owner.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA pgq TO {role}")
            owner.execute(f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgq TO {role}")
            # Flags as the old table held them: each queue's is up when any master's was.
            owner.execute(
                "INSERT INTO pgq.queue_wakeups (queue, supervisor_id, wanted) VALUES"
                " ('up', 'host-a', false), ('up', 'host-b', true), ('down', 'host-a', false)"
            )
            migrate(empty_dsn)
            assert owner.execute(
                "SELECT queue, up FROM pgq.wakeup_flags ORDER BY seq"
            ).fetchall() == [("up", True)]
            owner.execute(f"SET ROLE {role}")
            _want(owner, "a")
            with psycopg.connect(empty_dsn, autocommit=True) as listener:
                listener.execute("LISTEN pgq_jobs")
                enqueue(owner, "k", queue="a")
                assert _heard(listener, expect=1) == ["a"]
            # An earlier release's producer and master, as that role.
            owner.execute("SELECT EXISTS (SELECT FROM pgq.queue_wakeups WHERE wanted)")
            owner.execute("DELETE FROM pgq.queue_wakeups WHERE supervisor_id = 'host-a'")
            owner.execute("RESET ROLE")
        finally:
            owner.execute("RESET ROLE")
            owner.execute(f"DROP OWNED BY {role}")
            owner.execute(f"DROP ROLE {role}")
