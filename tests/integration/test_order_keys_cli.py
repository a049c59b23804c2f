"""Waiting jobs on the operator's surface (issue 33): `jobs list --state waiting` lists a key's
followers and the workflow steps waiting for their parents; `jobs cancel` by filter cancels them
and the key goes on; `jobs retry` refuses them, saying what they wait for."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from supervisor import NewJob, Workflow, claim, complete, enqueue, enqueue_workflow
from supervisor.queue import bulk
from tests.integration.operator_helpers import Cli


def _key_row(conn: psycopg.Connection[Any], key: str) -> tuple[int, int] | None:
    return conn.execute(
        "SELECT unfinished, head_id FROM pgq.order_keys WHERE key = %s", (key,)
    ).fetchone()


def test_jobs_list_shows_waiting_jobs(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "render_pdf", queue="pdf", order_key="k")
    follower = enqueue(conn, "render_pdf", queue="pdf", order_key="k")
    wf = Workflow()
    wf.add(NewJob("render_pdf", queue="pdf"), after=[wf.add(NewJob("render_pdf", queue="pdf"))])
    step = enqueue_workflow(conn, wf).job_ids[1]
    conn.commit()
    listed = cli("jobs", "list", "--state", "waiting", "--json")
    assert listed.code == 0, listed.err
    assert sorted(j["id"] for j in listed.json()["jobs"]) == [follower, step]
    text = cli("jobs", "list", "--state", "waiting")
    assert text.code == 0 and str(follower) in text.out and "waiting" in text.out


def test_cancel_by_filter_of_waiting_followers_lets_the_key_go_on(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    head = enqueue(conn, "render_pdf", queue="pdf", order_key="k")
    followers = [enqueue(conn, "render_pdf", queue="pdf", order_key="k") for _ in range(3)]
    conn.commit()
    dry = cli("jobs", "cancel", "--state", "waiting", "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.startswith("would cancel 3 jobs (state waiting; waiting)")
    done = cli("jobs", "cancel", "--state", "waiting", "--json").json()
    assert done["changed"] == sorted(followers)
    assert _key_row(conn, "k") == (1, head)
    later = enqueue(conn, "render_pdf", queue="pdf", order_key="k")
    conn.commit()
    (job,) = claim(conn, "pdf", worker="w", limit=5)
    assert job.id == head
    complete(conn, [job])
    conn.commit()
    assert conn.execute("SELECT state FROM pgq.jobs WHERE id = %s", (later,)).fetchone() == (
        "available",
    )
    assert _key_row(conn, "k") == (1, later)


def test_cancel_by_filter_does_not_deadlock_with_the_heads_ending(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A producer of the key holds its row in an open transaction; a cancel by filter of the
    followers waits for it; the producer's transaction then ends the key's head, which releases
    the first follower. Had the cancel's slice locked the followers' rows before waiting for the
    key, that release would wait for the cancel: a deadlock."""
    head = enqueue(conn, "hook", order_key="k")
    followers = [enqueue(conn, "hook", order_key="k") for _ in range(3)]
    conn.commit()
    (running,) = claim(conn, "default", worker="w", limit=1)
    conn.commit()
    assert running.id == head
    producer = psycopg.connect(dsn)
    late = enqueue(producer, "hook", order_key="k")  # holds the key's row until it commits
    failures: list[BaseException] = []

    def cancel_waiting() -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                which = bulk.JobFilter(state="waiting")
                with c.transaction():
                    counted = bulk.count(c, which, ["waiting"])
                with c.transaction():
                    bulk.act_slice(
                        c,
                        "cancel",
                        {**which.params(), "states": ["waiting"]},
                        top=counted.top,
                        floor=counted.floor,
                        below=None,
                        history=False,
                    )
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=cancel_waiting)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until the cancel waits for a lock
        (blocked,) = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        ).fetchone()
        conn.commit()
        if blocked:
            break
        time.sleep(0.05)
    assert blocked, "the cancel never waited for the key's row"
    complete(producer, [running])  # releases the first follower, in the producer's transaction
    producer.commit()
    producer.close()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert failures == []
    states = dict(conn.execute("SELECT id, state FROM pgq.jobs").fetchall())
    assert [states[f] for f in followers] == ["cancelled"] * 3
    assert states[late] == "available"
    assert _key_row(conn, "k") == (1, late)


def test_retry_refuses_waiting_jobs_saying_what_they_wait_for(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    head = enqueue(conn, "render_pdf", queue="pdf", order_key="k")
    follower = enqueue(conn, "render_pdf", queue="pdf", order_key="k")
    wf = Workflow()
    wf.add(NewJob("render_pdf", queue="pdf"), after=[wf.add(NewJob("render_pdf", queue="pdf"))])
    step = enqueue_workflow(conn, wf).job_ids[1]
    conn.commit()
    by_filter = cli("jobs", "retry", "--state", "waiting")
    assert by_filter.code == 2
    assert "not waiting ones: a waiting job waits for its workflow parents" in by_filter.err
    one = cli("jobs", "retry", str(follower))
    assert one.code == 1
    assert (
        f"job {follower} waits for job {head} (available), the earlier job of its order key k, "
        "to end: it cannot be made due before that" in one.err
    )
    other = cli("jobs", "retry", str(step))
    assert other.code == 1 and "waits for its workflow parents to end" in other.err
    # Without --state, a retry by filter leaves waiting jobs alone.
    assert cli("jobs", "retry", "--queue", "pdf", "--json").json()["matched"] == 0
    assert conn.execute("SELECT state FROM pgq.jobs WHERE id = %s", (follower,)).fetchone() == (
        "waiting",
    )
