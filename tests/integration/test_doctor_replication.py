"""The replication family on a real server: the test server is a primary with no standby (the
failover drill runs it on a Patroni pair, primary and standby: scripts/drills/failover_drill.py)."""

from __future__ import annotations

import psycopg

from supervisor.doctor import replication
from supervisor.doctor.checks import diagnose
from supervisor.doctor.runner import Probe
from tests.integration.test_doctor import config


def test_the_test_server_is_a_primary_with_no_standby(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        doc = Probe(conn, config()).document("replication")
        checks = replication.judge(doc)
    assert doc["in_recovery"] is False and doc["standbys"] == []
    assert [(c.name, c.status) for c in checks] == [("replication.role", "ok")]
    assert "no standby streams from it" in checks[0].detail


def test_the_doctor_runs_the_family(dsn: str) -> None:

    with psycopg.connect(dsn, autocommit=True) as conn:
        names = [c.name for c in diagnose(conn, config())]
    assert "replication.role" in names
