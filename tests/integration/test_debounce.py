"""Debounce (issue 33): ``enqueue(..., unique_key=K, debounce=SECONDS)`` on a real database.

While the job debounced under K has not started, a new debounced enqueue replaces its
arguments and moves it later; once it has started, a new job is enqueued. Every enqueue path
(sync, async, bulk, SQL) does the same, two producers at once leave one job with the later
arguments, and bad input is refused before anything is written.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from supervisor import (
    EnqueueError,
    NewJob,
    claim,
    enqueue,
    enqueue_async,
    enqueue_many,
    enqueue_many_async,
)


def _jobs(conn: psycopg.Connection[Any], key: str) -> list[tuple[Any, ...]]:
    return conn.execute(
        "SELECT id, state, args, run_at - now() > interval '50 seconds', unique_key "
        "FROM pgq.jobs WHERE debounce_key = %s ORDER BY id",
        (key,),
    ).fetchall()


def test_a_waiting_job_takes_the_new_arguments_and_moves_later(
    conn: psycopg.Connection[Any],
) -> None:
    first = enqueue(conn, "reindex", {"v": 1}, unique_key="doc:1", debounce=60)
    conn.execute(
        "UPDATE pgq.jobs SET run_at = now() + interval '5 seconds' WHERE id = %s", (first,)
    )
    again = enqueue(conn, "reindex", {"v": 2}, unique_key="doc:1", debounce=60)
    assert again == first
    # One job, the last arguments, due a minute after the last enqueue; the unique key is free.
    assert _jobs(conn, "doc:1") == [(first, "scheduled", {"v": 2}, True, None)]
    # Another key is another job.
    other = enqueue(conn, "reindex", {"v": 1}, unique_key="doc:2", debounce=60)
    assert other != first


def test_a_debounce_of_zero_is_due_now_and_still_replaces(conn: psycopg.Connection[Any]) -> None:
    first = enqueue(conn, "reindex", {"v": 1}, unique_key="doc", debounce=0)
    assert enqueue(conn, "reindex", {"v": 2}, unique_key="doc", debounce=timedelta(0)) == first
    state, args = conn.execute(
        "SELECT state, args FROM pgq.jobs WHERE id = %s", (first,)
    ).fetchone()
    assert (state, args) == ("available", {"v": 2})


def test_a_started_job_is_left_alone_and_a_new_one_is_enqueued(
    conn: psycopg.Connection[Any],
) -> None:
    first = enqueue(conn, "reindex", {"v": 1}, unique_key="doc", debounce=0)
    (job,) = claim(conn, "default", worker="h:1:a")
    assert job.id == first
    second = enqueue(conn, "reindex", {"v": 2}, unique_key="doc", debounce=60)
    assert second != first
    assert [r[:3] for r in _jobs(conn, "doc")] == [
        (first, "running", {"v": 1}),
        (second, "scheduled", {"v": 2}),
    ]
    # The running job given back (released) does not take the key again: the new one keeps it.
    conn.execute(
        "UPDATE pgq.jobs SET state = 'available', lease_id = NULL, locked_by = NULL, "
        "lease_until = NULL, attempts = 0 WHERE id = %s",
        (first,),
    )
    assert enqueue(conn, "reindex", {"v": 3}, unique_key="doc", debounce=60) == second


def test_every_path_debounces(conn: psycopg.Connection[Any], dsn: str) -> None:
    ids = enqueue_many(
        conn,
        [
            NewJob("reindex", {"v": 1}, unique_key="a", debounce=60),
            NewJob("plain", {"n": 1}),
            NewJob("reindex", {"v": 1}, unique_key="b", debounce=60),
            NewJob("reindex", {"v": 2}, unique_key="a", debounce=60),
            NewJob("plain", {"n": 2}),
        ],
    )
    assert ids[0] == ids[3] and len(set(ids)) == 4
    assert _jobs(conn, "a")[0][2] == {"v": 2}
    assert conn.execute(
        "SELECT args FROM pgq.jobs WHERE id = ANY(%s) AND kind = 'plain' ORDER BY id",
        ([ids[1], ids[4]],),
    ).fetchall() == [({"n": 1},), ({"n": 2},)]
    assert ids[0] == enqueue(conn, "reindex", {"v": 3}, unique_key="a", debounce=60)

    async def through_async() -> tuple[int, list[int]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            one = await enqueue_async(aconn, "reindex", {"v": 4}, unique_key="a", debounce=60)
            many = await enqueue_many_async(
                aconn, [NewJob("reindex", {"v": 5}, unique_key="b", debounce=60)]
            )
            return one, many

    one, many = asyncio.run(through_async())
    assert (one, many) == (ids[0], [ids[2]])
    (sql_id,) = conn.execute(
        "SELECT pgq.enqueue('reindex', '{\"v\": 6}', unique_key => 'a', "
        "debounce => interval '60 seconds')"
    ).fetchone()
    assert sql_id == ids[0]
    assert _jobs(conn, "a") == [(ids[0], "scheduled", {"v": 6}, True, None)]
    assert _jobs(conn, "b")[0][2] == {"v": 5}
    # The SQL function, with no job waiting, makes one, due now with a zero debounce.
    (new,) = conn.execute(
        "SELECT pgq.enqueue('reindex', '{}', unique_key => 'c', debounce => interval '0')"
    ).fetchone()
    assert conn.execute("SELECT state FROM pgq.jobs WHERE id = %s", (new,)).fetchone() == (
        "available",
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"debounce": 5}, "debounce needs a unique_key"),
        ({"debounce": 5, "unique_key": "k", "delay": 1}, "give debounce or delay"),
        ({"debounce": -1, "unique_key": "k"}, "debounce must be zero or more"),
        ({"debounce": "5", "unique_key": "k"}, "debounce must be seconds"),
        ({"debounce": float("nan"), "unique_key": "k"}, "debounce must be zero or more"),
    ],
)
def test_bad_debounces_are_refused_before_anything_is_written(
    conn: psycopg.Connection[Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(EnqueueError, match=message):
        enqueue(conn, "reindex", {}, **kwargs)
    with pytest.raises(EnqueueError, match=message):
        enqueue_many(conn, [NewJob("plain"), NewJob("reindex", {}, **kwargs)])
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_the_sql_function_refuses_bad_debounces(conn: psycopg.Connection[Any]) -> None:
    for call, message in [
        ("pgq.enqueue('k', debounce => interval '1s')", "debounce needs a unique_key"),
        (
            "pgq.enqueue('k', unique_key => 'u', run_at => now(), debounce => interval '1s')",
            "give debounce or run_at",
        ),
        ("pgq.enqueue('k', unique_key => 'u', debounce => interval '-1s')", "zero to a century"),
    ]:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=message):
            conn.execute(f"SELECT {call}")
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_two_producers_at_once_leave_one_job_with_the_later_arguments(dsn: str) -> None:
    with (
        psycopg.connect(dsn) as first,
        psycopg.connect(dsn) as second,
        psycopg.connect(dsn, autocommit=True) as watch,
    ):
        a = enqueue(first, "reindex", {"by": "first"}, unique_key="doc", debounce=30)
        done: list[int] = []
        # The second producer's upsert waits for the first's uncommitted row, then updates it.
        thread = threading.Thread(
            target=lambda: done.append(
                enqueue(second, "reindex", {"by": "second"}, unique_key="doc", debounce=30)
            )
        )
        thread.start()
        waiting = False
        for _ in range(100):
            (waiting,) = watch.execute(
                "SELECT count(*) > 0 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchone()
            if waiting:
                break
            threading.Event().wait(0.05)
        assert waiting, "the second producer should wait for the first's row"
        first.commit()
        thread.join(10)
        second.commit()
        assert done == [a]
        assert watch.execute(
            "SELECT id, args FROM pgq.jobs WHERE debounce_key = 'doc'"
        ).fetchall() == [(a, {"by": "second"})]
