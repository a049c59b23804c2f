"""Running the operator verbs in-process (supervisor.cli.main) and making jobs in known states."""

from __future__ import annotations

import json
import logging
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import setproctitle

from supervisor import claim, complete, enqueue, settle
from supervisor.cli.main import main
from supervisor.queue.outcomes import discard

CONFIG = """
handlers:
  render_pdf: tests.handlers:noop
  deliver_webhook: tests.handlers:noop
pools:
  pdf:
    processes: 2
    queues: {pdf: 3, reports: 1}
  hooks:
    processes: 1
    queues: {webhooks: 1}
jobs:
  render_pdf: {max_attempts: 5}
purge: {batch: 2}
history:
  enabled: true
"""


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    """`pgq-supervisor -c FILE ...` in this process, against the test's database."""

    def __init__(
        self,
        tmp_path: Path,
        capsys: pytest.CaptureFixture[str],
        config: str = CONFIG,
        name: str = "queues",
    ) -> None:
        self.path = tmp_path / f"{name}.yaml"
        self.path.write_text(textwrap.dedent(config))
        self.capsys = capsys

    def __call__(self, *argv: str) -> Result:
        self.capsys.readouterr()
        try:
            code = main(["-c", str(self.path), *argv])
        except SystemExit as exc:  # argparse rejects bad usage this way
            code = exc.code if isinstance(exc.code, int) else 1
        captured = self.capsys.readouterr()
        return Result(int(code), captured.out, captured.err)


class Restore:
    """main() sets the process title and the root logger; give the test process its own back."""

    def __init__(self) -> None:
        self.title = setproctitle.getproctitle()
        root = logging.getLogger()
        self.handlers, self.level = list(root.handlers), root.level

    def __call__(self) -> None:
        setproctitle.setproctitle(self.title)
        root = logging.getLogger()
        root.handlers[:] = self.handlers
        root.setLevel(self.level)


def dead_letter(
    conn: psycopg.Connection[Any],
    kind: str = "render_pdf",
    queue: str = "pdf",
    *,
    finished_ago: str = "1 minute",
    error: str = "boom",
    args: dict[str, Any] | None = None,
    unique_key: str | None = None,
) -> int:
    """A discarded job that finished ``finished_ago`` (an SQL interval) before now."""
    job_id = enqueue(conn, kind, args or {}, queue=queue, priority=32767, unique_key=unique_key)
    (job,) = claim(conn, queue, worker="test-worker")
    assert job.id == job_id
    assert settle(conn, [discard(job, error)]).kept
    conn.execute(
        "UPDATE pgq.jobs SET finished_at = now() - %s::interval WHERE id = %s",
        (finished_ago, job_id),
    )
    return job_id


def done(conn: psycopg.Connection[Any], queue: str) -> int:
    """Claim and complete one job of ``queue``, with history."""
    (job,) = claim(conn, queue, worker="test-worker")
    assert complete(conn, [job], history=True).kept
    return job.id


def states(conn: psycopg.Connection[Any]) -> dict[int, tuple[Any, ...]]:
    """Every job's id -> (state, attempts, run_at is due, finished_at is set)."""
    rows = conn.execute(
        "SELECT id, state, attempts, run_at <= now(), finished_at IS NOT NULL FROM pgq.jobs"
    ).fetchall()
    return {row[0]: tuple(row[1:]) for row in rows}
