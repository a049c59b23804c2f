"""Order keys (issue 33): ``enqueue(..., order_key=K)`` on a real database.

Inside a queue the jobs of one key start one at a time, in enqueue order: a follower waits in
state 'waiting' (outside the claim index) until the job before it ends for good. Completed,
discarded and cancelled let the next go; a retry, a snooze and 'unknown' hold it. Every enqueue
path (sync, async, bulk, batch, SQL) does the same; two producers of one key at once keep
their order; bad input is refused before anything is written.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import psycopg
import pytest

from supervisor import (
    EnqueueError,
    NewJob,
    cancel,
    claim,
    complete,
    enqueue,
    enqueue_async,
    enqueue_batch,
    enqueue_many,
    enqueue_many_async,
    resolve,
    settle,
)
from supervisor.queue.maintenance import ReplayFilter, replay, rescue_batch
from supervisor.queue.outcomes import Settlement
from supervisor.views.order import job_order
from tests.integration.operator_helpers import Cli

WORKER = "host:1:a"


def _states(conn: psycopg.Connection[Any], key: str) -> list[tuple[int, str]]:
    return conn.execute(
        "SELECT id, state FROM pgq.jobs WHERE order_key = %s ORDER BY id", (key,)
    ).fetchall()


def _key_row(conn: psycopg.Connection[Any], key: str) -> tuple[int, int] | None:
    return conn.execute(
        "SELECT unfinished, head_id FROM pgq.order_keys WHERE key = %s", (key,)
    ).fetchone()


def _claim_all(conn: psycopg.Connection[Any], limit: int = 50) -> list[Any]:
    return claim(conn, "default", worker=WORKER, limit=limit)


def test_followers_wait_and_go_one_at_a_time_in_enqueue_order(
    conn: psycopg.Connection[Any],
) -> None:
    # Higher priorities later: order inside a key wins over priority.
    ids = [enqueue(conn, "hook", {"n": n}, order_key="cust-7", priority=n) for n in range(3)]
    other = enqueue(conn, "hook", {"n": 9}, order_key="cust-8")
    assert _states(conn, "cust-7") == [
        (ids[0], "available"),
        (ids[1], "waiting"),
        (ids[2], "waiting"),
    ]
    assert _key_row(conn, "cust-7") == (3, ids[0])
    # Only the heads of the two keys are claimable, however large the batch.
    first = _claim_all(conn)
    assert sorted(j.id for j in first) == [ids[0], other]
    assert _claim_all(conn) == []
    order = job_order(conn, ids[2])
    assert order is not None
    assert (order["waits_for"], order["waits_for_state"]) == (ids[0], "running")
    # The head's completion releases the next, in the completion's own statement.
    complete(conn, [j for j in first if j.id == ids[0]])
    assert _states(conn, "cust-7") == [(ids[1], "available"), (ids[2], "waiting")]
    assert _key_row(conn, "cust-7") == (2, ids[1])
    (second,) = _claim_all(conn)
    assert second.id == ids[1]
    complete(conn, [second])
    (third,) = _claim_all(conn)
    assert third.id == ids[2]
    complete(conn, [third])
    # The last one gone, so is the key's row.
    assert _key_row(conn, "cust-7") is None
    assert _states(conn, "cust-7") == []


def test_a_retry_and_a_snooze_hold_the_key_and_a_discard_lets_it_go(
    conn: psycopg.Connection[Any],
) -> None:
    a = enqueue(conn, "hook", order_key="k")
    b = enqueue(conn, "hook", order_key="k")
    (job,) = _claim_all(conn)
    settle(conn, [Settlement(job, "available", 0.0, 0, "boom")])
    conn.commit()
    # Retried: still the head, b still waits; it runs again before b.
    assert _states(conn, "k") == [(a, "available"), (b, "waiting")]
    (job,) = _claim_all(conn)
    assert job.id == a
    settle(conn, [Settlement(job, "available", 30.0, 1, None)])  # snoozed for later
    conn.commit()
    assert _states(conn, "k") == [(a, "scheduled"), (b, "waiting")]
    conn.execute("UPDATE pgq.jobs SET state = 'available', run_at = now() WHERE id = %s", (a,))
    (job,) = _claim_all(conn)
    settle(conn, [Settlement(job, "discarded", None, 0, "no more")])
    conn.commit()
    assert _states(conn, "k") == [(a, "discarded"), (b, "available")]


def test_unknown_holds_the_key_until_resolved(conn: psycopg.Connection[Any]) -> None:
    a = enqueue(conn, "charge", order_key="acct")
    b = enqueue(conn, "charge", order_key="acct")
    (job,) = _claim_all(conn)
    settle(conn, [Settlement(job, "unknown", None, 0, "timed out")])
    conn.commit()
    assert _states(conn, "acct") == [(a, "unknown"), (b, "waiting")]
    assert _claim_all(conn) == []
    # Resolved as a retry: it runs again, still ahead of b.
    resolve(conn, [a], "retry")
    conn.commit()
    assert _states(conn, "acct") == [(a, "available"), (b, "waiting")]
    (job,) = _claim_all(conn)
    settle(conn, [Settlement(job, "unknown", None, 0, "timed out")])
    conn.commit()
    resolve(conn, [a], "completed")
    conn.commit()
    assert _states(conn, "acct") == [(b, "available")]


def test_cancelling_the_head_or_a_follower(conn: psycopg.Connection[Any]) -> None:
    a, b, c, d = (enqueue(conn, "hook", order_key="k") for _ in range(4))
    # A follower cancelled only leaves the count: the head still holds the key.
    cancel(conn, c)
    conn.commit()
    assert _states(conn, "k") == [
        (a, "available"),
        (b, "waiting"),
        (c, "cancelled"),
        (d, "waiting"),
    ]
    assert _key_row(conn, "k") == (3, a)
    # The head cancelled before it started: the next follower goes.
    cancel(conn, a)
    conn.commit()
    assert _states(conn, "k")[1:] == [(b, "available"), (c, "cancelled"), (d, "waiting")]
    # A running head asked to cancel holds the key until its claim ends, 'cancelled'.
    (job,) = _claim_all(conn)
    assert job.id == b
    cancel(conn, b)
    conn.commit()
    assert dict(_states(conn, "k"))[d] == "waiting"
    settle(conn, [Settlement(job, "available", 0.0, 0, None)])  # would retry: cancelled
    conn.commit()
    assert dict(_states(conn, "k"))[d] == "available"
    # The head and the key's last follower cancelled in one call.
    e = enqueue(conn, "hook", order_key="k2")
    f = enqueue(conn, "hook", order_key="k2")
    cancel(conn, [e, f])
    conn.commit()
    assert _key_row(conn, "k2") is None


def test_an_expired_lease_is_a_retry_and_holds(conn: psycopg.Connection[Any]) -> None:
    a = enqueue(conn, "hook", order_key="k", max_attempts=2)
    b = enqueue(conn, "hook", order_key="k")
    _claim_all(conn)
    conn.execute(
        "UPDATE pgq.jobs SET lease_until = now() - interval '1 second' WHERE id = %s", (a,)
    )
    conn.commit()
    rescue_batch(conn)
    conn.commit()
    assert _states(conn, "k") == [(a, "available"), (b, "waiting")]
    _claim_all(conn)
    conn.execute(
        "UPDATE pgq.jobs SET lease_until = now() - interval '1 second' WHERE id = %s", (a,)
    )
    conn.commit()
    rescue_batch(conn)  # out of attempts: discarded, b goes
    conn.commit()
    assert _states(conn, "k") == [(a, "discarded"), (b, "available")]


def test_a_replayed_dead_letter_joins_its_key_again(conn: psycopg.Connection[Any]) -> None:
    a = enqueue(conn, "hook", order_key="k")
    (job,) = _claim_all(conn)
    settle(conn, [Settlement(job, "discarded", None, 0, "bad")])
    conn.commit()
    assert _key_row(conn, "k") is None
    b = enqueue(conn, "hook", order_key="k")
    # Replayed while b holds the key: it waits behind b.
    replay(conn, ReplayFilter(ids=[a]))
    conn.commit()
    assert _states(conn, "k") == [(a, "waiting"), (b, "available")]
    assert _key_row(conn, "k") == (2, b)
    (job,) = _claim_all(conn)
    assert job.id == b
    complete(conn, [job])
    assert _states(conn, "k") == [(a, "available")]


def test_a_debounce_that_replaces_the_head_keeps_its_place(
    conn: psycopg.Connection[Any],
) -> None:
    # A debounce that replaces the key's head (not started) keeps its place.
    d = enqueue(conn, "hook", {"v": 1}, order_key="d", unique_key="doc", debounce=0)
    e = enqueue(conn, "hook", {"v": 1}, order_key="d")
    assert enqueue(conn, "hook", {"v": 2}, order_key="d", unique_key="doc", debounce=0) == d
    assert _key_row(conn, "d") == (2, d)
    assert _states(conn, "d") == [(d, "available"), (e, "waiting")]
    assert conn.execute("SELECT args FROM pgq.jobs WHERE id = %s", (d,)).fetchone() == ({"v": 2},)


def test_every_enqueue_path_takes_the_key(conn: psycopg.Connection[Any], dsn: str) -> None:
    ids = enqueue_many(
        conn,
        [
            NewJob("hook", {"n": 0}, order_key="m"),
            NewJob("plain", {"n": 1}),
            NewJob("hook", {"n": 2}, order_key="m"),
            NewJob("hook", {"n": 3}, order_key="other"),
        ],
    )
    assert len(set(ids)) == 4
    assert _states(conn, "m") == [(ids[0], "available"), (ids[2], "waiting")]
    batch = enqueue_batch(conn, [NewJob("hook", order_key="m"), NewJob("hook", order_key="b")])
    assert dict(_states(conn, "m"))[batch.job_ids[0]] == "waiting"
    (sql_id,) = conn.execute(
        "SELECT pgq.enqueue('hook', order_key => 'm', priority => 5)"
    ).fetchone()
    assert dict(_states(conn, "m"))[sql_id] == "waiting"
    conn.commit()

    async def run() -> tuple[int, list[int]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            one = await enqueue_async(aconn, "hook", order_key="m")
            many = await enqueue_many_async(aconn, [NewJob("hook", order_key="m")] * 2)
            return one, many

    one, many = asyncio.run(run())
    assert [i for i, _ in _states(conn, "m")] == sorted(
        [ids[0], ids[2], batch.job_ids[0], sql_id, one, *many]
    )
    assert _key_row(conn, "m") == (7, ids[0])


def test_two_producers_of_one_key_keep_their_order(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Two connections enqueue the same key at once: one head, the rest followers, and the
    ids (the order they go in) follow the order their transactions took the key."""
    start = threading.Barrier(2)
    made: dict[str, list[int]] = {}

    def produce(name: str) -> None:
        with psycopg.connect(dsn) as c:
            start.wait()
            mine = []
            for n in range(50):
                mine.append(enqueue(c, "hook", {"by": name, "n": n}, order_key="shared"))
                c.commit()
            made[name] = mine

    threads = [threading.Thread(target=produce, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    states = _states(conn, "shared")
    assert len(states) == 100
    assert [s for _, s in states].count("available") == 1
    assert states[0][1] == "available"
    assert _key_row(conn, "shared") == (100, states[0][0])
    # Each producer's jobs go in its own order.
    for mine in made.values():
        assert mine == sorted(mine)
    # Drained one at a time, in id order.
    ran = []
    while True:
        jobs = _claim_all(conn)
        if not jobs:
            break
        assert len(jobs) == 1
        ran.append(jobs[0].id)
        complete(conn, jobs)
    assert ran == [i for i, _ in states]


@pytest.mark.parametrize(
    "key, said",
    [
        ("", "order_key must not be empty"),
        ("   ", "order_key must not be empty"),
        ("x" * 201, "order_key is 201 characters long"),
        (7, "order_key must be a string"),
        ("a\x00b", "order_key contains a NUL"),
    ],
)
def test_a_bad_order_key_is_refused_before_anything_is_written(
    conn: psycopg.Connection[Any], key: Any, said: str
) -> None:
    for attempt in (
        lambda: enqueue(conn, "hook", order_key=key),
        lambda: enqueue_many(conn, [NewJob("hook"), NewJob("hook", order_key=key)]),
    ):
        with pytest.raises(EnqueueError, match=said):
            attempt()
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgq.order_keys").fetchone() == (0,)


def test_the_sql_function_refuses_a_bad_key(conn: psycopg.Connection[Any]) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="order_key must be 1 to 200"):
        conn.execute("SELECT pgq.enqueue('hook', order_key => ' ')")
    conn.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="order_key must be 1 to 200"):
        conn.execute("SELECT pgq.enqueue('hook', order_key => repeat('k', 201))")


def test_a_follower_holds_its_unique_key_until_it_ends(conn: psycopg.Connection[Any]) -> None:
    head = enqueue(conn, "hook", order_key="k", unique_key="u1")
    follower = enqueue(conn, "hook", {"n": 1}, order_key="k", unique_key="u2")
    assert _states(conn, "k") == [(head, "available"), (follower, "waiting")]
    # Held while it waits, on every path: its id comes back, nothing is added to the key.
    assert enqueue(conn, "hook", {"n": 2}, order_key="k", unique_key="u2") == follower
    assert enqueue(conn, "hook", {"n": 3}, unique_key="u2") == follower
    (sql_id,) = conn.execute(
        "SELECT pgq.enqueue('hook', order_key => 'k', unique_key => 'u2')"
    ).fetchone()
    assert sql_id == follower
    many = enqueue_many(
        conn,
        [
            NewJob("hook", order_key="k", unique_key="u2"),
            NewJob("hook", order_key="k", unique_key="u3"),
            NewJob("hook", order_key="k", unique_key="u3"),
            NewJob("hook", order_key="k"),
        ],
    )
    assert many[0] == follower and many[1] == many[2] and len(set(many)) == 3
    assert [i for i, _ in _states(conn, "k")] == [head, follower, many[1], many[3]]
    assert _key_row(conn, "k") == (4, head)
    assert conn.execute("SELECT args FROM pgq.jobs WHERE id = %s", (follower,)).fetchone() == (
        {"n": 1},
    )
    # A dead letter with the key stays dead while the follower holds it.
    (dead,) = conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, args, state, unique_key, finished_at) "
        "VALUES ('default', 'hook', '{}', 'discarded', 'u2', now()) RETURNING id"
    ).fetchone()
    replay(conn, ReplayFilter(ids=[dead]))
    assert conn.execute("SELECT state FROM pgq.jobs WHERE id = %s", (dead,)).fetchone() == (
        "discarded",
    )
    # Once it has ended, the key is free again.
    for expected in (head, follower):
        (job,) = _claim_all(conn)
        assert job.id == expected
        complete(conn, [job])
    fresh = enqueue(conn, "hook", order_key="k", unique_key="u2")
    assert fresh not in (head, follower, *many)
    assert _key_row(conn, "k") == (3, many[1])


def test_bulk_enqueues_of_the_same_keys_at_once_neither_deadlock_nor_reorder(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """Two connections enqueue many jobs over the same keys, given in opposite orders: the keys'
    rows are taken in key order, so neither waits for the other in a cycle, and each key ends
    with one head and its followers in id order."""
    keys = [f"k{i}" for i in range(20)]
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def produce(order: list[str]) -> None:
        try:
            with psycopg.connect(dsn) as c:
                start.wait()
                for _ in range(5):
                    enqueue_many(c, [NewJob("hook", order_key=k) for k in order for _ in range(3)])
                    c.commit()
        except BaseException as exc:  # a deadlock would surface here
            failures.append(exc)

    threads = [threading.Thread(target=produce, args=(o,)) for o in (keys, keys[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    for k in keys:
        states = _states(conn, k)
        assert len(states) == 30
        assert [s for _, s in states] == ["available"] + ["waiting"] * 29
        assert _key_row(conn, k) == (30, states[0][0])


def test_a_bulk_debounce_with_an_order_key_replaces_the_head(
    conn: psycopg.Connection[Any],
) -> None:
    head = enqueue(conn, "hook", {"v": 1}, order_key="d", unique_key="doc", debounce=0)
    ids = enqueue_many(
        conn,
        [
            NewJob("hook", {"v": 2}, order_key="d", unique_key="doc", debounce=0),
            NewJob("hook", {"v": 3}, order_key="d"),
        ],
    )
    assert ids[0] == head
    assert _states(conn, "d") == [(head, "available"), (ids[1], "waiting")]
    assert _key_row(conn, "d") == (2, head)


def test_jobs_show_says_what_a_follower_waits_for(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    head = enqueue(conn, "hook", order_key="cust-7")
    follower = enqueue(conn, "hook", order_key="cust-7")
    enqueue(conn, "hook", order_key="cust-7")
    _claim_all(conn)
    shown = cli("jobs", "show", str(follower))
    assert shown.code == 0
    assert (
        f"order key   cust-7: waits for job {head} (running) to end; 3 unfinished in the key"
        in shown.out
    )
    assert (
        "order key   cust-7: holds its key; 2 waiting behind it"
        in cli("jobs", "show", str(head)).out
    )
    document = json.loads(cli("jobs", "show", str(follower), "--json").out)
    assert document["order"] == {
        "key": "cust-7",
        "waits_for_parents": False,
        "waits_for": head,
        "waits_for_state": "running",
        "holds_key": False,
        "unfinished": 3,
    }
    plain = enqueue(conn, "hook")
    assert json.loads(cli("jobs", "show", str(plain), "--json").out)["order"] is None


def test_producers_and_completions_of_the_same_keys_at_once(
    dsn: str, conn: psycopg.Connection[Any]
) -> None:
    """A producer enqueues on three keys while two workers claim and complete: the enqueue and
    the head's ending serialise on the key's row, so no follower is left behind, the jobs of a
    key complete in id order, and the keys' rows are gone at the end."""
    total = 150
    produced = threading.Event()
    completed: list[tuple[str, int]] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with psycopg.connect(dsn) as c:
                for n in range(total):
                    enqueue(c, "hook", {"n": n}, order_key=f"k{n % 3}")
                    c.commit()
        except BaseException as exc:
            failures.append(exc)
        finally:
            produced.set()

    def work(name: str) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as c:
                idle = 0
                while idle < 50:
                    jobs = claim(c, "default", worker=f"h:1:{name}", limit=3)
                    if not jobs:
                        idle = idle + 1 if produced.is_set() else 0
                        continue
                    with lock:
                        completed.extend((f"k{j.args['n'] % 3}", j.id) for j in jobs)
                    complete(c, jobs)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=produce)] + [
        threading.Thread(target=work, args=(n,)) for n in ("a", "b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(completed) == total
    for key in ("k0", "k1", "k2"):
        ids = [job_id for k, job_id in completed if k == key]
        assert ids == sorted(ids), key
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM pgq.order_keys").fetchone() == (0,)


def test_a_debounce_replaces_its_follower_still_waiting(conn: psycopg.Connection[Any]) -> None:
    head = enqueue(conn, "hook", {"v": 0}, order_key="d")
    first = enqueue(conn, "hook", {"v": 1}, order_key="d", unique_key="doc", debounce=5)
    behind = enqueue(conn, "hook", {"v": 9}, order_key="d")
    (was,) = conn.execute("SELECT run_at FROM pgq.jobs WHERE id = %s", (first,)).fetchone()
    # Debounced again, on every path, while it waits behind the head: replaced, not added.
    assert enqueue(conn, "hook", {"v": 2}, order_key="d", unique_key="doc", debounce=60) == first
    (bulk,) = enqueue_many(
        conn, [NewJob("hook", {"v": 3}, order_key="d", unique_key="doc", debounce=60)]
    )
    assert bulk == first
    (sql_id,) = conn.execute(
        "SELECT pgq.enqueue('hook', '{\"v\": 4}', order_key => 'd', unique_key => 'doc', "
        "debounce => interval '60 seconds')"
    ).fetchone()
    assert sql_id == first
    assert _states(conn, "d") == [(head, "available"), (first, "waiting"), (behind, "waiting")]
    assert _key_row(conn, "d") == (3, head)
    args, run_at = conn.execute(
        "SELECT args, run_at FROM pgq.jobs WHERE id = %s", (first,)
    ).fetchone()
    assert args == {"v": 4}
    assert (run_at - was).total_seconds() > 50
    # Released by the head's ending, it keeps its place and waits for its run_at.
    (job,) = _claim_all(conn)
    complete(conn, [job])
    assert _states(conn, "d") == [(first, "scheduled"), (behind, "waiting")]
