"""The README's framework recipes, run for real: Django (psycopg 3 backend) and SQLAlchemy 2
(Session and AsyncSession on the psycopg driver) enqueue inside their own transactions, and a
rollback leaves no job."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from supervisor import enqueue, enqueue_async


def _jobs(dsn: str) -> list[tuple[str, Any]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT kind, args FROM pgq.jobs ORDER BY id").fetchall()


def _orders(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, total int NOT NULL)")


class Boom(Exception):
    pass


def test_django_enqueues_inside_transaction_atomic(dsn: str) -> None:
    django = pytest.importorskip("django")
    from django.conf import settings

    _orders(dsn)
    params = conninfo_to_dict(dsn)
    database = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.get("dbname"),
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
    }
    if not settings.configured:
        settings.configure(DATABASES={"default": database}, USE_TZ=True)
        django.setup()
    from django.db import connection, transaction

    connection.close()
    connection.settings_dict.update(database)
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO orders (total) VALUES (10) RETURNING id")
                (order_id,) = cursor.fetchone()
            # Django's own psycopg 3 connection, in Django's transaction.
            enqueue(connection.connection, "ship", {"order_id": order_id})
        with pytest.raises(Boom), transaction.atomic():
            enqueue(connection.connection, "ship", {"order_id": -1})
            raise Boom
    finally:
        connection.close()
    assert connection.vendor == "postgresql"
    assert _jobs(dsn) == [("ship", {"order_id": order_id})]


def test_sqlalchemy_session_enqueues_inside_its_transaction(dsn: str) -> None:
    sqlalchemy = pytest.importorskip("sqlalchemy")
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    _orders(dsn)
    engine = sqlalchemy.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))
    try:
        with Session(engine) as session, session.begin():
            order_id = session.execute(
                text("INSERT INTO orders (total) VALUES (10) RETURNING id")
            ).scalar_one()
            raw = session.connection().connection.driver_connection
            enqueue(raw, "ship", {"order_id": order_id})
        with pytest.raises(Boom), Session(engine) as session, session.begin():
            enqueue(session.connection().connection.driver_connection, "ship", {"order_id": -1})
            raise Boom
    finally:
        engine.dispose()
    assert _jobs(dsn) == [("ship", {"order_id": order_id})]


def test_sqlalchemy_async_session_enqueues_inside_its_transaction(dsn: str) -> None:
    pytest.importorskip("sqlalchemy")
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

    _orders(dsn)

    async def scenario() -> int:
        engine = create_async_engine(
            "postgresql+psycopg://",
            async_creator=lambda: psycopg.AsyncConnection.connect(dsn),
        )
        try:
            async with AsyncSession(engine) as session, session.begin():
                result = await session.execute(
                    text("INSERT INTO orders (total) VALUES (10) RETURNING id")
                )
                order_id = result.scalar_one()
                raw = await (await session.connection()).get_raw_connection()
                await enqueue_async(raw.driver_connection, "ship", {"order_id": order_id})
            with pytest.raises(Boom):
                async with AsyncSession(engine) as session, session.begin():
                    raw = await (await session.connection()).get_raw_connection()
                    await enqueue_async(raw.driver_connection, "ship", {"order_id": -1})
                    raise Boom
            return int(order_id)
        finally:
            await engine.dispose()

    order_id = asyncio.run(scenario())
    assert _jobs(dsn) == [("ship", {"order_id": order_id})]
