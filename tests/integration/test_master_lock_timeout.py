"""A master's statement that waits past its lock timeout (rows another session holds, as a
primary cut off from its synchronous standby holds every waiting commit's rows: the failover
drill's network cut) is a warning that says why, not an error, and the session stays good."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
import pytest

from supervisor.sessions.database import MasterDatabase
from tests.master_session import connected


def test_a_lock_timeout_is_a_warning_naming_the_lock_and_the_session_stays_good(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE held (id int PRIMARY KEY)")
        setup.execute("INSERT INTO held VALUES (1)")
    db = connected(MasterDatabase(dsn, name="master", connect_timeout=5))
    try:
        with psycopg.connect(dsn) as holder:
            holder.execute("SELECT id FROM held WHERE id = 1 FOR UPDATE")

            def touch(conn: psycopg.Connection[Any]) -> int:
                row = conn.execute("UPDATE held SET id = id WHERE id = 1 RETURNING id").fetchone()
                return int(row[0]) if row else 0

            with caplog.at_level(logging.DEBUG, logger="pgq"):
                assert db.run("wake-up flags", touch) is None
            said = [r for r in caplog.records if "wake-up flags" in r.getMessage()]
            assert [r.levelno for r in said] == [logging.WARNING], said
            assert "lock timeout" in said[0].getMessage()
            assert "synchronous standby" in said[0].getMessage()
            holder.rollback()
        assert db.run("wake-up flags", touch) == 1  # the same session, still good
        assert db.reachable
    finally:
        db.close()
