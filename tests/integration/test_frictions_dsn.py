"""A DSN libpq cannot parse stops every verb (and `check`) with exit 2 and one line naming where
the DSN came from, its password masked; never a traceback (issue 35)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.commands import run_cli

BAD = "bob:s3cr3t-pass@127.0.0.1:5432/app"
VERBS = [
    ["check"],
    ["status"],
    ["status", "--json"],
    ["jobs", "list"],
    ["dlq", "list"],
    ["queues", "pause", "q"],
    ["enqueue", "k", "{}"],
    ["migrate"],
    ["schedules"],
    ["doctor"],
]


def _config(tmp_path: Path, dsn: str | None = None) -> Path:
    path = tmp_path / "app.yaml"
    database = f"database: {{dsn: '{dsn}'}}\n" if dsn else ""
    path.write_text(database + "handlers: {k: tests.handlers:noop}\npools: {p: {queues: {q: 1}}}\n")
    return path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    return {**env, **extra}


def _one_line(result: object, source: str) -> None:
    err = result.stderr.strip()  # type: ignore[attr-defined]
    assert result.returncode == 2, err  # type: ignore[attr-defined]
    assert "Traceback" not in err
    assert "s3cr3t-pass" not in err + result.stdout  # type: ignore[attr-defined]
    problem = [line for line in err.splitlines() if "libpq cannot parse" in line]
    assert len(problem) == 1, err
    assert source in problem[0]
    assert "bob:***@127.0.0.1:5432/app" in problem[0]


@pytest.mark.parametrize("argv", VERBS, ids=" ".join)
def test_from_the_environment(tmp_path: Path, argv: list[str]) -> None:
    result = run_cli(_config(tmp_path), *argv, env=_env(PGQ_DSN=BAD))
    _one_line(result, "PGQ_DSN")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["check"], ["status"], ["jobs", "retry", "1"]], ids=" ".join)
def test_from_the_flag(tmp_path: Path, argv: list[str]) -> None:
    result = run_cli(_config(tmp_path), *argv, "--dsn", BAD, env=_env())
    _one_line(result, "--dsn")


@pytest.mark.parametrize("argv", [["check"], ["status"], ["run"]], ids=" ".join)
def test_from_the_config_names_its_key(tmp_path: Path, argv: list[str]) -> None:
    result = run_cli(_config(tmp_path, BAD), *argv, env=_env())
    _one_line(result, "database.dsn")
    assert "(line 1)" in result.stderr
