"""Failover on a real cluster manager: Patroni with etcd, two PostgreSQL nodes on this machine,
two supervisors and a producer through a multi-host DSN (``target_session_attrs=read-write``).

Each cell starts a fresh cluster, runs the load (jobs at ``--rate`` a second, one in ten for a
second later, a schedule every 2 s), makes the primary move, keeps the load going, then lets the
queue drain and reads the verdict:

- ``switchover``: a planned switchover (``patronictl switchover``);
- ``postmaster-kill``: the primary's postmaster SIGKILLed (Patroni restarts it, or fails over);
- ``leader-crash``: the primary's Patroni and postmaster SIGKILLed together (the host is gone:
  the replica is promoted once the leader key expires).

``--sync`` (default) runs Patroni's synchronous mode, ``--async`` plain streaming replication.

Figures per cell, one JSON line each: committed jobs lost (acknowledged to the producer, never
run), jobs run twice, seconds without a completion around the move, pickup p50 before and after,
schedule ticks against the expected count (and any two closer than a second: a tick enqueued
late after the outage, or one run twice), rescues logged (a lease
falsely expired is a rescue of a live worker's job), the masters' longest turn.

Needs root (PostgreSQL runs as the ``postgres`` user) and Debian's ``patroni`` and
``etcd-server``.

    python scripts/drills/failover_drill.py --cells switchover,leader-crash --seconds 20
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from supervisor import NewJob, enqueue_many  # noqa: E402
from supervisor.queue.migrations import migrate  # noqa: E402

CELLS = ("switchover", "postmaster-kill", "leader-crash")
ETCD_CLIENT = 23790
ETCD_PEER = 23800
NODES = {"node1": (55431, 8101), "node2": (55432, 8102)}
DATABASE = "drill"
_TURN = re.compile(r"a turn took (\d+\.\d+)s")


def pg_bin_dir() -> Path:
    for major in ("17", "16", "15"):
        path = Path(f"/usr/lib/postgresql/{major}/bin")
        if (path / "postgres").exists():
            return path
    raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql")


def available() -> str | None:
    """Why the drill cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (PostgreSQL runs as the postgres user)"
    for tool in ("patroni", "patronictl", "etcd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install patroni etcd-server)"
    return None


def multi_host_dsn(database: str = DATABASE) -> str:
    hosts = ",".join(f"127.0.0.1:{port}" for port, _ in NODES.values())
    return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write&connect_timeout=2"


class Cluster:
    """etcd and two Patroni nodes in a scratch folder owned by the postgres user."""

    def __init__(self, work: Path, *, synchronous: bool) -> None:
        self.work = work
        self.synchronous = synchronous
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        shutil.chown(work, "postgres", "postgres")

    def start(self) -> None:
        etcd_dir = self.work / "etcd"
        self.procs["etcd"] = self._spawn(
            "etcd",
            [
                "etcd",
                "--name=e1",
                f"--data-dir={etcd_dir}",
                f"--listen-client-urls=http://127.0.0.1:{ETCD_CLIENT}",
                f"--advertise-client-urls=http://127.0.0.1:{ETCD_CLIENT}",
                f"--listen-peer-urls=http://127.0.0.1:{ETCD_PEER}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{ETCD_PEER}",
                f"--initial-cluster=e1=http://127.0.0.1:{ETCD_PEER}",
            ],
        )
        for name in NODES:
            self.start_node(name)
            if name == "node1":
                wait("node1 leads", lambda: self.leader() == "node1", 90)
        wait("a streaming replica", self.has_streaming_replica, 90)
        if self.synchronous:
            wait("a synchronous standby", self.has_sync_standby, 60)

    def node_config(self, name: str) -> Path:
        port, rest = NODES[name]
        config = {
            "scope": "pgqdrill",
            "namespace": "/pgqdrill/",
            "name": name,
            "restapi": {"listen": f"127.0.0.1:{rest}", "connect_address": f"127.0.0.1:{rest}"},
            "etcd3": {"hosts": f"127.0.0.1:{ETCD_CLIENT}"},
            "bootstrap": {
                "dcs": {
                    "ttl": 10,
                    "loop_wait": 1,
                    "retry_timeout": 4,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "max_wal_senders": 10,
                            "max_replication_slots": 10,
                            "wal_log_hints": "on",
                            "max_connections": 100,
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{port}",
                "connect_address": f"127.0.0.1:{port}",
                "data_dir": str(self.work / name),
                "bin_dir": str(pg_bin_dir()),
                "pgpass": str(self.work / f"{name}.pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(self.work)},
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
        }
        path = self.work / f"{name}.yml"
        path.write_text(yaml.safe_dump(config))
        shutil.chown(path, "postgres", "postgres")
        return path

    def start_node(self, name: str) -> None:
        self.procs[name] = self._spawn(name, ["patroni", str(self.node_config(name))])

    def _spawn(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = (self.work / f"{name}.log").open("ab")
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, user="postgres", start_new_session=True
        )

    def rest(self, name: str, path: str) -> tuple[int, dict[str, Any]]:
        _, port = NODES[name]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                return exc.code, json.loads(exc.read() or b"{}")
            except ValueError:
                return exc.code, {}
        except (OSError, ValueError):
            return 0, {}

    def role(self, name: str) -> str:
        status, body = self.rest(name, "/patroni")
        return str(body.get("role", "")) if status else ""

    def leader(self) -> str | None:
        for name in NODES:
            if self.role(name) in ("primary", "master"):
                return name
        return None

    def has_streaming_replica(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        _, body = self.rest(leader, "/cluster")
        return any(
            m.get("role") in ("replica", "sync_standby")
            and m.get("state") in ("streaming", "running")
            for m in body.get("members", [])
        )

    def has_sync_standby(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        _, body = self.rest(leader, "/cluster")
        return any(m.get("role") == "sync_standby" for m in body.get("members", []))

    def postmaster_pid(self, name: str) -> int:
        return int((self.work / name / "postmaster.pid").read_text().split()[0])

    def switchover(self) -> None:
        leader = self.leader()
        candidate = next(n for n in NODES if n != leader)
        subprocess.run(
            [
                "patronictl",
                "-c",
                str(self.work / f"{leader}.yml"),
                "switchover",
                "--candidate",
                candidate,
                "--force",
            ],
            check=True,
            capture_output=True,
            user="postgres",
        )

    def kill_postmaster(self) -> None:
        leader = self.leader()
        assert leader is not None
        os.kill(self.postmaster_pid(leader), signal.SIGKILL)

    def crash_leader(self) -> str:
        """The leader's host gone: its Patroni and its PostgreSQL SIGKILLed together. Returns
        the node, which is started again later (as a new replica, rewound)."""
        leader = self.leader()
        assert leader is not None
        pid = self.postmaster_pid(leader)
        os.killpg(self.procs[leader].pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        return leader

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        # A postmaster whose Patroni was killed outlives it: stop what is left in the folder.
        subprocess.run(["pkill", "-9", "-f", str(self.work)], check=False)


def wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise TimeoutError(f"waited {timeout:.0f}s for {what}")


class Producer(threading.Thread):
    """Enqueues ``rate`` jobs a second through the multi-host DSN; a job counts as committed
    only when its commit returned. A commit whose answer was lost is in doubt, not committed."""

    def __init__(self, dsn: str, rate: int) -> None:
        super().__init__(daemon=True)
        self.dsn = dsn
        self.rate = rate
        self.stop = threading.Event()
        self.committed: dict[int, float] = {}
        self.in_doubt: set[int] = set()
        self.errors = 0
        self.seq = 0

    def run(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        per_batch = max(1, self.rate // 50)
        while not self.stop.is_set():
            started = time.monotonic()
            sent = False
            seqs = list(range(self.seq, self.seq + per_batch))
            self.seq += per_batch
            at = time.time()
            jobs = [
                NewJob("work", {"seq": s, "at": at}, delay=1.0 if s % 10 == 0 else None)
                for s in seqs
            ]
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, connect_timeout=2)
                with conn.transaction():
                    enqueue_many(conn, jobs)
                    sent = True
                for s in seqs:
                    self.committed[s] = at
            except psycopg.Error:
                self.errors += 1
                if sent:  # the commit itself failed: it may have happened
                    self.in_doubt.update(seqs)
                conn = None
                time.sleep(0.2)
            time.sleep(max(0.0, 0.02 - (time.monotonic() - started)))


def supervisor_config(work: Path, index: int) -> Path:
    config = {
        "database": {"dsn": multi_host_dsn(), "connect_timeout": "2s"},
        "handlers": {
            "work": "failover_drill_jobs:work",
            "tick": "failover_drill_jobs:tick",
        },
        "pools": {"main": {"processes": 2, "batch": 10, "queues": {"default": 1}}},
        "schedules": {"tick": {"every": "2s", "kind": "tick"}},
        "shutdown_timeout": "10s",
    }
    path = work / f"supervisor{index}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_supervisor(work: Path, index: int, ledger: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PGQ_DRILL_LEDGER": str(ledger),
        "PYTHONPATH": f"{Path(__file__).parent}{os.pathsep}{ROOT}",
        "PGQ_HOST": f"drill-host-{index}",
    }
    log = (work / f"supervisor{index}.log").open("ab")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "supervisor.cli",
            "-c",
            str(supervisor_config(work, index)),
            "--log-level",
            "debug",
            "run",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=work,
        start_new_session=True,
    )


def read_ledger(path: Path) -> list[tuple[str, int, float, float]]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            kind, seq, at, ran, _pid = line.split()
            rows.append((kind, int(seq), float(at), float(ran)))
    return rows


def longest_gap(times: list[float], start: float, end: float) -> float:
    inside = sorted(t for t in times if start <= t <= end)
    if not inside:
        return end - start
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))


def p50_ms(values: list[float]) -> float | None:
    return round(statistics.median(values) * 1000, 1) if values else None


def run_cell(cell: str, *, synchronous: bool, seconds: float, rate: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"pgq-failover-{cell}-"))
    cluster = Cluster(work, synchronous=synchronous)
    supervisors: list[subprocess.Popen[bytes]] = []
    ledger = work / "ledger"
    result: dict[str, Any] = {"cell": cell, "replication": "sync" if synchronous else "async"}
    try:
        cluster.start()
        with psycopg.connect(multi_host_dsn("postgres"), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        migrate(multi_host_dsn())
        supervisors = [start_supervisor(work, i, ledger) for i in (1, 2)]
        # The load starts once the supervisors serve (their first tick has run).
        wait(
            "the supervisors serving", lambda: any(r[0] == "tick" for r in read_ledger(ledger)), 60
        )
        producer = Producer(multi_host_dsn(), rate)
        producer.start()
        loaded_at = time.time()
        time.sleep(seconds / 2)
        before = cluster.leader()
        moved_at = time.time()
        crashed = None
        if cell == "switchover":
            cluster.switchover()
        elif cell == "postmaster-kill":
            cluster.kill_postmaster()
        else:
            crashed = cluster.crash_leader()
        wait(
            "a primary again",
            lambda: cluster.leader() is not None and cluster.leader() != crashed,
            90,
        )
        result["primary_before"], result["primary_after"] = before, cluster.leader()
        result["seconds_to_primary"] = round(time.time() - moved_at, 1)
        if crashed is not None:
            cluster.start_node(crashed)  # back as a replica (pg_rewind), as an operator would
        time.sleep(seconds / 2)
        producer.stop.set()
        producer.join(10)
        stopped_at = time.time()
        committed = producer.committed

        def drained() -> bool:
            done = {seq for kind, seq, _, _ in read_ledger(ledger) if kind == "work"}
            return set(committed) <= done

        with contextlib.suppress(TimeoutError):
            wait("every committed job run", drained, 60)
        rows = read_ledger(ledger)
        work_rows = [r for r in rows if r[0] == "work"]
        runs = Counter(seq for _, seq, _, _ in work_rows)
        ticks = sorted(ran for kind, _, _, ran in rows if kind == "tick")
        lost = sorted(set(committed) - set(runs))
        twice = sorted(seq for seq, n in runs.items() if n > 1)
        waits_before = [
            ran - at for _, seq, at, ran in work_rows if loaded_at + 2 < ran < moved_at and seq % 10
        ]
        waits_after = [
            ran - at for _, seq, at, ran in work_rows if ran > moved_at + 10 and seq % 10
        ]
        logs = "".join((work / f"supervisor{i}.log").read_text(errors="replace") for i in (1, 2))
        turns = [float(m.group(1)) for m in _TURN.finditer(logs)]
        result.update(
            {
                "committed": len(committed),
                "in_doubt": len(producer.in_doubt),
                "producer_errors": producer.errors,
                "lost": len(lost),
                "lost_in_doubt": len(set(lost) & producer.in_doubt),
                "run_twice": len(twice),
                "seconds_without_completions": round(
                    longest_gap([r[3] for r in work_rows], moved_at - 1, stopped_at), 2
                ),
                "pickup_p50_ms_before": p50_ms(waits_before),
                "pickup_p50_ms_after": p50_ms(waits_after),
                "ticks": len(ticks),
                "ticks_expected": round((stopped_at - (ticks[0] if ticks else stopped_at)) / 2),
                "ticks_closer_than_1s": sum(1 for a, b in itertools.pairwise(ticks) if b - a < 1.0),
                "rescues_logged": logs.count("jobs with expired leases returned"),
                "longest_master_turn_s": max(turns, default=0.0),
                "supervisors_alive": sum(1 for s in supervisors if s.poll() is None),
            }
        )
        result["verdict"] = "ok" if not lost and result["supervisors_alive"] == 2 else "failed"
        return result
    finally:
        for proc in supervisors:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in supervisors:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        cluster.stop()
        result["work_dir"] = str(work)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--cells", default=",".join(CELLS), help="comma-separated: " + ", ".join(CELLS)
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--sync", dest="synchronous", action="store_true", default=True)
    mode.add_argument("--async", dest="synchronous", action="store_false")
    parser.add_argument("--seconds", type=float, default=30.0, help="load around each move")
    parser.add_argument("--rate", type=int, default=1000, help="jobs enqueued a second")
    args = parser.parse_args(argv)
    why = available()
    if why:
        print(why, file=sys.stderr)
        return 2
    cells = [c for c in args.cells.split(",") if c]
    bad = [c for c in cells if c not in CELLS]
    if bad:
        print(f"unknown cell(s): {', '.join(bad)}; choose from {', '.join(CELLS)}", file=sys.stderr)
        return 2
    failed = False
    for cell in cells:
        result = run_cell(cell, synchronous=args.synchronous, seconds=args.seconds, rate=args.rate)
        print(json.dumps(result), flush=True)
        failed = failed or result.get("verdict") != "ok"
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
