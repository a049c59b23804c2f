"""`status --watch` refreshes until stopped (issue 35), and `queues list` names every queue."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg

from supervisor import enqueue
from tests.commands import run_cli
from tests.integration.operator_helpers import CONFIG, Cli


def test_status_watch_refreshes(tmp_path: Path, dsn: str, conn: psycopg.Connection[Any]) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(CONFIG)
    enqueue(conn, "render_pdf", queue="pdf")
    env = {**os.environ, "PGQ_DSN": dsn}
    text = run_cli(config, "status", "--watch", "0.2", "--count", "3", env=env)
    assert text.returncode == 0, text.stderr
    assert text.stdout.count("pgq status of") == 3
    lines = run_cli(config, "status", "--watch", "0.2", "--count", "2", "--json", env=env)
    documents = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len(documents) == 2 and all("queues" in d for d in documents)
    refused = run_cli(config, "status", "--count", "2", env=env)
    assert refused.returncode == 2 and "--count goes with --watch" in refused.stderr


def test_queues_list(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    enqueue(conn, "render_pdf", queue="pdf")
    enqueue(conn, "render_pdf", queue="stray")
    assert cli("queues", "pause", "reports").code == 0
    shown = cli("queues", "list")
    assert shown.code == 0, shown.err
    lines = {line.split()[0]: line for line in shown.out.splitlines()[1:]}
    assert set(lines) == {"pdf", "reports", "stray", "webhooks"}
    assert "pdf (3)" in lines["pdf"] and "paused" in lines["reports"]
    assert "none" in lines["stray"]
    document = cli("queues", "list", "--json").json()
    pdf = next(q for q in document["queues"] if q["queue"] == "pdf")
    assert pdf["available"] == 1 and pdf["pools"] == [{"pool": "pdf", "weight": 3}]
