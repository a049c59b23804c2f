"""Chaos drill: a real supervisor drains N jobs while children, masters and PostgreSQL die.

    python scripts/drills/chaos.py [--jobs 20000] [--seed 1] [--faults full|short] [--timeout 900]

Starts its own durable embedded PostgreSQL in a temp dir, enqueues the jobs, and runs
`python -m supervisor.cli -c <yaml>` with PGQ_DSN pointing at that server (so the supervisor
does not own it). While the jobs drain it injects, on a seeded schedule: SIGKILL of a random
child; a deploy (SIGTERM, wait for exit 0, start again); SIGKILL of the master, then a
restart; a master frozen (SIGSTOP) past its leases while another host's rescuer runs; a
restart of PostgreSQL; a kill -9 of PostgreSQL, then a start; pg_terminate_backend of the
supervisor's sessions; and faults that overlap, as real outages do: a deploy (SIGTERM) while
PostgreSQL is down, a reload (SIGHUP, every pool retired) while it is down, a read-only period
(a failover's demoted primary). Some jobs of the threaded pool hang past their kind's timeout.
While the database is down, no process of the supervisor may spin (its CPU is measured). Then
it stops the supervisor cleanly and checks (chaos_checks.py) that every job completed exactly
once, that every extra execution is explained by a fault, and that nothing was left running.
The last line on stdout is one JSON object with the figures; the exit status is 0 only if
every check held. Everything started is stopped on any exit.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below need the path set up first)
import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "drills")]

from chaos_checks import Fault, verify
from chaos_handlers import LEDGER_SQL
from chaos_procs import (
    Incarnation,
    Tracker,
    alive_in_sessions,
    kill_sessions,
    start_incarnation,
)

from supervisor import NewJob, enqueue_many, migrate
from supervisor.embedded.server import EmbeddedPostgres
from supervisor.queue import maintenance

FAULTS = ("child_kill", "deploy", "master_kill", "freeze", "pg_restart", "pg_kill", "terminate")
FAULTS += ("outage_deploy", "outage_reload", "read_only")
# Full drills draw faults by weight; a child dies far more often than a database.
WEIGHTS = {"child_kill": 4, "deploy": 1, "master_kill": 1, "pg_restart": 1, "pg_kill": 1}
WEIGHTS |= {"terminate": 2, "freeze": 1, "outage_deploy": 1, "outage_reload": 1, "read_only": 1}
SHORT = {"child_kill": 3, "deploy": 1, "master_kill": 1, "pg_restart": 1, "pg_kill": 1}
SHORT |= {"terminate": 2, "freeze": 1, "outage_deploy": 1, "outage_reload": 1, "read_only": 1}
LEASE = 6.0
SHUTDOWN_TIMEOUT = 10.0
# The kind whose first attempts hang in the threaded pool; they are stopped at this timeout.
HANG_TIMEOUT = 2.0
# While the database is down, a waiting process may use at most this share of one core.
CPU_BOUND = 0.3
# Seconds of --timeout kept for the final clean stop and the checks.
RESERVE = SHUTDOWN_TIMEOUT + 30.0
# Handler slots across the pools below: what one fault can interrupt at most.
CAPACITY = 2 * 8 + 1 * 6 + 1 * 1

CONFIG = f"""
handlers:
  chaos: chaos_handlers:work
  chaos_hang: chaos_handlers:work
pools:
  batch:
    processes: 2
    batch: 8
    max_jobs: 3000
    queues: {{bulk: 1}}
  threaded:
    processes: 1
    threads: 6
    batch: 6
    queues: {{io: 1}}
  single:
    processes: 1
    queues: {{high: 3, normal: 2, low: 1}}
jobs:
  chaos: {{timeout: 60s, backoff: {{base: 200ms, cap: 2s}}}}
  chaos_hang: {{timeout: {HANG_TIMEOUT:g}s, backoff: {{base: 200ms, cap: 2s}}}}
shutdown_timeout: {SHUTDOWN_TIMEOUT:g}s
lease: {{duration: {LEASE:g}s, renew_every: 1s}}
rescue: {{interval: 2s}}
history: {{enabled: true}}
"""
QUEUES = [("bulk", 50), ("io", 30), ("high", 9), ("normal", 7), ("low", 4)]


def log(message: str) -> None:
    print(f"chaos {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def make_jobs(
    count: int, rng: random.Random, spread: float, ms: float, hang_share: float
) -> list[NewJob]:
    queues = [q for q, share in QUEUES for _ in range(share)]
    jobs = []
    for i in range(count):
        roll = rng.random()
        args: dict[str, Any] = {"ms": round(rng.uniform(0, 2 * ms), 2)}
        max_attempts = 25  # far more than the faults can spend: none may be discarded
        if roll < 0.005:
            args["mode"], max_attempts = "fail", 3
        elif roll < 0.025:
            args["mode"] = "flaky"
        elif roll < 0.03:
            args["spawn"] = 1.0  # long enough for a kill to catch the subprocess
        elif roll < 0.08:
            args["ms"] = round(rng.uniform(50, 300), 1)
        delay = spread * i / count if spread else None
        queue = rng.choice(queues)
        kind = "chaos"
        if queue == "io" and rng.random() < hang_share:
            # The first attempt hangs past the kind's timeout, among threaded siblings.
            kind, args["mode"], args["hang"] = "chaos_hang", "hang", 4 * HANG_TIMEOUT
        jobs.append(NewJob(kind, args, queue, delay=delay, max_attempts=max_attempts))
    return jobs


def _exists(pid: int) -> bool:
    """Alive and not a zombie (a zombie is dead; only its parent has yet to reap it)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def query(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
        return conn.execute(sql, params).fetchall()


class Drill:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = workdir
        self.server = EmbeddedPostgres(workdir / "pgdata", durable=True)
        self.dsn = ""
        self.config = workdir / "chaos.yaml"
        self.tracker = Tracker()
        self.incarnations: list[Incarnation] = []
        self.faults: list[Fault] = []
        self.problems: list[str] = []
        self.modes: dict[int, str] = {}
        self.ids: list[int] = []
        self.capacity = CAPACITY
        self.cpu_while_down: list[float] = []
        self.reload_count = 0
        # The faults stop early enough for the final stop and the checks to fit in --timeout.
        self.deadline = time.monotonic() + max(10.0, args.timeout - RESERVE)

    @property
    def current(self) -> Incarnation:
        return self.incarnations[-1]

    # -- set-up ------------------------------------------------------------------------------

    def prepare(self) -> list[int]:
        self.dsn = self.server.start()
        migrate(self.dsn)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(LEDGER_SQL)
            ids: list[int] = []
            jobs = make_jobs(
                self.args.jobs, self.rng, self.args.spread, self.args.ms, self.args.hang_share
            )
            for start in range(0, len(jobs), 2000):
                with conn.transaction():
                    ids += enqueue_many(conn, jobs[start : start + 2000])
        self.modes = {i: str(j.args.get("mode", "ok")) for i, j in zip(ids, jobs, strict=True)}
        self.config.write_text(CONFIG)
        return ids

    def start_supervisor(self) -> None:
        inc = start_incarnation(
            len(self.incarnations) + 1, ROOT, self.workdir, self.config, self.dsn
        )
        self.incarnations.append(inc)
        self.tracker.add(inc)

    # -- faults --------------------------------------------------------------------------------

    def schedule(self) -> list[str]:
        if self.args.faults == "short":
            plan = [kind for kind, n in SHORT.items() for _ in range(n)]
            self.rng.shuffle(plan)
            return plan
        first = list(FAULTS)
        self.rng.shuffle(first)  # every kind early, whatever the draw does later
        return first

    def next_fault(self, plan: list[str]) -> str | None:
        if plan:
            return plan.pop(0)
        if self.args.faults == "short":
            return None
        return self.rng.choices(list(WEIGHTS), list(WEIGHTS.values()))[0]

    def inject(self, kind: str) -> None:
        fault = Fault(kind, time.time(), sid=self.current.pid)
        if kind == "child_kill":
            # A random child, among those with a job in hand when there are any: killing an
            # idle one tests only the respawn.
            children = self.current.children(busy_only=True) or self.current.children()
            if not children:
                return
            victim = self.rng.choice(children)
            fault.pids.add(victim)
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
            self.check_group_gone(victim)
        elif kind == "deploy":
            self.stop_current("deploy")
            self.start_supervisor()
        elif kind == "master_kill":
            self.current.proc.kill()
            self.current.proc.wait(10)
            self.current.ended, self.current.end = time.time(), "master_kill"
            self.start_supervisor()
        elif kind == "freeze":
            fault.detail = self.freeze_master()
        elif kind == "pg_restart":
            self.server.restart()
        elif kind == "pg_kill":
            self.server.kill()
            # Sometimes longer than a lease: the rescuer then races the renewal on return.
            down = self.rng.uniform(0.5, 8.0)
            cpu = self.measure_cpu(down)
            fault.detail = f"down {down:.1f}s, busiest process {cpu:.0%} of a core"
            self.server.start()
        elif kind == "outage_deploy":
            fault.detail = self.outage_deploy()
        elif kind == "outage_reload":
            fault.detail = self.outage_reload()
        elif kind == "read_only":
            fault.detail = self.read_only()
        elif kind == "terminate":
            rows = query(
                self.dsn,
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name LIKE 'pgq-supervisor%%'",
            )
            fault.detail = f"{rows[0][0]} sessions"
        fault.ended = time.time()
        self.faults.append(fault)
        log(f"fault {len(self.faults)}: {kind} {fault.describe()}")

    def freeze_master(self) -> str:
        """A master that stops renewing (SIGSTOP: a stall, a partition) while its children run
        on: past the lease, another host's rescuer (played by us) takes their long jobs, and
        the children's late results must be fenced out."""
        # Long jobs in hand first, so there is something for the rescuer to take.
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            long_ms = (LEASE + 3.0) * 1000
            added = enqueue_many(conn, [NewJob("chaos", {"ms": long_ms}, "io") for _ in range(3)])
        self.ids += added
        self.modes.update(dict.fromkeys(added, "ok"))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(self.started(added)) < len(added):
            time.sleep(0.1)
        master = self.current.pid
        os.kill(master, signal.SIGSTOP)
        try:
            time.sleep(LEASE + 1.5)
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                moved = maintenance.rescue_batch(conn, limit=10_000, history=True)
        finally:
            os.kill(master, signal.SIGCONT)
        return f"rescued {len(moved)} jobs {[m.id for m in moved][:20]}"

    def outage_deploy(self) -> str:
        """A deploy during a database restart: SIGTERM while PostgreSQL is down. The draining
        children must wait for it (without spinning) and write what they finished."""
        down = self.rng.uniform(2.0, 5.0)
        self.server.stop("fast")
        self.current.proc.send_signal(signal.SIGTERM)
        cpu = self.measure_cpu(down)
        self.server.start()
        self.stop_current("outage_deploy", signal_sent=True)
        self.start_supervisor()
        return f"down {down:.1f}s, busiest process {cpu:.0%} of a core"

    def outage_reload(self) -> str:
        """A reload during an outage: SIGHUP with a changed policy retires every pool. The
        retired children must drain under the shutdown deadline, not spin forever."""
        retired = self.current.children()
        down = self.rng.uniform(2.0, 5.0)
        self.server.stop("fast")
        self.reload_count += 1
        policy = f"timeout: {60 + self.reload_count}s"
        self.config.write_text(CONFIG.replace("timeout: 60s", policy))
        os.kill(self.current.pid, signal.SIGHUP)
        cpu = self.measure_cpu(down)
        self.server.start()
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT + 10
        while any(_exists(pid) for pid in retired) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [pid for pid in retired if _exists(pid)]
        if left:
            self.problems.append(f"children {left} retired by a reload outlived their deadline")
        return f"down {down:.1f}s, {len(retired)} retired, busiest process {cpu:.0%} of a core"

    def read_only(self) -> str:
        """A read-only period, as after a failover demoted the primary: every write fails
        (SQLSTATE 25006) until it ends; the supervisor must carry on and lose nothing."""
        period = self.rng.uniform(1.0, 4.0)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")
            time.sleep(period)
            conn.execute("SET default_transaction_read_only = off")
            conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")
        return f"read-only {period:.1f}s"

    def measure_cpu(self, seconds: float) -> float:
        """Wait out an outage while measuring the CPU of every process of the current
        supervisor; returns the busiest one's share of a core (and records it)."""
        procs = []
        for seen in alive_in_sessions({self.current.pid}):
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(seen.pid)
                procs.append((proc, sum(proc.cpu_times()[:2])))
        time.sleep(seconds)
        busiest, who = 0.0, ""
        for proc, before in procs:
            with contextlib.suppress(psutil.Error):
                share = (sum(proc.cpu_times()[:2]) - before) / seconds
                if share > busiest:
                    busiest, who = share, " ".join(proc.cmdline())[:80]
        self.cpu_while_down.append(busiest)
        if busiest > CPU_BOUND:
            self.problems.append(
                f"a process used {busiest:.0%} of a core while the database was down: {who}"
            )
        return busiest

    def started(self, ids: list[int]) -> list[tuple[Any, ...]]:
        return query(
            self.dsn, "SELECT DISTINCT job_id FROM chaos_ledger WHERE job_id = ANY(%s)", (ids,)
        )

    def check_group_gone(self, victim: int) -> None:
        """Once the master has reaped a killed child, nothing may be left in its process group
        (a handler's subprocess would be an orphan nobody stops)."""
        deadline = time.monotonic() + 5
        while _exists(victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)  # the master's turn: reap, requeue, clean up the group
        left = [s.pid for s in alive_in_sessions({self.current.pid}) if s.pgid == victim]
        if left:
            self.problems.append(f"killed child {victim} left processes {left} in its group")

    def stop_current(self, why: str, signal_sent: bool = False) -> None:
        inc = self.current
        if not signal_sent:
            inc.proc.send_signal(signal.SIGTERM)
        try:
            code = inc.proc.wait(SHUTDOWN_TIMEOUT + 20)
        except Exception:
            self.problems.append(f"supervisor {inc.number} did not stop within the timeout")
            inc.proc.kill()
            code = inc.proc.wait(10)
        inc.ended, inc.end = time.time(), why
        if code != 0:
            self.problems.append(f"supervisor {inc.number} ({why}) exited with code {code}")

    def check_alive(self) -> None:
        inc = self.current
        code = inc.proc.poll()
        if code is not None:
            inc.ended, inc.end = time.time(), "exited"
            self.problems.append(f"supervisor {inc.number} exited by itself with code {code}")
            log(f"supervisor {inc.number} exited with code {code}; starting another")
            self.start_supervisor()

    # -- the run -------------------------------------------------------------------------------

    def remaining(self) -> int | None:
        try:
            return query(self.dsn, "SELECT count(*) FROM pgq.jobs WHERE state <> 'discarded'")[0][0]
        except psycopg.Error:
            return None  # the database is down: we caused it

    def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.ids = self.prepare()
        log(f"enqueued {len(self.ids)} jobs in {time.monotonic() - started:.1f}s; starting")
        self.tracker.start()
        began = time.time()
        self.start_supervisor()
        plan = self.schedule()
        next_at = time.monotonic() + self.rng.uniform(1.5, 3.0)
        drained_at: float | None = None
        while time.monotonic() < self.deadline:
            self.check_alive()
            left = self.remaining()
            if left == 0 and (not plan or self.args.faults == "full"):
                drained_at = time.time()
                break
            if time.monotonic() >= next_at:
                kind = self.next_fault(plan)
                if kind is not None:
                    self.inject(kind)
                next_at = time.monotonic() + self.rng.uniform(*self.args.gap)
            time.sleep(0.2)
        if drained_at is None:
            self.problems.append(f"the jobs did not drain within --timeout {self.args.timeout}s")
        self.stop_current("final")
        ended = drained_at or time.time()
        return verify(self, self.ids, began, ended)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", choices=("full", "short"), default="full")
    parser.add_argument("--timeout", type=float, default=900.0, help="bound on the whole run")
    parser.add_argument(
        "--spread", type=float, help="seconds over which run_at is spread (short: 20)"
    )
    parser.add_argument("--ms", type=float, help="mean handler time in ms (short: 30, full: 2)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = parser.parse_args(argv)
    if args.spread is None:
        args.spread = 20.0 if args.faults == "short" else 0.0
    if args.ms is None:
        args.ms = 30.0 if args.faults == "short" else 2.0
    args.gap = (0.5, 1.5) if args.faults == "short" else (2.0, 4.0)
    # Threaded-pool jobs whose first attempt hangs: a few in a short drill, 1 in 500 in full.
    args.hang_share = 0.03 if args.faults == "short" else 0.002
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM as Ctrl-C: unwind through the finally below, which stops everything; and the
    # alarm bounds the whole run, even a fault or a check that hangs.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGALRM, _out_of_time)
    signal.alarm(max(1, int(args.timeout)))
    workdir = Path(tempfile.mkdtemp(prefix="pgq-chaos-"))
    drill = Drill(args, workdir)
    result: dict[str, Any] = {"ok": False}
    try:
        result = drill.run()
    except KeyboardInterrupt:
        log("interrupted; stopping everything")
        result = {"ok": False, "error": "interrupted"}
    except OutOfTime:
        log(f"out of time (--timeout {args.timeout:g}s); stopping everything")
        result = {"ok": False, "error": f"no verdict within --timeout {args.timeout:g}s"}
    except Exception as exc:
        log(f"failed: {type(exc).__name__}: {exc}")
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        cleanup(drill, args.keep or not result.get("ok"))
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0 if result.get("ok") else 1


class OutOfTime(Exception):
    pass


def _out_of_time(signum: int, frame: Any) -> None:
    raise OutOfTime


def cleanup(drill: Drill, keep: bool) -> None:
    signal.alarm(0)
    with contextlib.suppress(Exception):
        drill.tracker.stop()
    for inc in drill.incarnations:
        if inc.proc.poll() is None:
            inc.proc.kill()
            with contextlib.suppress(Exception):
                inc.proc.wait(10)
    kill_sessions(set(drill.tracker.sids))
    with contextlib.suppress(Exception):
        drill.server.stop("immediate")
    if keep:
        log(f"logs and data kept in {drill.workdir}")
    else:
        shutil.rmtree(drill.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
