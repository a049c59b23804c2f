"""The real supervisor's /metrics and /readyz carry the doctor's horizon check: the holder's
pid and age as gauges, the dead rows, and a `doctor:` line in /readyz naming the culprit."""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable

import psycopg

from supervisor import NewJob, enqueue_many
from supervisor.config import parse_config
from supervisor.doctor import claim
from tests.integration.test_doctor import held_by, session
from tests.lifecycle.harness import Supervisor, wait_for
from tests.lifecycle.test_metrics import config, free_port, get, scrape, wait_ready


def test_the_horizon_holder_is_a_gauge_and_a_readyz_line(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    port = free_port()
    with session(ledger, "forgotten-tx") as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_current_xact_id()")
        pid = holder.info.backend_pid
        wait_for(held_by(ledger, pid), 20, what="the horizon held")
        supervisor(config(port, processes=1, extra="doctor: {horizon_age: 1s}")).start()
        wait_ready(port)
        exposition = wait_for(
            lambda: (e := scrape(port)) and e.get("pgq_xmin_horizon_holder_pid") == pid and e,
            30,
            what="the holder's pid in /metrics",
        )
        assert exposition.value("pgq_xmin_horizon_age_seconds") >= 1
        assert exposition.get("pgq_jobs_dead_rows") is not None
        status, body = get(port, "/readyz")
        assert status == 200, body  # another application's transaction is not ours to fail on
        assert body.startswith("ready\n")
        line = f"horizon.backends: the xmin horizon is held by pid {pid} "
        assert f"doctor: warn {line}" in body or f"doctor: fail {line}" in body, body
        holder.execute("ROLLBACK")
    wait_for(
        lambda: scrape(port).get("pgq_xmin_horizon_holder_pid") != pid,
        30,
        what="the holder gone from /metrics",
    )
    assert f"pid {pid} " not in get(port, "/readyz")[1]


def test_the_doctor_reads_claim_latency_from_the_childrens_histogram(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    port = free_port()
    text = config(port, processes=1)
    supervisor(text).start()
    wait_ready(port)
    cfg = parse_config(textwrap.dedent(text), source="sup.yaml")
    with psycopg.connect(ledger, autocommit=True) as conn:
        enqueue_many(conn, [NewJob("record") for _ in range(20)])
    found = wait_for(
        lambda: (c := claim.latency(cfg)) and "claims, mean" in c.detail and c,
        30,
        what="claims counted",
    )
    assert found.passed, found
    assert "pool main: " in found.detail and "p99 under " in found.detail
    # With nothing listening there, it says it could not measure.
    elsewhere = dataclasses.replace(cfg, metrics=dataclasses.replace(cfg.metrics, port=free_port()))
    missed = claim.latency(elsewhere)
    assert missed.passed and missed.detail.startswith("not measured: no supervisor answers")
