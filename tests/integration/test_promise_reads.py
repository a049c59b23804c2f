"""The "read" items of issue 30, each reproduced on a real database: found by reading the code,
shown here failing before their fix."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import enqueue
from supervisor.queue.migrations import available, migrate
from tests.child_worker import in_process_worker

ONE_CHILD = """
handlers:
  sleep: tests.handlers:sleep
pools:
  main: {processes: 1, batch: 1, queues: {default: 1}}
"""


def _worker(dsn: str, tmp_path: Path) -> Any:
    return in_process_worker(dsn, tmp_path, ONE_CHILD)


def _settings(conn: psycopg.Connection[Any]) -> tuple[str, str, str]:
    row = conn.execute(
        "SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'), "
        "current_setting('jit')"
    ).fetchone()
    assert row is not None
    return row


def test_a_session_a_handlers_question_reopens_gets_the_generic_plan_settings(
    dsn: str, tmp_path: Path
) -> None:
    """The child's session was lost while its handler ran; the handler's next question opens
    the new one, which then serves every claim after it. It must be set up like any other."""
    session = _worker(dsn, tmp_path).parts.session
    assert session.connect()
    assert _settings(session.conn) == ("force_generic_plan", "off", "off")
    session.discard()  # lost (a failover): the next question reconnects
    assert session.ask(_settings) == ("force_generic_plan", "off", "off")
    session.discard()


def test_an_upgrade_from_0008_builds_the_history_index_without_holding_the_job_table(
    empty_dsn: str,
) -> None:
    """0009 added columns to pgq.jobs (an exclusive lock, held to its transaction's end) and
    then built the history's id index over every partition in that same transaction: on an
    upgrade, every enqueue, claim and completion waited for the whole build."""
    migrate(empty_dsn, shipped=[m for m in available() if m.version <= 8])
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute("SELECT pgq.ensure_history_partitions(now(), 2)")
        # Enough history that each build takes a while to sample.
        conn.execute(
            "INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, "
            "finished_at) SELECT g, 'q', 'k', 'completed', 1, now(), now() "
            "FROM generate_series(1, 400000) AS g"
        )
    seen: list[tuple[str, bool]] = []
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(empty_dsn, autocommit=True) as watcher:
            while not stop.is_set():
                seen.extend(
                    watcher.execute(
                        """
                        SELECT p.command, EXISTS (
                                   SELECT 1 FROM pg_locks AS l
                                   WHERE l.pid = p.pid AND l.granted
                                     AND l.relation = 'pgq.jobs'::regclass)
                        FROM pg_stat_progress_create_index AS p
                        WHERE p.datname = current_database()
                          AND p.relid::regclass::text LIKE 'pgq.job_history%'
                        """
                    ).fetchall()
                )
                time.sleep(0.005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        migrate(empty_dsn)
    finally:
        stop.set()
        sampler.join()
    assert seen, "no history index build was sampled"
    assert not [s for s in seen if s[1]], f"built holding pgq.jobs: {seen[:3]}"
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        valid = conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'pgq.job_history_id'::regclass"
        ).fetchone()
        assert valid == (True,)
        plan = conn.execute(
            "EXPLAIN SELECT * FROM pgq.job_history WHERE id = 7 AND finished_at > now() - "
            "interval '1 day'"
        ).fetchall()
        assert "job_history" in str(plan) and "Index" in str(plan)


@pytest.mark.slow
def test_a_batch_of_large_results_is_completed_and_kept(conn: psycopg.Connection[Any]) -> None:
    """results.max_size may be 64 MiB, and a batch's completions carried every result in one
    parameter, cast to one jsonb array: five results of 60 MiB passed jsonb's 256 MiB and the
    completion failed (past 1 GiB the server ends the session: the child reconnected and sent
    it again, forever)."""
    from supervisor import claim, result
    from supervisor.queue import jobs as jobs_api

    ids = [enqueue(conn, "render", {"n": n}) for n in range(5)]
    claimed = claim(conn, "default", worker="h:1:a", limit=5)
    assert sorted(j.id for j in claimed) == sorted(ids)
    big = '"' + "x" * (60 * 1024 * 1024) + '"'
    done = [j._replace(result=big) for j in claimed]
    written = jobs_api.complete(conn, done)
    assert sorted(j.id for j in written.kept) == sorted(ids) and written.lost == []
    assert all(len(result(conn, job_id)) == 60 * 1024 * 1024 for job_id in ids)


def test_results_travel_in_runs_under_the_statement_limit() -> None:
    from datetime import datetime, timezone

    from supervisor.queue.jobs import Job, results_chunks

    now = datetime.now(timezone.utc)
    jobs = [
        Job(i, "q", "k", {}, 0, now, 1, 3, 1, now, now)._replace(result=text)
        for i, text in enumerate(["x" * 40, None, "x" * 70, "x" * 200, "x" * 10])
    ]
    assert [[j.id for j in run] for run in results_chunks(jobs, limit=100)] == [
        [0, 1],
        [2],
        [3],
        [4],
    ]
    assert results_chunks(jobs[:2], limit=100) == [jobs[:2]]


def test_a_queue_at_its_limit_keeps_the_first_jobs_the_walk_found(
    conn: psycopg.Connection[Any],
) -> None:
    """capped keeps a queue's allowance of what the walk locked. It took LIMIT allowed of them
    with no order: nothing said which, so a tenant's later job could be claimed before its
    earlier one. This pins the order: each tenant's first jobs, in claim order, and the rest
    on the next claims, none skipped. (The plan of the day happened to keep the walk's order,
    so this did not fail before; the change makes it a guarantee, not an accident.)"""
    from supervisor import NewJob, enqueue_many
    from supervisor.queue import jobs as jobs_api
    from supervisor.queue.limits import Limits, write_limits

    write_limits(conn, [Limits("hooks", concurrency=2)], ["hooks"], "test")
    jobs = [NewJob("k", {"n": n}, queue="hooks", priority=p) for n, p in enumerate([0, 5, 3, 9])]
    ids = enqueue_many(conn, jobs)
    order = [ids[3], ids[1], ids[2], ids[0]]  # by priority, highest first
    seen: list[int] = []
    while len(seen) < 4:
        claimed = jobs_api.read_claim(jobs_api.send_claim(conn, "hooks", worker="w", limit=4))
        assert len(claimed.jobs) <= 2
        seen += [j.id for j in claimed.jobs]
        jobs_api.complete(conn, claimed.jobs)
    assert seen == order
