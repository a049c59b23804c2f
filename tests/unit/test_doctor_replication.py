"""The replication family's judgement (supervisor/doctor/replication.py): pure, over the
``replication`` document of sql/doctor.sql as a primary or a standby returns it."""

from __future__ import annotations

from typing import Any

from supervisor.doctor.replication import LAG_WARN_BYTES, judge


def standby(**over: Any) -> dict[str, Any]:
    row = {
        "application_name": "node2",
        "client": "10.231.4.1",
        "state": "streaming",
        "sync_state": "async",
        "replay_lag_bytes": 4096,
        "replay_lag_seconds": 0.01,
        "backend_xmin": "1234",
        "xid_age": 3,
    }
    return row | over


def primary(*standbys: dict[str, Any], names: str = "") -> dict[str, Any]:
    return {
        "in_recovery": False,
        "synchronous_standby_names": names,
        "synchronous_commit": "on",
        "hot_standby_feedback": "off",
        "standbys": list(standbys),
    }


def by_name(doc: dict[str, Any]) -> dict[str, Any]:
    return {c.name: c for c in judge(doc)}


def test_a_standby_is_a_failure_naming_its_source_and_the_fix() -> None:
    doc = {
        "in_recovery": True,
        "hot_standby_feedback": "on",
        "receiver": {"status": "streaming", "sender_host": "10.231.4.2", "sender_port": 55431},
        "replay_delay_seconds": 2.0,
        "unreplayed_bytes": 0,
        "standbys": [],
    }
    (check,) = judge(doc)
    assert check.name == "replication.role" and check.status == "fail"
    assert "standby" in check.detail and "10.231.4.2:55431" in check.detail
    assert "read-only" in check.detail and "target_session_attrs=read-write" in check.fix


def test_an_asynchronous_standby_says_what_a_failover_loses_and_its_feedback_xmin() -> None:
    checks = by_name(primary(standby()))
    assert checks["replication.role"].passed
    assert "asynchronous" in checks["replication.role"].detail
    lag = checks["replication.standby.node2"]
    assert lag.passed and "xmin 1234 through hot_standby_feedback" in lag.detail
    slotted = by_name(primary(standby(slot_name="node2")))["replication.standby.node2"]
    assert "kept in slot node2" in slotted.detail


def test_a_standby_far_behind_warns() -> None:
    lag = by_name(primary(standby(replay_lag_bytes=LAG_WARN_BYTES)))["replication.standby.node2"]
    assert lag.status == "warn" and "loses that" in lag.detail
    sync = by_name(primary(standby(sync_state="sync", replay_lag_seconds=30.0), names="node2"))
    assert sync["replication.standby.node2"].status == "warn"
    assert "waits for it" in sync["replication.standby.node2"].detail
    assert (
        sync["replication.role"].passed and "synchronous (1 of 1" in sync["replication.role"].detail
    )


def test_a_synchronous_standby_missing_makes_commits_wait() -> None:
    alone = by_name(primary(names='"node2"'))["replication.role"]
    assert alone.status == "fail" and "every commit waits" in alone.detail
    unsynced = by_name(primary(standby(state="catchup"), names="node2"))
    assert unsynced["replication.role"].status == "fail"
    assert unsynced["replication.standby.node2"].status == "warn"


def test_a_primary_alone_is_ok() -> None:
    (check,) = judge(primary())
    assert check.passed and "no standby" in check.detail
