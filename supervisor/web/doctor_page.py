"""The dashboard's /doctor page: the doctor's cheap checks, read on the page's connection.

The horizon, the dead rows and autovacuum, and the pressure checks: catalog and statistics
views only, in one transaction cut short past ``TIMEOUT``, judged by the doctor's own rules
(supervisor/doctor/). The claim's EXPLAIN ANALYZE, the bloat count and the headroom sample stay
with `pgq-supervisor doctor`: a page refreshed every few seconds must not run them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from supervisor.config import Config, DoctorConfig, LeaseConfig
from supervisor.doctor import Check, horizon, pressure, vacuum
from supervisor.doctor.sql import doctor_query
from supervisor.queue.queries import query

TIMEOUT = "2s"


@dataclass(frozen=True)
class DoctorView:
    now: datetime
    checks: list[Check]

    @property
    def problems(self) -> list[Check]:
        return sorted((c for c in self.checks if not c.passed), key=lambda c: c.status != "fail")


async def _document(conn: AsyncConnection[Any], name: str, params: Any = None) -> Any:
    cursor = await conn.execute(doctor_query(name), params)
    row = await cursor.fetchone()
    value = row[0] if row else None
    return json.loads(value) if isinstance(value, str) else value or {}


async def read(pool: AsyncConnectionPool[Any], config: Config | None) -> DoctorView:
    thresholds = config.doctor if config else DoctorConfig()
    renew_every = (config.lease if config else LeaseConfig()).renew_every
    async with pool.connection() as conn, conn.transaction():
        await conn.execute(doctor_query("local_timeout"), {"timeout": TIMEOUT})
        clock = await (await conn.execute(query("clock"))).fetchone()
        seen = await _document(conn, "horizon")
        tables = await _document(conn, "vacuum")
        pressing = await _document(conn, "pressure", {"lease_margin": renew_every})
    checks = [
        *horizon.judge(seen, thresholds),
        vacuum.dead_rows(tables, thresholds),
        vacuum.autovacuum(tables),
        *pressure.judge(pressing, thresholds, renew_every),
    ]
    assert clock is not None
    return DoctorView(clock[0], checks)
