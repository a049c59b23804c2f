"""One job, three ways in: the sync API, the async API and the SQL function pgq.enqueue. The
rows must be the same, and bad input must be refused by each before anything is written."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from typing import Any

import psycopg
import pytest

from supervisor import (
    EnqueueError,
    NewJob,
    enqueue,
    enqueue_async,
    enqueue_many,
    enqueue_many_async,
)

COLUMNS = "queue, kind, args, priority, run_at, state, attempts, max_attempts, unique_key, tenant"
RUN_AT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
CASES: list[dict[str, Any]] = [
    {"kind": "plain", "args": {}},
    {
        "kind": "full",
        "args": {"n": 1, "s": "é", "l": [1, None]},
        "queue": "q",
        "priority": -7,
        "run_at": RUN_AT,
        "max_attempts": 3,
        "unique_key": "u-1",
        "tenant": "acme",
    },
]


def _rows(conn: psycopg.Connection[Any], ids: list[int]) -> list[tuple[Any, ...]]:
    return [
        conn.execute(f"SELECT {COLUMNS} FROM pgq.jobs WHERE id = %s", (i,)).fetchone() for i in ids
    ]


def _sql_enqueue(conn: psycopg.Connection[Any], case: dict[str, Any]) -> int:
    params = {**case, "args": json.dumps(case["args"])}
    names = ", ".join(f"{k} => %({k})s" for k in params if k != "args")
    row = conn.execute(f"SELECT pgq.enqueue(args => %(args)s::jsonb, {names})", params).fetchone()
    assert row is not None
    return int(row[0])


def _fresh(conn: psycopg.Connection[Any]) -> None:
    # Unique keys hold while a job waits: clear between the ways in.
    conn.execute("DELETE FROM pgq.jobs")


def test_sync_async_and_sql_enqueue_write_the_same_rows(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        sync_ids = [enqueue(conn, **case) for case in CASES]
        sync_rows = _rows(conn, sync_ids)
        assert enqueue(conn, **CASES[1]) == sync_ids[1]  # the key is held: same id
        _fresh(conn)
        sql_ids = [_sql_enqueue(conn, case) for case in CASES]
        assert _sql_enqueue(conn, CASES[1]) == sql_ids[1]
        sql_rows = _rows(conn, sql_ids)
        _fresh(conn)

        async def through_async() -> list[int]:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
                ids = [await enqueue_async(aconn, **case) for case in CASES]
                assert await enqueue_async(aconn, **CASES[1]) == ids[1]
                return ids

        async_rows = _rows(conn, asyncio.run(through_async()))
        _fresh(conn)
        many_ids = enqueue_many(conn, [NewJob(**case) for case in CASES])
        many_rows = _rows(conn, many_ids)
        _fresh(conn)

        async def many_async() -> list[int]:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
                return await enqueue_many_async(aconn, [NewJob(**case) for case in CASES])

        many_async_rows = _rows(conn, asyncio.run(many_async()))

    # run_at defaults to now(): compare the rows with it masked for the job without one.
    def masked(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [(*r[:4], r[4] if r[4] == RUN_AT else "now", *r[5:]) for r in rows]

    expected = masked(sync_rows)
    assert expected[1][4] == RUN_AT
    for rows in (sql_rows, async_rows, many_rows, many_async_rows):
        assert masked(rows) == expected


def test_async_enqueue_joins_the_callers_transaction_and_notifies_at_commit(dsn: str) -> None:
    async def scenario() -> tuple[int, list[str]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as listener:
            await listener.execute("LISTEN pgq_jobs")
            await listener.execute(  # the wake-up flags of a master with idle children
                "SELECT * FROM pgq.want_wakeups('test', ARRAY['default', 'q'])"
            )
            async with await psycopg.AsyncConnection.connect(dsn) as aconn:
                async with aconn.transaction(force_rollback=True):
                    await enqueue_async(aconn, "lost")
                async with aconn.transaction():
                    await enqueue_async(aconn, "kept", queue="q")
            seen = []
            async for note in listener.notifies(timeout=5.0, stop_after=1):
                seen.append(note.payload)
            cur = await listener.execute("SELECT count(*) FROM pgq.jobs")
            row = await cur.fetchone()
            assert row is not None
            return int(row[0]), seen

    count, seen = asyncio.run(scenario())
    assert (count, seen) == (1, ["q"])


@pytest.mark.parametrize(
    ("case", "python_error", "sql_error"),
    [
        ({"kind": ""}, "kind must not be empty", "kind must not be empty"),
        ({"kind": "k", "queue": " "}, "queue must not be empty", "queue must not be empty"),
        ({"kind": "k", "priority": 40000}, "outside -32768..32767", "outside -32768..32767"),
        ({"kind": "k", "max_attempts": 0}, "at least 1", "at least 1"),
        ({"kind": "k", "tenant": " "}, "tenant must not be empty", "tenant must be 1 to 200"),
        ({"kind": "k", "tenant": "t" * 201}, "tenant is 201 characters", "tenant must be 1 to 200"),
        ({"kind": "k", "tenant": "a\nb"}, "tenant .* U\\+000A", "printable"),
        (
            {"kind": "k", "args": {"b": "x" * 300_000}},
            "the limit is 262144 bytes",
            "the limit is 262144 bytes",
        ),
    ],
)
def test_bad_input_is_refused_by_every_way_in(
    dsn: str, case: dict[str, Any], python_error: str, sql_error: str
) -> None:
    case = {"args": {}, **case}
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(EnqueueError, match=python_error):
            enqueue(conn, **case)

        async def through_async() -> None:
            async with await psycopg.AsyncConnection.connect(dsn) as aconn:
                await enqueue_async(aconn, **case)

        with pytest.raises(EnqueueError, match=python_error):
            asyncio.run(through_async())
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=sql_error):
            _sql_enqueue(conn, case)
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="must be a JSON object"):
            conn.execute("SELECT pgq.enqueue('k', '[1]'::jsonb)")
        assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_sql_enqueue_in_a_trigger(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        """
        CREATE TABLE orders (id serial PRIMARY KEY, total int);
        CREATE FUNCTION orders_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pgq.enqueue('ship', jsonb_build_object('order_id', NEW.id), 'shipping');
            RETURN NEW;
        END $$;
        CREATE TRIGGER orders_enqueue AFTER INSERT ON orders
            FOR EACH ROW EXECUTE FUNCTION orders_enqueue();
        INSERT INTO orders (total) VALUES (10), (20);
        """
    )
    rows = conn.execute("SELECT kind, queue, args FROM pgq.jobs ORDER BY id").fetchall()
    assert rows == [("ship", "shipping", {"order_id": 1}), ("ship", "shipping", {"order_id": 2})]


def test_enqueue_on_a_shared_connection_any_row_factory_and_concurrent_callers(dsn: str) -> None:
    """The enqueue functions reuse one cursor per connection (client CPU): each call still
    gets its own job's id when threads or tasks share the connection, and the connection's
    row_factory is the caller's business, not the enqueue's."""
    import threading

    from psycopg.rows import dict_row

    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        one = enqueue(conn, "shared")
        many = enqueue_many(conn, [NewJob("shared"), NewJob("shared", unique_key="k")])
        assert enqueue_many(conn, [NewJob("shared", unique_key="k")]) == [many[1]]
        ids: list[int] = []

        def produce() -> None:
            for _ in range(50):
                ids.append(enqueue(conn, "shared"))

        threads = [threading.Thread(target=produce) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stored = conn.execute("SELECT id FROM pgq.jobs WHERE kind = 'shared'").fetchall()
        assert sorted([one, *many, *ids]) == sorted(r["id"] for r in stored)
        assert len(set(ids)) == 200

    async def tasks() -> list[int]:
        async with await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, row_factory=dict_row
        ) as aconn:
            singles = await asyncio.gather(*(enqueue_async(aconn, "t") for _ in range(20)))
            batches = await asyncio.gather(
                *(enqueue_many_async(aconn, [NewJob("t"), NewJob("t")]) for _ in range(10))
            )
            return [*singles, *(i for b in batches for i in b)]

    got = asyncio.run(tasks())
    with psycopg.connect(dsn) as conn:
        stored_ids = [r[0] for r in conn.execute("SELECT id FROM pgq.jobs WHERE kind = 't'")]
    assert len(set(got)) == 40 and sorted(got) == sorted(stored_ids)
