"""The database's clock, which the command line's and the dashboard's ages and cutoffs use."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg

from supervisor.queue.queries import query


def server_clock(conn: psycopg.Connection[Any]) -> datetime:
    """The database's now(): ages and cutoffs use the server's clock, not this machine's."""
    row = conn.execute(query("clock")).fetchone()
    assert row is not None
    moment: datetime = row[0]
    return moment
