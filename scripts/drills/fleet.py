"""Fleet drill: three supervisors as three hosts on one database, under load, while one host
is SIGKILLed whole, one is frozen past its leases and one is deployed.

    python scripts/drills/fleet.py [--jobs 20000] [--hosts 3] [--seed 1] [--spread 60] [--purge]

Each supervisor is its own process tree (its own session) with its own host identity
(PGQ_HOST=host-a, host-b, ...), all on the database named by --dsn or PGQ_DSN (its pgq schema
is migrated; the drill's tables are added), or on an embedded PostgreSQL started for the run.
The jobs' run_at is spread over --spread seconds so the faults land on a fleet at work. On a
seeded schedule: the host running the rescuer is SIGKILLed whole (master and children at
once, as when a machine dies) and started again later under the same name; one is frozen
(SIGSTOP of every process) past its leases, then resumed; one is deployed (SIGTERM, exit 0,
start again).

The verdict is the chaos drill's (scripts/drills/chaos_checks.py: every job completed exactly once,
none lost, every extra execution explained by a fault, no process left behind) plus the
fleet's own, measured from pgq.maintenance_runs: each singleton duty (rescue, vacuum, and the
purge with --purge) never ran twice within one interval across the fleet, ran on more than one
host, and kept running after its host was killed. The last line on stdout is one JSON object;
the exit status is 0 only if every check held.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below need the path set up first)
import argparse
import contextlib
import itertools
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "drills")]

from chaos_checks import Fault, verify
from chaos_handlers import LEDGER_SQL
from chaos_procs import Incarnation, Tracker, alive_in_sessions, kill_sessions, start_incarnation

from supervisor import NewJob, enqueue_many, migrate

LEASE = 4.0
RESCUE_INTERVAL = 2.0
VACUUM_INTERVAL = 1.0
SHUTDOWN_TIMEOUT = 10.0
PROCESSES = 2
BATCH = 4
# Long enough to be in hand when a fault strikes (see load_up).
LONG_JOB_MS = 3000.0
RESCUED = re.compile(r"rescuer: (\d+) jobs with expired leases returned")
# Consecutive runs of a duty may be further apart than its interval by this much (a loop
# turn, a freeze of the host that was about to run it) before the duty counts as stalled.
DUTY_SLACK = 3.0

CONFIG = f"""
handlers:
  chaos: chaos_handlers:work
  tick: chaos_handlers:work
pools:
  work:
    processes: {PROCESSES}
    batch: {BATCH}
    queues: {{bulk: 2, io: 1}}
    poll_interval: 200ms
jobs:
  chaos: {{timeout: 60s, backoff: {{base: 200ms, cap: 2s}}}}
shutdown_timeout: {SHUTDOWN_TIMEOUT:g}s
lease: {{duration: {LEASE:g}s, renew_every: 1s}}
rescue: {{interval: {RESCUE_INTERVAL:g}s}}
vacuum: {{enabled: true, interval: {VACUUM_INTERVAL:g}s, dead_rows: 500}}
history: {{enabled: true}}
"""
# A periodic schedule every host runs: each tick must be enqueued by exactly one of them.
SCHEDULE_EVERY = 2.0
SCHEDULES = f"""
schedules:
  fleet_tick: {{every: {SCHEDULE_EVERY:g}s, kind: tick, queue: io}}
"""
# Every tick job as it is enqueued (its unique key names the schedule and the tick).
TICKS_SQL = """
CREATE TABLE IF NOT EXISTS fleet_ticks (
    job_id      bigint      NOT NULL,
    unique_key  text,
    run_at      timestamptz NOT NULL
);
CREATE OR REPLACE FUNCTION fleet_record_tick() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO fleet_ticks VALUES (NEW.id, NEW.unique_key, NEW.run_at);
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS fleet_tick ON pgq.jobs;
CREATE TRIGGER fleet_tick AFTER INSERT ON pgq.jobs
FOR EACH ROW WHEN (NEW.kind = 'tick') EXECUTE FUNCTION fleet_record_tick();
"""


def log(message: str) -> None:
    print(f"fleet {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def query(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
        return conn.execute(sql, params).fetchall()


class Host:
    """One host of the fleet: a name, and the supervisor incarnations it ran in turn."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.incarnations: list[Incarnation] = []

    @property
    def current(self) -> Incarnation | None:
        return self.incarnations[-1] if self.incarnations else None


class FleetDrill:
    """Satisfies chaos_checks.Drill, so the chaos drill's verdict applies unchanged."""

    def __init__(self, args: argparse.Namespace, workdir: Path, dsn: str) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.workdir = workdir
        self.dsn = dsn
        self.config = workdir / "fleet.yaml"
        self.tracker = Tracker()
        self.hosts = [Host(f"host-{chr(ord('a') + i)}") for i in range(args.hosts)]
        self.incarnations: list[Incarnation] = []
        self.faults: list[Fault] = []
        self.problems: list[str] = []
        # The chaos verdict bounds the CPU of supervisors waiting out a database outage; the
        # fleet drill stops no database, so there is nothing to bound.
        self.cpu_while_down: list[float] = []
        self.modes: dict[int, str] = {}
        self.ids: list[int] = []
        self.capacity = args.hosts * PROCESSES * BATCH
        self.purge_at: datetime | None = None
        self.base_config = CONFIG
        self.schedule_off = False
        self.began = time.time()

    # -- set-up ------------------------------------------------------------------------------

    def prepare(self) -> list[int]:
        migrate(self.dsn)
        config = CONFIG
        if self.args.purge:
            # The first whole minute at least 20 s away: every host's purger wakes then.
            soon = datetime.now().astimezone() + timedelta(seconds=80)
            self.purge_at = soon.replace(second=0, microsecond=0)
            config += f'purge: {{at: "{self.purge_at:%H:%M}"}}\n'
        self.base_config = config
        self.config.write_text(config + SCHEDULES)
        jobs = []
        for i in range(self.args.jobs):
            args: dict[str, Any] = {"ms": round(self.rng.uniform(0, 2 * self.args.ms), 2)}
            if self.rng.random() < 0.02:
                args["mode"] = "flaky"
            queue = "bulk" if self.rng.random() < 0.7 else "io"
            delay = self.args.spread * i / self.args.jobs
            jobs.append(NewJob("chaos", args, queue, delay=delay, max_attempts=25))
        ids: list[int] = []
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(LEDGER_SQL)
            conn.execute(TICKS_SQL)
            for start in range(0, len(jobs), 2000):
                with conn.transaction():
                    ids += enqueue_many(conn, jobs[start : start + 2000])
        self.modes = {i: str(j.args.get("mode", "ok")) for i, j in zip(ids, jobs, strict=True)}
        return ids

    def start(self, host: Host) -> None:
        inc = start_incarnation(
            len(self.incarnations) + 1, ROOT, self.workdir, self.config, self.dsn, host.name
        )
        host.incarnations.append(inc)
        self.incarnations.append(inc)
        self.tracker.add(inc)

    # -- faults --------------------------------------------------------------------------------

    def load_up(self, host: Host) -> None:
        """Long jobs first, and wait until the host has one in hand, so that the fault has
        leases to take: a fault that hits only idle children proves little."""
        inc = host.current
        assert inc is not None
        count = len(self.hosts) * PROCESSES
        long_jobs = [NewJob("chaos", {"ms": LONG_JOB_MS}, "io") for _ in range(count)]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            added = enqueue_many(conn, long_jobs)
        self.ids += added
        self.modes.update(dict.fromkeys(added, "ok"))
        deadline = time.monotonic() + 15
        while not inc.children(busy_only=True) and time.monotonic() < deadline:
            time.sleep(0.05)

    def host_kill(self, host: Host) -> Fault:
        """The machine dies: every process of the host at once, nothing drains."""
        inc = host.current
        assert inc is not None
        fault = Fault("host_kill", time.time(), sid=inc.pid, detail=host.name)
        fault.pids = {s.pid for s in alive_in_sessions({inc.pid})}
        kill_sessions({inc.pid})
        inc.proc.wait(10)
        inc.ended, inc.end = time.time(), "host_kill"
        return fault

    def freeze(self, host: Host) -> Fault:
        """The host stalls (SIGSTOP of every process: a VM pause, a partition) past its leases;
        other hosts' rescuers take its jobs, and its late results must be fenced out."""
        inc = host.current
        assert inc is not None
        fault = Fault("freeze", time.time(), sid=inc.pid, detail=host.name)
        frozen = [inc.pid] + [s.pid for s in alive_in_sessions({inc.pid}) if s.pid != inc.pid]
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        fault.pids = set(frozen)
        try:
            time.sleep(LEASE + RESCUE_INTERVAL + 1.0)
        finally:
            for pid in reversed(frozen):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        return fault

    def deploy(self, host: Host) -> Fault:
        inc = host.current
        assert inc is not None
        fault = Fault("deploy", time.time(), sid=inc.pid, detail=host.name)
        self.stop(host, "deploy")
        self.start(host)
        return fault

    def stop(self, host: Host, why: str) -> None:
        inc = host.current
        if inc is None or inc.proc.poll() is not None:
            return
        inc.proc.send_signal(signal.SIGTERM)
        try:
            code = inc.proc.wait(SHUTDOWN_TIMEOUT + 20)
        except Exception:
            self.problems.append(f"{host.name} ({inc.number}) did not stop in time")
            inc.proc.kill()
            code = inc.proc.wait(10)
        inc.ended, inc.end = time.time(), why
        if code != 0:
            self.problems.append(f"{host.name} ({inc.number}, {why}) exited with code {code}")

    # -- the run -------------------------------------------------------------------------------

    def remaining(self) -> int:
        return int(
            query(self.dsn, "SELECT count(*) FROM pgq.jobs WHERE state <> 'discarded'")[0][0]
        )

    def run(self) -> dict[str, Any]:
        self.ids = self.prepare()
        log(f"enqueued {len(self.ids)} jobs; starting {len(self.hosts)} hosts")
        self.tracker.start()
        began = self.began = time.time()
        for host in self.hosts:
            self.start(host)
        spread = max(self.args.spread, 12.0)
        # Who is killed is decided when the kill is due: the host that ran the rescuer last,
        # so that the duty must move (a kill elsewhere would leave its failover untried).
        plan: list[tuple[float, str, Host | None]] = [
            (spread * 0.15, "host_kill", None),
            (spread * 0.35, "freeze", None),
            (spread * 0.6, "deploy", None),
            # The dead machine comes back under the same name, with new worker identities.
            (spread * 0.75, "restart", None),
        ]
        roles: dict[str, Host] = {}
        t0 = time.monotonic()
        deadline = t0 + self.args.timeout - SHUTDOWN_TIMEOUT - 30
        drained_at: float | None = None
        while time.monotonic() < deadline:
            if plan and time.monotonic() - t0 >= plan[0][0]:
                _, kind, _ = plan.pop(0)
                if not roles:
                    roles = self.cast_roles()
                host = roles[kind]
                if kind == "restart":
                    self.start(host)
                    log(f"{host.name} restarted")
                else:
                    if kind != "deploy":
                        self.load_up(host)
                    fault = getattr(self, kind)(host)
                    fault.ended = time.time()
                    self.faults.append(fault)
                    log(f"fault {len(self.faults)}: {kind} {fault.describe()}")
            for host in self.hosts:
                inc = host.current
                if inc is not None and inc.end == "" and inc.proc.poll() is not None:
                    inc.ended, inc.end = time.time(), "exited"
                    self.problems.append(f"{host.name} exited by itself ({inc.proc.returncode})")
            if not plan and self.remaining() == 0 and self.duties_done():
                if not self.schedule_off:
                    self.stop_schedule()
                    continue
                drained_at = time.time()
                break
            time.sleep(0.2)
        if drained_at is None:
            self.problems.append(f"the jobs did not drain within --timeout {self.args.timeout}s")
        for host in self.hosts:
            self.stop(host, "final")
        result = verify(self, self.ids, began, drained_at or time.time())
        duties = self.duties(began)
        result["checks"].update(duties.pop("checks"))
        result["ok"] = all(result["checks"].values())
        result.update(duties)
        result["hosts"] = len(self.hosts)
        rescued = [int(n) for inc in self.incarnations for n in RESCUED.findall(inc.log())]
        result["jobs_rescued"] = sum(rescued)
        return result

    def cast_roles(self) -> dict[str, Host]:
        """The victim is the host that ran the rescuer last (else a seeded pick); the frozen
        and the deployed hosts are seeded picks among the others."""
        deadline = time.monotonic() + 3 * RESCUE_INTERVAL
        while True:
            last = query(
                self.dsn,
                "SELECT split_part(run_by, ':', 1) FROM pgq.maintenance_runs "
                "WHERE task = 'rescue' AND started_at >= to_timestamp(%s) "
                "ORDER BY started_at DESC LIMIT 1",
                (self.began,),
            )
            if last or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        named = [h for h in self.hosts if last and h.name == last[0][0]]
        victim = named[0] if named else self.rng.choice(self.hosts)
        frozen, deployed = self.rng.sample([h for h in self.hosts if h is not victim], 2)
        log(f"roles: kill {victim.name}, freeze {frozen.name}, deploy {deployed.name}")
        return {"host_kill": victim, "freeze": frozen, "deploy": deployed, "restart": victim}

    def stop_schedule(self) -> None:
        """The end: reload every host without the schedule, so the last tick's job is not
        left waiting when the hosts stop; the loop then waits for the queue to empty again."""
        self.config.write_text(self.base_config)
        for host in self.hosts:
            inc = host.current
            if inc is not None and inc.proc.poll() is None:
                inc.proc.send_signal(signal.SIGHUP)
        self.schedule_off = True
        time.sleep(SCHEDULE_EVERY)

    def duties_done(self) -> bool:
        """With --purge, the run lasts until the purge's minute has passed."""
        return self.purge_at is None or datetime.now().astimezone() > self.purge_at + timedelta(
            seconds=5
        )

    def duties(self, began: float) -> dict[str, Any]:
        """The singleton duties, from the database's own record of every run."""
        rows = query(
            self.dsn,
            "SELECT task, split_part(run_by, ':', 1), run_by, extract(epoch FROM started_at) "
            "FROM pgq.maintenance_runs WHERE started_at >= to_timestamp(%s) ORDER BY started_at",
            (began,),
        )
        kill = next((f for f in self.faults if f.kind == "host_kill"), None)
        intervals = {"rescue": RESCUE_INTERVAL, "vacuum": VACUUM_INTERVAL, "purge": 3600.0}
        report: dict[str, Any] = {}
        checks: dict[str, bool] = {}
        for task, interval in intervals.items():
            runs = [(host, run_by, float(at)) for t, host, run_by, at in rows if t == task]
            gaps = [b[2] - a[2] for a, b in itertools.pairwise(runs)]
            by_host: dict[str, int] = {}
            for host, _, _ in runs:
                by_host[host] = by_host.get(host, 0) + 1
            report[f"{task}_runs"] = len(runs)
            report[f"{task}_runs_by_host"] = by_host
            report[f"{task}_min_gap_s"] = round(min(gaps), 3) if gaps else None
            report[f"{task}_max_gap_s"] = round(max(gaps), 3) if gaps else None
            checks[f"{task}_never_twice_in_an_interval"] = all(g >= interval * 0.9 for g in gaps)
            if task == "rescue":
                after = [r for r in runs if kill and r[2] > (kill.ended or kill.at)]
                # The duty moves when its host dies: the drill kills the host that ran the
                # rescuer last (cast_roles), and another host must run it afterwards.
                if kill is not None and any(
                    host == kill.detail and at <= kill.at for host, _, at in runs
                ):
                    checks["rescue_moved_off_the_killed_host"] = any(
                        host != kill.detail for host, _, at in after
                    )
                checks["rescue_kept_running_after_host_kill"] = bool(after)
                checks["rescue_never_stalled"] = all(g <= interval + DUTY_SLACK for g in gaps)
        if self.purge_at is not None:
            checks["purge_ran_exactly_once"] = report["purge_runs"] == 1
        ticks = query(self.dsn, "SELECT unique_key, extract(epoch FROM run_at) FROM fleet_ticks")
        moments = sorted(float(at) for _, at in ticks)
        steps = [round((b - a) / SCHEDULE_EVERY, 3) for a, b in itertools.pairwise(moments)]
        report["schedule_ticks"] = len(ticks)
        report["schedule_ticks_missed"] = int(sum(step - 1 for step in steps))
        checks["schedule_ticked_once_each"] = bool(ticks) and (
            len({key for key, _ in ticks}) == len(ticks) and all(step >= 1 for step in steps)
        )
        return {**report, "checks": checks}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--hosts", type=int, default=3, help="at least 3")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spread", type=float, default=60.0, help="seconds run_at spreads over")
    parser.add_argument("--ms", type=float, default=10.0, help="mean handler time in ms")
    parser.add_argument("--purge", action="store_true", help="also schedule a purge in the run")
    parser.add_argument("--dsn", help="a database to use (default PGQ_DSN, else embedded)")
    parser.add_argument("--timeout", type=float, default=600.0, help="bound on the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = parser.parse_args(argv)
    if args.hosts < 3:
        parser.error("--hosts must be at least 3 (one killed, one frozen, one deployed)")
    args.faults = "fleet"  # named in the verdict's figures
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    workdir = Path(tempfile.mkdtemp(prefix="pgq-fleet-"))
    server = None
    dsn = args.dsn or os.environ.get("PGQ_DSN")
    if not dsn:
        from supervisor.embedded.server import EmbeddedPostgres

        server = EmbeddedPostgres(workdir / "pgdata", durable=False)
        dsn = server.start()
    drill = FleetDrill(args, workdir, dsn)
    result: dict[str, Any] = {"ok": False}
    try:
        result = drill.run()
    except KeyboardInterrupt:
        result = {"ok": False, "error": "interrupted"}
    except Exception as exc:
        log(f"failed: {type(exc).__name__}: {exc}")
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        with contextlib.suppress(Exception):
            drill.tracker.stop()
        for inc in drill.incarnations:
            if inc.proc.poll() is None:
                inc.proc.kill()
        kill_sessions(set(drill.tracker.sids))
        if server is not None:
            server.stop("immediate")
        if args.keep or not result.get("ok"):
            log(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result, sort_keys=True), flush=True)
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
