"""Rescue, requeue of a dead worker's jobs, purge, replay, history partitions, health."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, claim, enqueue, enqueue_many
from supervisor.queue import locks
from supervisor.queue import maintenance as m
from supervisor.queue.queries import query


def _expire(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "UPDATE pgq.jobs SET lease_until = now() - interval '1 hour' WHERE state = 'running'"
    )


def test_crashed_job_is_rescued(conn: psycopg.Connection[Any]) -> None:
    """The first seed's verification: a job whose worker died is rescued once its lease ends."""
    job_id = enqueue(conn, "noop")
    claim(conn, "default", worker="dead-worker")
    assert m.rescue(conn) == []  # lease still valid: nothing to do
    _expire(conn)
    moved = m.rescue(conn)
    assert [(j.id, j.state) for j in moved] == [(job_id, "available")]
    state, attempts, error = conn.execute(
        "SELECT state, attempts, last_error FROM pgq.jobs"
    ).fetchone()
    assert (state, attempts) == ("available", 1)
    assert error == "lease expired: worker dead-worker stopped renewing it"
    assert claim(conn, "default", worker="w2")[0].attempts == 2


def test_rescue_discards_a_job_with_no_attempts_left(conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "oom", max_attempts=5)
    enqueue(conn, "other", max_attempts=1)
    claim(conn, "default", worker="w", limit=2)
    _expire(conn)
    moved = {j.kind: j.state for j in m.rescue(conn, max_attempts={"oom": 1})}
    assert moved == {"oom": "discarded", "other": "discarded"}
    errors = [r[0] for r in conn.execute("SELECT last_error FROM pgq.jobs")]
    assert all(e.startswith("lease expired") for e in errors)


def test_rescue_works_in_bounded_batches(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, [NewJob("k") for _ in range(25)])
    claim(conn, "default", worker="w", limit=25)
    _expire(conn)
    assert len(m.rescue_batch(conn, limit=10)) == 10
    assert len(m.rescue(conn, batch=4)) == 15


def test_only_one_rescuer_at_a_time(dsn: str, conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "k")
    claim(conn, "default", worker="w")
    _expire(conn)
    with psycopg.connect(dsn, autocommit=True) as other:
        assert m.try_lock(other, locks.RESCUE)
        assert m.rescue(conn) is None  # another host is rescuing right now
        m.unlock(other, locks.RESCUE)
    assert len(m.rescue(conn) or []) == 1


def test_requeue_a_dead_workers_jobs_at_once(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, [NewJob("k", {"n": n}) for n in range(3)] + [NewJob("last", max_attempts=1)])
    claim(conn, "default", worker="dead", limit=4)
    enqueue(conn, "k", {"n": "other"})
    claim(conn, "default", worker="alive")
    moved = m.requeue_worker(conn, "dead", "worker pid 4242 exited: killed by SIGKILL")
    assert sorted(j.state for j in moved) == ["available", "available", "available", "discarded"]
    rows = conn.execute(
        "SELECT locked_by, state, attempts, last_error FROM pgq.jobs ORDER BY id"
    ).fetchall()
    assert rows[-1][:2] == ("alive", "running")
    assert all(r[2] == 1 for r in rows[:4])  # the attempt counts
    assert all(r[3] == "worker pid 4242 exited: killed by SIGKILL" for r in rows[:4])


def test_purge_deletes_only_old_dead_letters_in_batches(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        """
        INSERT INTO pgq.jobs (kind, state, finished_at)
        SELECT 'k', 'discarded', now() - make_interval(days => g % 30)
        FROM generate_series(0, 299) AS g
        """
    )
    enqueue(conn, "alive")
    cutoff = datetime.now(timezone.utc) - timedelta(days=14)
    expected = conn.execute(
        "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded' AND finished_at < %s", (cutoff,)
    ).fetchone()[0]
    assert m.purge_discarded(conn, cutoff, batch=7) == expected
    left = conn.execute(
        "SELECT count(*) FILTER (WHERE state = 'discarded'), "
        "count(*) FILTER (WHERE state = 'available') FROM pgq.jobs"
    ).fetchone()
    assert left == (300 - expected, 1)


def _dead(conn: psycopg.Connection[Any], kind: str, queue: str, days_ago: int) -> int:
    return conn.execute(
        "INSERT INTO pgq.jobs (kind, queue, state, attempts, last_error, finished_at) "
        "VALUES (%s, %s, 'discarded', 10, 'boom', now() - make_interval(days => %s)) RETURNING id",
        (kind, queue, days_ago),
    ).fetchone()[0]


def test_replay_by_id_kind_queue_and_age(conn: psycopg.Connection[Any]) -> None:
    a = _dead(conn, "pdf", "pdf", 1)
    b = _dead(conn, "pdf", "pdf", 10)
    c = _dead(conn, "hook", "webhooks", 10)
    d = _dead(conn, "hook", "webhooks", 1)
    assert m.replay(conn, m.ReplayFilter(ids=[a])).ids == [a]
    old_hooks = m.ReplayFilter(
        kind="hook", finished_before=datetime.now(timezone.utc) - timedelta(days=5)
    )
    assert m.replay(conn, old_hooks).ids == [c]
    assert m.replay(conn, m.ReplayFilter(queue="nothing-here")) == m.Replayed([], [])
    rows = {i: (s, n) for i, s, n in conn.execute("SELECT id, state, attempts FROM pgq.jobs")}
    assert rows[a] == ("available", 0) and rows[c] == ("available", 0)
    assert rows[b] == ("discarded", 10) and rows[d] == ("discarded", 10)
    with pytest.raises(ValueError, match="needs ids"):
        m.replay(conn, m.ReplayFilter())
    assert sorted(m.replay(conn, m.ReplayFilter(everything=True)).ids) == [b, d]


def test_a_replayed_dead_letter_leaves_its_old_cancel_request_behind(
    conn: psycopg.Connection[Any],
) -> None:
    dead = _dead(conn, "pdf", "pdf", 1)
    # Asked to cancel while it ran its last attempt, which then failed: a dead letter.
    conn.execute("UPDATE pgq.jobs SET cancel_requested_at = now() WHERE id = %s", (dead,))
    assert m.replay(conn, m.ReplayFilter(ids=[dead])).ids == [dead]
    (job,) = claim(conn, "pdf", worker="w")
    assert job.id == dead
    # What the master reads every second to stop cancelled jobs: nothing for its new run.
    assert conn.execute(query("cancel_requests"), {"workers": ["w"]}).fetchall() == []


def test_history_partitions_are_created_ahead_and_dropped(conn: psycopg.Connection[Any]) -> None:
    # A row from long ago sits in the default partition until its day gets a partition.
    conn.execute(
        "INSERT INTO pgq.job_history VALUES (1, 'q', 'k', 'completed', 1, now(), now(), now())"
    )
    assert m.ensure_history_partitions(conn, days_ahead=2) == 3
    assert m.ensure_history_partitions(conn, days_ahead=2) == 0
    (where,) = conn.execute("SELECT tableoid::regclass::text FROM pgq.job_history").fetchone()
    assert where.startswith("pgq.job_history_2")  # moved out of the default partition
    assert m.purge_history(conn, datetime.now(timezone.utc) - timedelta(days=1)) == 0
    assert m.purge_history(conn, datetime.now(timezone.utc) + timedelta(days=5)) == 3
    assert conn.execute("SELECT count(*) FROM pgq.job_history").fetchone()[0] == 0


def test_health_reports_tuples_and_oldest_job(conn: psycopg.Connection[Any]) -> None:
    conn.execute("INSERT INTO pgq.jobs (kind, run_at) VALUES ('k', now() - interval '90 seconds')")
    health = m.table_health(conn)
    assert health is not None
    assert health.oldest_available_age is not None and health.oldest_available_age >= 90
    assert health.dead_tuples >= 0 and health.live_tuples >= 0


def test_queue_stats(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(
        conn, [NewJob("k", queue="a") for _ in range(3)] + [NewJob("k", queue="a", delay=60)]
    )
    claim(conn, "a", worker="w")
    _dead(conn, "k", "b", 1)
    stats = {s.queue: s for s in m.queue_stats(conn)}
    assert (stats["a"].available, stats["a"].scheduled, stats["a"].running) == (2, 1, 1)
    assert stats["b"].discarded == 1


def test_replay_skips_a_dead_letter_whose_unique_key_is_held_again(
    conn: psycopg.Connection[Any],
) -> None:
    older = conn.execute(
        "INSERT INTO pgq.jobs (kind, state, unique_key, finished_at) VALUES "
        "('k', 'discarded', 'sync:1', now() - interval '2 hours') RETURNING id"
    ).fetchone()[0]
    newer = conn.execute(
        "INSERT INTO pgq.jobs (kind, state, unique_key, finished_at) VALUES "
        "('k', 'discarded', 'sync:1', now() - interval '1 hour') RETURNING id"
    ).fetchone()[0]
    held = conn.execute(
        "INSERT INTO pgq.jobs (kind, state, unique_key, finished_at) VALUES "
        "('k', 'discarded', 'sync:2', now()) RETURNING id"
    ).fetchone()[0]
    enqueue(conn, "k", unique_key="sync:2")  # the key is held again by a waiting job
    plain = _dead(conn, "k", "default", 1)
    result = m.replay(conn, m.ReplayFilter(kind="k"))
    assert sorted(result.ids) == sorted([newer, plain])  # one per key, none that duplicates
    assert sorted(result.held) == sorted([(older, "sync:1"), (held, "sync:2")])
    states = dict(conn.execute("SELECT id, state FROM pgq.jobs").fetchall())
    assert states[older] == "discarded" and states[held] == "discarded"


def test_requeue_counts_the_attempt_only_of_the_job_that_was_running(
    conn: psycopg.Connection[Any],
) -> None:
    ids = enqueue_many(conn, [NewJob("k", {"n": n}, max_attempts=1) for n in range(3)])
    running, *claimed = claim(conn, "default", worker="dead", limit=3)
    moved = {j.id: j for j in m.requeue_worker(conn, "dead", "killed", spent=[running.id])}
    assert sorted(moved) == sorted(ids)
    assert moved[running.id].state == "discarded"  # out of attempts: it may be the killer
    rows = {
        i: (s, a, e)
        for i, s, a, e in conn.execute("SELECT id, state, attempts, last_error FROM pgq.jobs")
    }
    assert rows[running.id] == ("discarded", 1, "killed")
    for job in claimed:  # only claimed: the attempt comes back, no error is pinned on them
        assert rows[job.id] == ("available", 0, None)
