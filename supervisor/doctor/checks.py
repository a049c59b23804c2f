"""Every family of checks, in the order the report shows them, and one call to run them all."""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor.config import Config
from supervisor.doctor import claim, headroom, horizon, pressure, replication, vacuum
from supervisor.doctor.check import Check
from supervisor.doctor.runner import Family, Probe, bound, run_families


def families() -> list[Family]:
    return [
        horizon.family(),
        vacuum.family(),
        claim.family(),
        pressure.family(),
        headroom.family(),
        replication.family(),
    ]


def diagnose(conn: psycopg.Connection[Any], config: Config) -> list[Check]:
    """Run every check on ``conn`` (autocommit; its timeouts become the doctor's)."""
    bound(conn, config.doctor.statement_timeout)
    return run_families(Probe(conn, config), families())
