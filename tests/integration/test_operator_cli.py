"""The operator verbs `status` and `enqueue` against real PostgreSQL: in-process through
supervisor.cli.main, and as the real command in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import claim, complete, enqueue, settle
from supervisor.queue.outcomes import discard, retry
from supervisor.services.registry import WorkerRow, heartbeat
from tests.commands import run_cli
from tests.handlers import LEDGER
from tests.integration.operator_helpers import Cli, done
from tests.lifecycle.harness import ROOT, Supervisor, wait_for


def _queues(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {q["queue"]: q for q in document["queues"]}


def _counts(q: dict[str, Any]) -> tuple[int, int, int, int]:
    return (q["available"], q["scheduled"], q["running"], q["discarded"])


def _history(conn: psycopg.Connection[Any], queue: str, outcome: str, ago: str) -> None:
    conn.execute(
        "INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, finished_at)"
        " VALUES (0, %s, 'render_pdf', %s, 1, now() - interval '1 hour', now() - %s::interval)",
        (queue, outcome, ago),
    )


def test_status_json_counts_a_known_sequence_exactly(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    pdf = [enqueue(conn, "render_pdf", {"n": n}, queue="pdf") for n in range(5)]
    for n in range(2):
        enqueue(conn, "render_pdf", {"later": n}, queue="pdf", delay=3600)
    enqueue(conn, "render_pdf", queue="reports")
    enqueue(conn, "render_pdf", queue="reports")
    enqueue(conn, "deliver_webhook", queue="stray")
    a, b, c, d = claim(conn, "pdf", worker="w", limit=4)
    assert [a.id, b.id, c.id, d.id] == pdf[:4]
    assert complete(conn, [a], history=True).kept
    # b fails and is retried in 10 minutes (scheduled again), c is discarded, d keeps running.
    settled = settle(conn, [retry(b, 600, "flaky"), discard(c, "bad data")], history=True)
    assert len(settled.kept) == 2
    done(conn, "reports")
    # The one due pdf job left has waited 10 minutes: late.
    conn.execute(
        "UPDATE pgq.jobs SET run_at = now() - interval '10 minutes' WHERE id = %s", (pdf[4],)
    )
    _history(conn, "pdf", "completed", "3 minutes")
    _history(conn, "pdf", "completed", "10 minutes")
    _history(conn, "pdf", "discarded", "20 minutes")  # outside every window

    result = cli("status", "--json")
    assert result.code == 0, result.err
    document = result.json()
    queues = _queues(document)
    assert sorted(queues) == ["pdf", "reports", "stray", "webhooks"]
    assert _counts(queues["pdf"]) == (1, 3, 1, 1)
    assert _counts(queues["reports"]) == (1, 0, 0, 0)
    assert _counts(queues["stray"]) == (1, 0, 0, 0)
    assert _counts(queues["webhooks"]) == (0, 0, 0, 0)
    assert queues["pdf"]["throughput"] == {
        "1m": {"completed": 1, "discarded": 1},
        "5m": {"completed": 2, "discarded": 1},
        "15m": {"completed": 3, "discarded": 1},
    }
    assert queues["reports"]["throughput"]["15m"] == {"completed": 1, "discarded": 0}
    assert 600 <= queues["pdf"]["oldest_ready_age_seconds"] < 700
    assert queues["pdf"]["late"] is True
    assert queues["reports"]["late"] is False
    assert queues["webhooks"]["oldest_ready_age_seconds"] is None
    assert queues["pdf"]["pools"] == ["pdf"] and queues["stray"]["pools"] == []
    pools = {p["pool"]: p for p in document["pools"]}
    assert pools["pdf"]["queues"] == [
        {"queue": "pdf", "weight": 3, "share": 0.75},
        {"queue": "reports", "weight": 1, "share": 0.25},
    ]
    assert pools["hooks"]["processes"] == 1
    assert document["hosts"] == []
    assert document["history"] is True
    datetime.fromisoformat(document["generated_at"])
    warnings = "\n".join(document["warnings"])
    assert "queue pdf: the oldest ready job has waited 10m" in warnings
    assert "queue stray: 1 job is waiting, but no pool" in warnings
    assert "no supervisor is running" in warnings

    text = cli("status")
    assert text.code == 0
    lines = text.out.splitlines()
    pdf_row = next(line for line in lines if line.startswith("pdf "))
    assert pdf_row.split()[:5] == ["pdf", "1", "3", "1", "1"]
    assert "1/2/3" in pdf_row and "LATE" in pdf_row
    assert "NO POOL" in next(line for line in lines if line.startswith("stray "))
    assert any(line.split()[-2:] == ["3", "75%"] for line in lines)
    assert "ATTENTION" in text.out


PLAIN = """
handlers: {render_pdf: tests.handlers:noop}
pools: {p: {queues: {pdf: 1}}}
"""


def test_status_without_history_says_throughput_is_not_recorded(
    cli: Cli, conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    enqueue(conn, "render_pdf", queue="pdf")
    plain = Cli(tmp_path, capsys, PLAIN, "plain")
    document = plain("status", "--json").json()
    assert document["history"] is False
    assert _queues(document)["pdf"]["throughput"] is None
    assert "throughput: not recorded" in plain("status").out


def test_status_shows_supervisors_and_their_children(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    job_id = enqueue(conn, "render_pdf", queue="pdf")
    started = datetime.now(timezone.utc) - timedelta(seconds=42)
    spawned = datetime.now(timezone.utc) - timedelta(minutes=5)
    workers = [
        WorkerRow("web1:101:a", "pdf", 0, 101, "running", job_id, "render_pdf", started, spawned),
        WorkerRow("web1:102:b", "pdf", 1, 102, "idle", None, None, None, spawned),
    ]
    heartbeat(conn, "sup-live", "web1", "/etc/pgq/queues.yaml", workers)
    heartbeat(conn, "sup-stuck", "web2", "/etc/pgq/other.yaml", [])
    conn.execute(
        "UPDATE pgq.supervisors SET heartbeat_at = now() - interval '20 seconds'"
        " WHERE id = 'sup-stuck'"
    )

    document = cli("status", "--json").json()
    hosts = {h["host"]: h["supervisors"] for h in document["hosts"]}
    assert sorted(hosts) == ["web1", "web2"]
    (live,) = hosts["web1"]
    assert (live["id"], live["pid"], live["config"]) == (
        "sup-live",
        os.getpid(),
        "/etc/pgq/queues.yaml",
    )
    assert live["stale"] is False and live["heartbeat_age_seconds"] < 15
    busy, idle = live["workers"]
    assert (busy["pool"], busy["slot"], busy["pid"], busy["state"]) == ("pdf", 0, 101, "running")
    assert busy["job"]["id"] == job_id and busy["job"]["kind"] == "render_pdf"
    assert 42 <= busy["job"]["running_seconds"] < 100
    assert idle["job"] is None and idle["state"] == "idle"
    (stuck,) = hosts["web2"]
    assert stuck["stale"] is True and stuck["workers"] == []
    assert any("no heartbeat for 20s" in w for w in document["warnings"])
    assert not any("no supervisor is running" in w for w in document["warnings"])

    text = cli("status").out
    assert "web1  pid" in text and "config /etc/pgq/queues.yaml" in text
    row = next(line for line in text.splitlines() if "render_pdf" in line and "running" in line)
    assert row.split()[:6] == ["pdf", "0", "101", "running", str(job_id), "render_pdf"]
    assert "STALE" in next(line for line in text.splitlines() if line.startswith("web2"))


def test_enqueue_writes_the_job_and_says_so(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    with psycopg.connect(conn.info.dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq_jobs")
        # A supervisor with a child asleep for the queue has raised its wake-up flag.
        listener.execute("SELECT * FROM pgq.want_wakeups('test', ARRAY['pdf'])")
        result = cli("enqueue", "render_pdf", '{"invoice_id": 42}', "--queue", "pdf")
        assert result.code == 0, result.err
        woken = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    (row,) = conn.execute("SELECT id, kind, queue, args, max_attempts FROM pgq.jobs").fetchall()
    assert result.out == f"enqueued job {row[0]} (render_pdf) on queue pdf\n"
    assert result.err == ""
    # max_attempts comes from jobs.render_pdf in the config.
    assert row[1:] == ("render_pdf", "pdf", {"invoice_id": 42}, 5)
    assert woken == ["pdf"]


def test_enqueue_options(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    result = cli(
        "enqueue",
        "deliver_webhook",
        "--queue",
        "webhooks",
        "--priority",
        "7",
        "--delay",
        "1h30m",
        "--max-attempts",
        "2",
    )
    assert result.code == 0, result.err
    assert result.out.endswith(", due in 1h30m\n")
    priority, attempts, args, wait = conn.execute(
        "SELECT priority, max_attempts, args, extract(epoch FROM run_at - now()) FROM pgq.jobs"
    ).fetchone()
    assert (priority, attempts, args) == (7, 2, {})
    assert 5300 < wait <= 5400
    at = cli("enqueue", "render_pdf", "--queue", "pdf", "--run-at", "2030-01-01T03:00:00+02:00")
    assert at.code == 0 and "due at 2030-01-01 01:00:00 UTC" in at.out
    assert conn.execute("SELECT max(run_at) FROM pgq.jobs").fetchone()[0] == datetime(
        2030, 1, 1, 1, tzinfo=timezone.utc
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ['{"a": 1,}'],
            "not valid JSON: Expecting property name enclosed in double quotes at "
            "line 1, column 9 (character 8)",
        ),
        (["[1, 2]"], "must be a JSON object of keyword arguments"),
        (['{"a": 1, "a": 2}'], "key 'a' appears twice"),
        (['{"a": NaN}'], "NaN is not JSON"),
        (["{}", "--priority", "40000"], "priority 40000 is outside"),
        (["{}", "--delay", "soon"], "argument --delay: must be a number of seconds"),
        (["{}", "--run-at", "2030-01-01T03:00"], "has no UTC offset"),
        (["{}", "--delay", "1s", "--run-at", "2030-01-01T03:00Z"], "not allowed with"),
        (["{}", "--max-attempts", "0"], "must be 1 or more"),
    ],
)
def test_enqueue_refuses_bad_input_with_exit_2_and_writes_nothing(
    cli: Cli, conn: psycopg.Connection[Any], argv: list[str], expected: str
) -> None:
    result = cli("enqueue", "render_pdf", *argv)
    assert result.code == 2
    assert expected in result.err
    assert result.out == ""
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0] == 0


def test_bad_json_points_at_the_problem(cli: Cli) -> None:
    result = cli("enqueue", "render_pdf", '{"a": tru}')
    assert result.code == 2
    line, caret = result.err.splitlines()[-2:]
    assert line.strip() == '{"a": tru}'
    assert caret.index("^") - line.index("{") == 6


def test_enqueue_with_a_held_unique_key_enqueues_nothing(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    first = cli("enqueue", "render_pdf", "--queue", "pdf", "--unique-key", "invoice:7")
    (job_id,) = conn.execute("SELECT id FROM pgq.jobs").fetchone()
    assert first.out == f"enqueued job {job_id} (render_pdf) on queue pdf\n"
    again = cli("enqueue", "render_pdf", "--queue", "pdf", "--unique-key", "invoice:7")
    assert again.code == 0
    assert again.out == f"job {job_id} already holds unique key invoice:7; nothing enqueued\n"
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0] == 1
    # Once the holder is done the key is free again.
    done(conn, "pdf")
    third = cli("enqueue", "render_pdf", "--queue", "pdf", "--unique-key", "invoice:7")
    assert third.out.startswith("enqueued job ") and str(job_id) not in third.out


def test_enqueue_with_a_tenant(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    assert cli("enqueue", "render_pdf", "--queue", "pdf", "--tenant", "acme").code == 0
    assert conn.execute("SELECT tenant FROM pgq.jobs").fetchall() == [("acme",)]
    bad = cli("enqueue", "render_pdf", "--queue", "pdf", "--tenant", " ")
    assert bad.code == 2
    assert "tenant must not be empty" in bad.err


def test_enqueue_warns_about_an_unknown_kind_and_an_unserved_queue_but_enqueues(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    result = cli("enqueue", "resize_image", '{"w": 10}', "--any-kind", "--any-queue")
    assert result.code == 0
    assert "warning: no handler for kind 'resize_image'" in result.err
    assert "warning: no pool in" in result.err and "queue 'default'" in result.err
    row = conn.execute("SELECT kind, queue, args FROM pgq.jobs").fetchone()
    assert row == ("resize_image", "default", {"w": 10})
    assert "on queue default" in result.out


HOSTILE_KIND = "x'; DROP TABLE pgq.jobs; --"
HOSTILE_QUEUE = 'q"; DELETE FROM pgq.jobs; -- 队列 ✓ \\'


def test_hostile_names_round_trip(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    result = cli(
        "enqueue",
        HOSTILE_KIND,
        '{"k": "\'\\";"}',
        "--queue",
        HOSTILE_QUEUE,
        "--any-kind",
        "--any-queue",
    )
    assert result.code == 0, result.err
    assert conn.execute("SELECT kind, queue, args FROM pgq.jobs").fetchone() == (
        HOSTILE_KIND,
        HOSTILE_QUEUE,
        {"k": "'\";"},
    )
    status = cli("status", "--json").json()
    assert _queues(status)[HOSTILE_QUEUE]["available"] == 1
    assert HOSTILE_QUEUE in cli("status").out
    (job,) = claim(conn, HOSTILE_QUEUE, worker="w")
    settle(conn, [discard(job, "no")])
    listed = cli("dlq", "list", "--json", "--kind", HOSTILE_KIND, "--queue", HOSTILE_QUEUE).json()
    assert [(j["kind"], j["queue"]) for j in listed["jobs"]] == [(HOSTILE_KIND, HOSTILE_QUEUE)]
    replayed = cli("dlq", "replay", "--kind", HOSTILE_KIND, "--queue", HOSTILE_QUEUE)
    assert replayed.code == 0 and f"due now: {job.id}" in replayed.out
    assert conn.execute("SELECT state FROM pgq.jobs").fetchone() == ("available",)


def test_control_characters_never_reach_the_terminal(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    kind = "evil\x1b[2J\x07kind"
    # enqueue refuses such a kind (issue 11), and says so without echoing the escape itself.
    refused = cli("enqueue", kind, "--queue", "pdf")
    assert refused.code == 2 and "control or format character U+001B" in refused.err
    assert "\x1b" not in refused.err
    # Rows written by other clients (plain SQL) may still hold them: shown escaped.
    conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, state, attempts, finished_at, last_error)"
        " VALUES ('pdf', %s, 'discarded', 1, now(), %s)",
        (kind, "line one\nbad \x1b]0;owned\x07 thing"),
    )
    for argv in (["status"], ["dlq", "list"], ["dlq", "show", str(max(_ids(conn)))]):
        out = cli(*argv).out
        assert "\x1b" not in out and "\x07" not in out, argv
    assert "evil\\x1b[2J\\x07kind" in cli("dlq", "list").out


def _ids(conn: psycopg.Connection[Any]) -> list[int]:
    return [r[0] for r in conn.execute("SELECT id FROM pgq.jobs WHERE state = 'discarded'")]


def test_a_database_without_the_schema_says_to_migrate(
    empty_dsn: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQ_DSN", empty_dsn)
    result = cli("status")
    assert result.code == 1
    assert "has no pgq schema" in result.err and "migrate" in result.err
    assert "Traceback" not in result.err


def _run(dsn: str, config: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_cli(config, *argv, env={**os.environ, "PGQ_DSN": dsn, "PYTHONPATH": str(ROOT)})


def test_the_real_command_against_a_running_supervisor(dsn: str, tmp_path: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LEDGER)
    sup = Supervisor(
        tmp_path,
        dsn,
        """
        handlers:
          sleep: tests.handlers:sleep
        pools:
          main:
            processes: 2
            queues: {default: 1}
        shutdown_timeout: 5s
        """,
    )
    try:
        sup.start()
        bad = _run(dsn, sup.config, "enqueue", "sleep", "{nope")
        assert bad.returncode == 2 and "not valid JSON" in bad.stderr
        ok = _run(dsn, sup.config, "enqueue", "sleep", '{"seconds": 30}')
        assert ok.returncode == 0, ok.stderr
        job_id = int(ok.stdout.split()[2])

        def busy_worker() -> dict[str, Any] | None:
            result = _run(dsn, sup.config, "status", "--json")
            assert result.returncode == 0, result.stderr
            for host in json.loads(result.stdout)["hosts"]:
                for s in host["supervisors"]:
                    if s["pid"] == sup.pid and len(s["workers"]) == 2:
                        running = [w for w in s["workers"] if w["job"]]
                        if running:
                            return running[0]
            return None

        worker = wait_for(busy_worker, timeout=60, interval=0.5, what="a busy child in status")
        assert worker["job"]["id"] == job_id and worker["job"]["kind"] == "sleep"
        assert worker["pool"] == "main" and worker["pid"] in [c.pid for c in sup.children()]
        text = _run(dsn, sup.config, "status")
        assert text.returncode == 0 and f"pid {sup.pid}" in text.stdout
    finally:
        sup.kill_everything()
