"""The messages of issue 35: counts in the right number, `migrate` saying each migration once,
the systemd unit's Documentation= pointing somewhere that exists."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import psycopg

from supervisor import enqueue
from supervisor.shared.proctitle import master_title
from tests.commands import ROOT, run_cli
from tests.integration.operator_helpers import Cli

ONE_OF_EACH = """
handlers: {render_pdf: tests.handlers:noop}
pools: {pdf: {processes: 1, queues: {pdf: 1}}}
schedules: {nightly: {cron: "0 3 * * *", kind: render_pdf, queue: pdf}}
"""


def test_counts_of_one_are_singular(
    cli: Cli, conn: psycopg.Connection[Any], tmp_path: Path, capsys: Any
) -> None:
    one = Cli(tmp_path, capsys, ONE_OF_EACH, name="one")
    checked = one("check")
    assert checked.out.strip().endswith("OK: 1 pool, 1 child, 1 handler, 1 schedule"), checked.out
    assert cli("check").out.strip().endswith("OK: 2 pools, 3 children, 2 handlers, 0 schedules")
    enqueue(conn, "render_pdf", queue="pdf")
    assert "1 job, newest first" in cli("jobs", "list").out
    assert master_title("q.yaml", 1, "running") == "master -c q.yaml [1 child, running]"


def test_migrate_says_each_migration_once(tmp_path: Path, empty_dsn: str) -> None:
    config = tmp_path / "q.yaml"
    config.write_text("handlers: {k: tests.handlers:noop}\npools: {p: {queues: {q: 1}}}\n")
    result = run_cli(config, "migrate", env={**os.environ, "PGQ_DSN": empty_dsn})
    assert result.returncode == 0, result.stderr
    both = result.stdout + result.stderr
    assert both.count("0001_jobs") == 1, both
    assert "applied 0001_jobs" in result.stdout


def test_the_systemd_units_documentation_exists() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    base = re.search(r'^Homepage = "(.+)"$', pyproject, re.MULTILINE).group(1)  # type: ignore[union-attr]
    for unit in (ROOT / "deploy").glob("*.service"):
        found = re.findall(r"^Documentation=(.+)$", unit.read_text(), re.MULTILINE)
        assert found, unit
        for uri in (u for line in found for u in line.split()):
            if uri.startswith("file://"):
                assert Path(uri.removeprefix("file://")).exists(), uri
                continue
            assert uri.startswith(base), uri  # the project's own pages
            path = uri.removeprefix(base + "/").split("/", 2)[-1]  # tree|blob/main/<path>
            assert (ROOT / path).exists(), uri


def test_a_completed_job_says_its_arguments_are_not_kept(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    from tests.integration.operator_helpers import done

    job_id = enqueue(conn, "render_pdf", {"invoice": 7}, queue="pdf")
    assert done(conn, "pdf") == job_id
    shown = cli("jobs", "show", str(job_id))
    assert "args        not kept once a job has finished" in shown.out, shown.out
    document = cli("jobs", "show", str(job_id), "--json").json()
    assert document["args_kept"] is False and document["args"] is None
