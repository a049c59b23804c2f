#!/usr/bin/env python3
"""The first thing to run: the supervisor at work on a few hundred jobs, watched live.

    python scripts/demo/demo.py [--invoices 300] [--webhooks 150] [--syncs 60] [--out out/invoices]
                           [--dsn DSN] [--config config/queues.yaml] [--timeout 300]

It starts a webhook receiver that turns a few deliveries away (so some are retried), then the
real supervisor, `python -m supervisor.cli -c config/queues.yaml`, which with no DSN (--dsn,
PGQ_DSN or database.dsn) runs an embedded PostgreSQL with its data in .pgq. It enqueues invoices
to render as PDFs, webhooks to deliver and account syncs against a flaky upstream, some of which
can never succeed and end in the dead-letter queue, and shows each queue's progress, read from
the database, until every job is done or dead. Then it stops the supervisor as a deploy does
(SIGTERM: drain, exit 0, stop the embedded server) and prints a summary.

Ctrl-C stops everything cleanly at any point; a second one stops the supervisor at once.
Paths given on the command line are relative to the current directory; the defaults, and the
paths the jobs carry, are relative to the repository root, where the supervisor runs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

import checkout  # noqa: F401  (examples/, the demo's handlers, is importable from the checkout only)
import psycopg
from demo_jobs import QUEUES, config_problems, parse_args, plan_jobs
from demo_processes import Helper, Sink, signals_held, stop_supervisor
from demo_report import (
    QUERIES,
    DeadLetter,
    Progress,
    Snapshot,
    Summary,
    count_pdfs,
    dead_letters,
    look_further,
    registered_connection,
    scan_pdfs,
    summary_lines,
    take_snapshot,
    write,
    write_json,
)

from examples.invoice_workflow import invoice_workflow
from supervisor import enqueue_many, enqueue_workflow, result
from supervisor.config import Config, ConfigError, load_config
from supervisor.embedded.server import EmbeddedPostgres
from supervisor.queue.dsn import describe
from supervisor.shared.exits import MasterExit

ROOT = Path(__file__).resolve().parents[2]
SINK_FAIL_RATE = 0.08  # the receiver answers 503 "come back in 1 s" to this share of requests
STARTUP_TIMEOUT = 120.0
DEAD_LETTERS_SHOWN = 5
INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C


class DemoError(Exception):
    """Something went wrong that the user should read; the demo stops with exit code 1."""


def shown(path: Path) -> str:
    """A path as the user reads it: relative to the repository root when inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _interrupt(signum: int, frame: object) -> NoReturn:
    raise KeyboardInterrupt


@dataclass
class Paths:
    config_arg: str  # as given to the supervisor, which runs in ROOT
    out: Path
    logs: Path
    json: Path | None


class Demo:
    def __init__(self, args: argparse.Namespace, paths: Paths, config: Config) -> None:
        self.args, self.paths, self.config = args, paths, config
        self.explicit_dsn = args.dsn or os.environ.get("PGQ_DSN") or config.database.dsn
        self.data_dir = ROOT / config.database.embedded_dir
        self.server_was_running = False
        self.sink: Sink | None = None
        self.supervisor: Helper | None = None
        self.conn: psycopg.Connection[Any] | None = None
        self.ids_by_queue: dict[str, list[int]] = {}
        self.invoice_ids: list[int] = []
        self.workflow_id: int | None = None
        self.archive_id: int | None = None  # the workflow's last step: the mail of the zip
        self.zip_id: int | None = None
        self.archive: dict[str, Any] | None = None
        self.started_wall = time.time()
        self.started = time.monotonic()
        self.startup_seconds: float | None = None
        self.enqueued_at: datetime | None = None
        self.snap: Snapshot | None = None
        self.dead: list[DeadLetter] = []
        self.withdrawn = 0

    def say(self, text: str, end: str = "\n") -> None:
        write(sys.stdout, text + end)

    def run(self) -> int:
        finished = interrupted = False
        failure: str | None = None
        try:
            self.start_sink()
            self.start_supervisor()
            self.enqueue()
            finished = self.watch()
        except KeyboardInterrupt:
            interrupted = True
            self.say("\ninterrupted: stopping everything")
        except DemoError as exc:
            failure = str(exc)
        finally:
            # The last look at the database: an embedded server stops with the supervisor.
            self.final_snapshot()
            # More Ctrl-C's make the supervisor stop sooner, then do nothing: the rest is quick.
            code = self.stop_supervisor()
            with signals_held():
                if not finished:
                    self.withdraw()
                deliveries = self.sink.counts() if self.sink is not None else None
                if self.sink is not None:
                    self.sink.stop()
        with signals_held():
            if failure:
                write(sys.stderr, f"demo failed: {failure}\n")
            return self.report(finished, interrupted, code, deliveries, failure)

    # -- starting ----------------------------------------------------------------------------

    def start_sink(self) -> None:
        self.sink = Sink(SINK_FAIL_RATE, self.paths.logs / "sink.log", cwd=ROOT)
        if not self.sink.start_listening():
            raise DemoError(f"the webhook receiver did not start:\n{self.sink.log_tail()}")
        self.say(
            f"webhook receiver  {self.sink.url} (pid {self.sink.pid}); it answers 503 "
            f"'come back in 1 s' to {SINK_FAIL_RATE:.0%} of requests"
        )

    def start_supervisor(self) -> None:
        env = dict(os.environ)
        if self.explicit_dsn:
            # The environment, not --dsn: a flag would show the password in `ps`.
            env["PGQ_DSN"] = self.explicit_dsn
            where = describe(self.explicit_dsn)
        else:
            self.server_was_running = EmbeddedPostgres.find_running(self.data_dir) is not None
            fresh = not (self.data_dir / "PG_VERSION").is_file()
            where = f"embedded PostgreSQL in {shown(self.data_dir)}"
            where += " (first run: creating it)" if fresh else ""
        argv = [sys.executable, "-m", "supervisor.cli", "-c", self.paths.config_arg]
        log = self.paths.logs / "supervisor.log"
        self.supervisor = Helper("supervisor", argv, log, cwd=ROOT).start(env)
        self.say(
            f"supervisor        pid {self.supervisor.pid}: python -m supervisor.cli "
            f"-c {self.paths.config_arg} (log: {shown(log)})"
        )
        self.say(f"database          {where} ...", end="")
        self.wait_until_up()
        self.startup_seconds = time.monotonic() - self.started
        self.say(f" up; the supervisor runs its pools after {self.startup_seconds:.1f}s")

    def wait_until_up(self) -> None:
        """Until the supervisor's master runs its loop: server up, schema migrated."""
        assert self.supervisor is not None
        deadline = time.monotonic() + STARTUP_TIMEOUT
        params = {"pid": self.supervisor.pid, "host": socket.gethostname()}
        while self.conn is None:
            code = self.supervisor.poll()
            if code is not None:
                raise DemoError(
                    f"the supervisor exited with code {code} while starting; the end of "
                    f"{shown(self.supervisor.log_path)}:\n{self.supervisor.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise DemoError(f"the supervisor was not up after {STARTUP_TIMEOUT:.0f}s")
            dsn = self.explicit_dsn or EmbeddedPostgres.find_running(self.data_dir)
            if dsn:
                self.conn = registered_connection(dsn, params)
            if self.conn is None:
                time.sleep(0.1)

    def enqueue(self) -> None:
        assert self.conn is not None and self.sink is not None
        queues = {"queues": list(QUEUES)}
        waiting = self.conn.execute(QUERIES["waiting_elsewhere"], queues).fetchone()
        if waiting and waiting[0]:
            self.say(
                f"note              {waiting[0]} jobs of earlier runs wait in these queues; "
                "the supervisor runs them too, and they are not counted below"
            )
        args = self.args
        jobs = plan_jobs(
            args.invoices,
            args.webhooks,
            args.syncs,
            out_dir=shown(self.paths.out),  # relative to ROOT, where the workers run
            sink_url=self.sink.url,
        )
        invoices = [job for job in jobs if job.kind == "render_pdf"]
        others = [job for job in jobs if job.kind != "render_pdf"]
        flow = invoice_workflow(invoices, out_dir=shown(self.paths.out), sink_url=self.sink.url)
        began = time.monotonic()
        with self.conn.transaction():
            # The invoices are a workflow: every page renders in parallel, the last one's
            # outcome releases the zip (in its own transaction), the zip's releases the mail.
            handle = enqueue_workflow(self.conn, flow)
            ids = handle.job_ids[: len(invoices)] + enqueue_many(self.conn, others)
            row = self.conn.execute(QUERIES["database_now"]).fetchone()
        self.workflow_id = handle.id
        self.archive_id = handle.job_ids[-1]
        self.zip_id = handle.job_ids[-2]
        jobs = invoices + others
        assert row is not None
        self.enqueued_at = row[0]
        self.ids_by_queue = {queue: [] for queue in QUEUES}
        for job, job_id in zip(jobs, ids, strict=True):
            self.ids_by_queue[job.queue].append(job_id)
            if job.kind == "render_pdf":
                self.invoice_ids.append(job.args["invoice_id"])
        self.say(
            f"enqueued          {len(ids)} jobs in one transaction in "
            f"{(time.monotonic() - began) * 1000:.0f} ms: {args.invoices} invoices (queues pdf "
            f"and reports) as workflow {handle.id}, whose next steps zip the PDFs and mail it, "
            f"{args.webhooks} webhooks, {args.syncs} account syncs\n"
        )

    # -- watching ----------------------------------------------------------------------------

    def watch(self) -> bool:
        """Show progress about once a second until nothing is left; False on timeout."""
        assert self.conn is not None and self.supervisor is not None and self.sink is not None
        assert self.enqueued_at is not None
        progress = Progress(sys.stdout)
        deadline = time.monotonic() + self.args.timeout
        while True:
            tick = time.monotonic()
            self.snap = take_snapshot(self.conn, self.ids_by_queue)
            children = len(self.supervisor.children())
            pdfs = count_pdfs(self.paths.out, self.invoice_ids, self.started_wall)
            header = (
                f"  {tick - self.started:5.1f}s  supervisor pid {self.supervisor.pid} with "
                f"{children} children · PDFs written {pdfs}/{len(self.invoice_ids)}"
            )
            received = self.sink.counts()
            if received:
                header += f" · webhooks received {received[0]} ({received[1]} unique)"
            archive = self.archive_state()
            if archive:
                header += f" · archive {archive}"
            progress.show(header, self.snap, self.enqueued_at, tick - self.started)
            if self.snap.total.left == 0 and archive in ("mailed", "dead", "unknown", "cancelled"):
                progress.done()
                return True
            code = self.supervisor.poll()
            if code is not None:
                progress.done()
                raise DemoError(
                    f"the supervisor exited with code {code} before the jobs were done:\n"
                    f"{self.supervisor.log_tail()}"
                )
            if tick > deadline:
                progress.done()
                self.say(f"timed out after {self.args.timeout:.0f}s with jobs left")
                return False
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))

    def archive_state(self) -> str:
        """Where the workflow's mail step is: its state ('waiting' until the zip is done),
        'mailed' once it completed (its result kept: the archive's path and size)."""
        assert self.conn is not None
        if self.archive_id is None:
            return ""
        row = self.conn.execute(QUERIES["job_state"], {"id": self.archive_id}).fetchone()
        if row is not None:
            return "dead" if row[0] == "discarded" else str(row[0])
        with contextlib.suppress(LookupError):
            self.archive = result(self.conn, self.archive_id)
        return "mailed"

    def final_snapshot(self) -> None:
        """The last look at the database while the supervisor runs (its embedded server stops
        with it), then the connection is closed."""
        if self.conn is None:
            return
        with contextlib.suppress(psycopg.Error, KeyboardInterrupt):
            if self.ids_by_queue:
                self.snap = take_snapshot(self.conn, self.ids_by_queue)
                all_ids = [i for ids in self.ids_by_queue.values() for i in ids]
                self.dead = dead_letters(self.conn, all_ids, DEAD_LETTERS_SHOWN)
        self.conn.close()

    def withdraw(self) -> None:
        """After stopping early: count what the drain finished, then delete the demo's jobs
        that never ran, so they do not run at the next start (their webhooks aimed at a receiver
        long gone). The supervisor has exited, so nothing claims them meanwhile; with the
        embedded default its server is started again for the purpose."""
        if not self.ids_by_queue:
            return
        all_ids = [i for ids in self.ids_by_queue.values() for i in ids]
        steps = [i for i in (self.zip_id, self.archive_id) if i is not None]
        server = None if self.explicit_dsn else EmbeddedPostgres(self.data_dir)
        try:
            with signals_held():
                dsn = self.explicit_dsn or server.start()  # type: ignore[union-attr]
                try:
                    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                        self.snap = take_snapshot(conn, self.ids_by_queue)
                        self.dead = dead_letters(conn, all_ids, DEAD_LETTERS_SHOWN)
                        (self.withdrawn,) = conn.execute(
                            QUERIES["withdraw"], {"ids": all_ids, "steps": steps}
                        ).fetchone() or (0,)
                finally:
                    if server is not None and server.launched:
                        server.stop()
        except Exception as exc:  # the demo is stopping: say what went wrong, stop the rest
            self.say(f"could not withdraw the jobs left ({exc}); they run at the next start")

    # -- stopping ----------------------------------------------------------------------------

    def stop_supervisor(self) -> int | None:
        if self.supervisor is None:
            return None
        drain = self.config.shutdown_timeout + 15
        code = stop_supervisor(self.supervisor, drain, lambda text: self.say(f"\n{text}"))
        log = shown(self.supervisor.log_path)
        if code == 0:
            self.say(f"supervisor exited with code 0 (its log: {log})")
        elif code == -signal.SIGTERM and self.startup_seconds is None:
            # Still importing its handlers: nothing started yet, nothing to clean up.
            self.say("supervisor stopped while it was starting")
        else:
            self.say(f"supervisor exited with code {code}; see {log}")
        if not self.explicit_dsn and not self.server_was_running:
            # The supervisor stops the server it started; if it was killed, we do.
            server = EmbeddedPostgres(self.data_dir)
            if server.is_running():
                self.say("the embedded PostgreSQL is still running; stopping it")
                server.stop()
        return code

    def report(
        self,
        finished: bool,
        interrupted: bool,
        code: int | None,
        deliveries: tuple[int, int] | None,
        failure: str | None,
    ) -> int:
        pdfs = scan_pdfs(self.paths.out, shown(self.paths.out), self.invoice_ids, self.started_wall)
        ok = finished and code == 0 and pdfs.valid == pdfs.expected and not failure
        ok = ok and (self.archive is not None or not self.invoice_ids)
        summary = None
        if self.snap is not None and self.enqueued_at is not None:
            summary = Summary(
                finished=finished,
                snap=self.snap,
                enqueued_at=self.enqueued_at,
                wall_seconds=time.monotonic() - self.started,
                startup_seconds=self.startup_seconds,
                pdfs=pdfs,
                webhooks=self.args.webhooks,
                deliveries=deliveries[0] if deliveries else None,
                unique_deliveries=deliveries[1] if deliveries else None,
                dead_letters=self.dead,
                withdrawn=self.withdrawn,
                archive=self.archive,
            )
            self.say("\n" + "\n".join([*summary_lines(summary), "", *self.look_further()]))
        if self.paths.json is not None:
            pids = sorted({*self.pids()})
            write_json(
                self.paths.json,
                {
                    "ok": ok,
                    "supervisor_exit": code,
                    "summary": asdict(summary) if summary else None,
                    "total": asdict(summary.snap.total) if summary else None,
                    "pids": pids,
                    "data_dir": None if self.explicit_dsn else str(self.data_dir),
                },
            )
        if interrupted:
            return INTERRUPTED
        return 0 if ok else 1

    def pids(self) -> list[int]:
        """Every process the demo started or saw under the supervisor."""
        return [pid for helper in (self.supervisor, self.sink) if helper for pid in helper.seen]

    def look_further(self) -> list[str]:
        here = Path(sys.executable).parent / "pgq-supervisor"
        on_path = shutil.which("pgq-supervisor")
        cli = "pgq-supervisor" if on_path and Path(on_path) == here else shown(here)
        logs = [shown(self.paths.logs / name) for name in ("supervisor.log", "sink.log")]
        data_dir = None if self.explicit_dsn else shown(self.data_dir)
        return look_further(f"{cli} -c {self.paths.config_arg}", data_dir, logs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, description=__doc__.split("\n\n")[2])
    here = Path.cwd()
    config_path = (here / args.config if args.config else ROOT / "config/queues.yaml").resolve()
    paths = Paths(
        config_arg=shown(config_path),
        out=(here / args.out if args.out else ROOT / "out/invoices").resolve(),
        logs=(here / args.log_dir if args.log_dir else ROOT / "out/demo").resolve(),
        json=(here / args.json).resolve() if args.json else None,
    )
    os.chdir(ROOT)  # where the supervisor runs: embedded_dir and the jobs' paths are from here
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"demo: invalid configuration\n{exc}", file=sys.stderr)
        return MasterExit.CONFIG
    problems = config_problems(config)
    if problems:
        print("demo: this configuration will not do:\n" + "\n".join(problems), file=sys.stderr)
        return MasterExit.CONFIG
    # A TERM, or the terminal closing, stops the demo as Ctrl-C does: cleanly.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    return Demo(args, paths, config).run()


if __name__ == "__main__":
    sys.exit(main())
