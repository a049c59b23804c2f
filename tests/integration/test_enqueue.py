"""Enqueue joins the caller's transaction, validates before writing, and wakes listeners once."""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from supervisor import EnqueueError, NewJob, enqueue, enqueue_many
from supervisor.queue.enqueue import MAX_ARGS_BYTES


def _count(conn: psycopg.Connection[Any]) -> int:
    return conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0]


def test_job_exists_when_the_caller_commits(dsn: str, conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn) as app, app.transaction():
        app.execute("CREATE TABLE orders (id int)")
        app.execute("INSERT INTO orders VALUES (1)")
        job_id = enqueue(app, "deliver_webhook", {"order_id": 1})
        # Not visible to anyone else before the commit.
        assert _count(conn) == 0
    row = conn.execute("SELECT kind, args, state FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert row == ("deliver_webhook", {"order_id": 1}, "available")


def test_no_job_when_the_caller_rolls_back(dsn: str, conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn) as app, pytest.raises(RuntimeError), app.transaction():
        enqueue(app, "deliver_webhook", {"order_id": 1})
        raise RuntimeError("the order failed")
    assert _count(conn) == 0


def test_options_are_stored(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(
        conn, "render_pdf", {"invoice": 7}, queue="pdf", priority=5, delay=3600, max_attempts=3
    )
    queue, priority, attempts, max_attempts, in_future = conn.execute(
        "SELECT queue, priority, attempts, max_attempts, run_at > now() + interval '59 minutes'"
        " FROM pgq.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert (queue, priority, attempts, max_attempts, in_future) == ("pdf", 5, 0, 3, True)
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    other = enqueue(conn, "render_pdf", run_at=at)
    assert conn.execute("SELECT run_at FROM pgq.jobs WHERE id = %s", (other,)).fetchone()[0] == at


def test_unique_key_returns_the_existing_job_and_writes_nothing(
    conn: psycopg.Connection[Any],
) -> None:
    first = enqueue(conn, "sync_account", {"id": 1}, unique_key="sync:1")
    second = enqueue(conn, "sync_account", {"id": 1}, unique_key="sync:1")
    assert first == second
    assert _count(conn) == 1
    # While running the key is still held.
    conn.execute(
        "UPDATE pgq.jobs SET state = 'running', lease_id = 1, locked_by = 'w', "
        "lease_until = now() WHERE id = %s",
        (first,),
    )
    assert enqueue(conn, "sync_account", {"id": 1}, unique_key="sync:1") == first
    # Once the job is dead (or done), the key is free again.
    conn.execute(
        "UPDATE pgq.jobs SET state = 'discarded', lease_id = NULL, locked_by = NULL, "
        "lease_until = NULL WHERE id = %s",
        (first,),
    )
    third = enqueue(conn, "sync_account", {"id": 1}, unique_key="sync:1")
    assert third != first
    assert _count(conn) == 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: enqueue(c, "", {}), "kind must not be empty"),
        (lambda c: enqueue(c, "k", {"x": object()}), "not JSON-serialisable"),
        (lambda c: enqueue(c, "k", {"x": math.nan}), "not JSON-serialisable"),
        (lambda c: enqueue(c, "k", [1, 2]), "args must be a JSON object"),
        (lambda c: enqueue(c, "k", {"x": "a\x00b"}), "NUL character"),
        (lambda c: enqueue(c, "k", {"x": "a" * MAX_ARGS_BYTES}), "the limit is"),
        (lambda c: enqueue(c, "k", delay=-1), "delay must be zero or more"),
        (lambda c: enqueue(c, "k", priority=40000), "outside -32768..32767"),
        (lambda c: enqueue(c, "k", priority=True), "priority must be an integer"),
        (lambda c: enqueue(c, "k", max_attempts=0), "max_attempts must be at least 1"),
        (lambda c: enqueue(c, "k", queue=""), "queue must not be empty"),
        (lambda c: enqueue(c, "k", tenant=""), "job 'k': tenant must not be empty"),
        (lambda c: enqueue(c, "k", tenant=7), "job 'k': tenant must be a string, not int"),
        (
            lambda c: enqueue_many(c, [NewJob("ok"), NewJob("bad", tenant="x" * 300)]),
            "job 'bad': tenant is 300 characters long; the limit is 200",
        ),
        (lambda c: enqueue(c, "k", run_at=datetime(2030, 1, 1)), "timezone-aware"),
        (lambda c: enqueue(c, "k", delay=1, run_at=datetime.now(timezone.utc)), "not both"),
        (
            lambda c: enqueue_many(c, [NewJob("ok"), NewJob("bad", {"x": {1, 2}})]),
            "not JSON-serialisable",
        ),
    ],
)
def test_bad_enqueue_raises_before_writing(dsn: str, call: Any, message: str) -> None:
    with psycopg.connect(dsn) as app:
        with app.transaction():
            enqueue(app, "before", {})
            with pytest.raises(EnqueueError, match=message):
                call(app)
            # Nothing was sent: the caller's transaction is intact and can go on.
            enqueue(app, "after", {})
        kinds = sorted(r[0] for r in app.execute("SELECT kind FROM pgq.jobs"))
    assert kinds == ["after", "before"]


def test_hostile_names_are_parameters_not_sql(conn: psycopg.Connection[Any]) -> None:
    nasty = "q'; DROP TABLE pgq.jobs; --\"ü🚀"
    job_id = enqueue(conn, nasty, {"k": nasty}, queue=nasty, unique_key=nasty)
    row = conn.execute(
        "SELECT kind, queue, args->>'k' FROM pgq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert row == (nasty, nasty, nasty)


def test_bulk_enqueue_returns_ids_in_input_order(conn: psycopg.Connection[Any]) -> None:
    jobs = [NewJob("noop", {"i": i}, queue=f"q{i % 3}") for i in range(500)]
    ids = enqueue_many(conn, jobs)
    assert len(ids) == 500 and len(set(ids)) == 500
    rows = dict(conn.execute("SELECT id, (args->>'i')::int FROM pgq.jobs").fetchall())
    assert [rows[i] for i in ids] == list(range(500))


def test_bulk_enqueue_with_unique_keys(conn: psycopg.Connection[Any]) -> None:
    held = enqueue(conn, "sync", unique_key="a")
    ids = enqueue_many(
        conn,
        [
            NewJob("sync", unique_key="a"),
            NewJob("x"),
            NewJob("sync", unique_key="b"),
            NewJob("sync", unique_key="b"),
            NewJob("y"),
        ],
    )
    assert ids[0] == held
    assert ids[2] == ids[3]
    assert len({ids[1], ids[2], ids[4], held}) == 4
    assert _count(conn) == 4


def _notifications(listener: psycopg.Connection[Any]) -> list[str]:
    return [n.payload for n in listener.notifies(timeout=0.5, stop_after=100)]


def _want(conn: psycopg.Connection[Any], *queues: str) -> None:
    """Raise the wake-up flags of these queues, as a master with idle children does."""
    conn.execute("SELECT * FROM pgq.want_wakeups('test', %s::text[])", (list(queues),))


def test_notify_once_per_transaction_and_queue_and_never_for_later_jobs(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as app:
        listener.execute("LISTEN pgq_jobs")
        _want(listener, "pdf", "webhooks", "later")
        with app.transaction():
            for i in range(5):
                enqueue(app, "noop", {"i": i}, queue="pdf")
            enqueue(app, "noop", {}, queue="webhooks")
            enqueue(app, "noop", {}, queue="later", delay=60)
        assert sorted(_notifications(listener)) == ["pdf", "webhooks"]
        _want(listener, "pdf")
        with app.transaction():
            enqueue_many(
                app,
                [NewJob("noop", queue="pdf") for _ in range(50)]
                + [NewJob("noop", queue="later", delay=60)],
            )
        assert _notifications(listener) == ["pdf"]
        # Updates and deletes never notify.
        with app.transaction():
            app.execute("UPDATE pgq.jobs SET priority = 1")
            app.execute("DELETE FROM pgq.jobs")
        assert _notifications(listener) == []


def test_delay_accepts_timedelta(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "k", delay=timedelta(minutes=5))
    (seconds,) = conn.execute(
        "SELECT extract(epoch FROM run_at - created_at) FROM pgq.jobs WHERE id = %s", (job_id,)
    ).fetchone()
    assert 299 < float(seconds) < 301


def test_a_bulk_enqueue_of_jobs_whose_run_at_is_past_wakes_their_queue(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as app:
        listener.execute("LISTEN pgq_jobs")
        _want(listener, "overdue")
        past = datetime.now(timezone.utc) - timedelta(minutes=1)
        with app.transaction():  # one job (the one-row statement) and two (the array one)
            enqueue_many(app, [NewJob("noop", queue="overdue", run_at=past)])
        assert _notifications(listener) == ["overdue"]
        _want(listener, "overdue")
        with app.transaction():
            enqueue_many(app, [NewJob("noop", queue="overdue", run_at=past) for _ in range(2)])
        assert _notifications(listener) == ["overdue"]
        states = app.execute("SELECT state FROM pgq.jobs WHERE queue = 'overdue'").fetchall()
        assert states == [("available",)] * 3


def _race(dsn: str, prefix: str, orders: dict[str, list[str]]) -> dict[str, Any]:
    """Each order's bulk enqueue in a session of its own, all let go at once."""
    start = threading.Barrier(len(orders))
    results: dict[str, Any] = {}

    def enqueue_keys(name: str, order: list[str]) -> None:
        try:
            with psycopg.connect(dsn) as conn:
                jobs = [NewJob("noop", {"k": k}, unique_key=f"{prefix}:{k}") for k in order]
                start.wait()
                results[name] = enqueue_many(conn, jobs)
        except Exception as exc:  # reported by the caller's assertions
            results[name] = exc

    threads = [threading.Thread(target=enqueue_keys, args=item) for item in orders.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_two_bulk_enqueues_of_the_same_keys_in_opposite_orders_do_not_deadlock(dsn: str) -> None:
    keys = [f"order-{i:05d}" for i in range(2000)]
    for prefix in ("a", "b"):
        results = _race(dsn, prefix, {"up": keys, "down": keys[::-1]})
        up, down = results["up"], results["down"]
        assert isinstance(up, list) and isinstance(down, list), results
        # The same jobs, each id in its caller's input order.
        assert up == down[::-1]
        assert len(set(up)) == len(keys)
        with psycopg.connect(dsn) as conn:
            rows = dict(
                conn.execute(
                    "SELECT id, args->>'k' FROM pgq.jobs WHERE unique_key LIKE %s",
                    (f"{prefix}:%",),
                ).fetchall()
            )
        assert [rows[i] for i in up] == keys
