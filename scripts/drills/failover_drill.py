"""Failover on a real cluster manager: Patroni with etcd, two PostgreSQL nodes on this machine,
two supervisors and a producer through a multi-host DSN (``target_session_attrs=read-write``).

Each cell starts a fresh cluster, runs the load (jobs at ``--rate`` a second, one in ten for a
second later, a schedule every 2 s), makes the primary move, keeps the load going, then lets the
queue drain and reads the verdict:

- ``switchover``: a planned switchover (``patronictl switchover``);
- ``postmaster-kill``: the primary's postmaster SIGKILLed (Patroni restarts it, or fails over);
- ``leader-crash``: the primary's Patroni and postmaster SIGKILLed together (the host is gone:
  the replica is promoted once the leader key expires);
- ``network-cut``: the leader (its Patroni and PostgreSQL, in a network namespace) cut off
  from etcd and the replica while its clients still reach it (failover_cluster.py): Patroni
  demotes it when it cannot renew the leader key, the replica is promoted when the key
  expires; a witness (failover_probe.py) writes to the old leader throughout and records
  which node called itself primary when.

``--sync`` (default) runs Patroni's synchronous mode, ``--async`` plain streaming replication.

Figures per cell, one JSON line each: whether the primary moved (a switchover Patroni refuses is
reported with its reason), committed jobs lost (acknowledged to the producer, never run), jobs
run twice, seconds without a completion around the move, pickup p50 before and after (jobs
enqueued in the steady state before the move, and from 2 s after completions resumed), the
idle pickup after the move (single jobs into an empty queue: NOTIFY on the new primary, not the
5 s poll, must wake the children),
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
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(Path(__file__).parent)]

from failover_cluster import LEADER_TTL, NODES, Cluster, wait  # noqa: E402
from failover_probe import PROBE_TABLE, Prober, doctor_looks  # noqa: E402

from supervisor import NewJob, enqueue_many  # noqa: E402
from supervisor.queue.migrations import migrate  # noqa: E402

CELLS = ("switchover", "postmaster-kill", "leader-crash", "network-cut")
# Where the primary must end up: elsewhere, or (postmaster-kill) wherever Patroni chose.
MUST_MOVE = {"switchover", "leader-crash", "network-cut"}
DATABASE = "drill"
# An idle child's fallback poll, long enough that a wake-up by NOTIFY and one by polling are
# told apart in the idle pickup after the move.
POLL_INTERVAL = 5.0
_ERROR = re.compile(r"^\S+ \S+ ERROR\s+|\[\d+\]|\d+(\.\d+)?")
_TURN = re.compile(r"a turn took (\d+\.\d+)s")


def available() -> str | None:
    """Why the drill cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (PostgreSQL runs as the postgres user)"
    for tool in ("patroni", "patronictl", "etcd", "ip", "runuser"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install patroni etcd-server iproute2)"
    return None


def multi_host_dsn(cluster: Cluster, database: str = DATABASE) -> str:
    return (
        f"postgresql://postgres@{cluster.client_hosts()}/{database}"
        "?target_session_attrs=read-write&connect_timeout=2"
    )


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


def supervisor_config(work: Path, index: int, dsn: str) -> Path:
    config = {
        "database": {"dsn": dsn, "connect_timeout": "2s"},
        "handlers": {
            "work": "failover_drill_jobs:work",
            "tick": "failover_drill_jobs:tick",
        },
        "pools": {
            "main": {
                "processes": 2,
                "batch": 10,
                "queues": {"default": 1},
                "poll_interval": f"{POLL_INTERVAL:.0f}s",
            }
        },
        "schedules": {"tick": {"every": "2s", "kind": "tick"}},
        "shutdown_timeout": "10s",
    }
    path = work / f"supervisor{index}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_supervisor(work: Path, index: int, ledger: Path, dsn: str) -> subprocess.Popen[bytes]:
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
            str(supervisor_config(work, index, dsn)),
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


def longest_gap(times: list[float], start: float, end: float) -> tuple[float, float]:
    """The longest stretch without a completion between start and end, and when it ended."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return max((b - a, b) for a, b in itertools.pairwise(edges))


def p50_ms(values: list[float]) -> float | None:
    return round(statistics.median(values) * 1000, 1) if values else None


def move(cell: str, cluster: Cluster, before: str) -> dict[str, Any]:
    """Makes the primary move the cell's way and waits for a primary: elsewhere when the cell
    must move it (a switchover Patroni refuses is reported, with its reason, not waited out)."""
    moved_at = time.time()
    other = next(n for n in NODES if n != before)
    said = ""
    figures: dict[str, Any] = {}
    killed = cluster.postmaster_pid(before)
    if cell == "switchover":
        said = cluster.switchover()
    elif cell == "postmaster-kill":
        cluster.kill_postmaster()
    elif cell == "leader-crash":
        cluster.crash_leader()
    else:
        cluster.cut()
    # What a look found is kept: asking again after the wait could meet a REST call that
    # fails under load and read no primary at all.
    found: dict[str, str | None] = {}

    def primary_is(node: str | None) -> bool:
        if node is None:
            # Patroni still calls the node primary until it notices its postmaster died: the
            # primary is back once a new postmaster (here or elsewhere) takes writes.
            leader = cluster.leader()
            if leader == before and _postmaster_pid(cluster, before) in (None, killed):
                leader = None
            if (
                leader is not None
                and cluster.sql(leader, "SELECT NOT pg_is_in_recovery()") is not True
            ):
                leader = None
        else:
            leader = node if cluster.role(node) in ("primary", "master") else None
        if leader is not None:
            found["leader"] = leader
        return leader is not None

    if cell in MUST_MOVE:
        # The old leader may still call itself primary for a while (cut off, it has not yet
        # noticed): what counts is the other node taking over.
        with contextlib.suppress(TimeoutError):
            wait("the primary moved", lambda: primary_is(other), 60)
    else:
        with contextlib.suppress(TimeoutError):
            wait("a primary again", lambda: primary_is(None), 90)
    after = found.get("leader") or cluster.leader()
    figures["primary_before"], figures["primary_after"] = before, after
    figures["moved"] = after is not None and after != before
    figures["seconds_to_primary"] = round(time.time() - moved_at, 1)
    if cell == "switchover" and not figures["moved"]:
        figures["refusal"] = cluster.refusal(before, moved_at) or said[-300:]
    figures["_moved_at"] = moved_at
    return figures


def _postmaster_pid(cluster: Cluster, node: str) -> int | None:
    try:
        return cluster.postmaster_pid(node)
    except (OSError, ValueError, IndexError):
        return None


def idle_pickups(dsn: str, ledger: Path, count: int = 8) -> list[float]:
    """Jobs enqueued one at a time into an empty queue, children idle: a wake-up by NOTIFY
    (the listener re-established on the new primary) picks each up in milliseconds; polling
    would take up to POLL_INTERVAL."""
    waits = []
    time.sleep(1.0)
    for i in range(count):
        seq = 10_000_000 + i
        at = time.time()
        with psycopg.connect(dsn, autocommit=True) as conn:
            enqueue_many(conn, [NewJob("work", {"seq": seq, "at": at})])
        with contextlib.suppress(TimeoutError):
            wait(
                "an idle pickup",
                lambda seq=seq: any(r[1] == seq for r in read_ledger(ledger)),
                POLL_INTERVAL * 2,
            )
        ran = [r[3] for r in read_ledger(ledger) if r[1] == seq]
        waits.append(ran[0] - at if ran else POLL_INTERVAL * 2)
        time.sleep(0.5)
    return waits


def run_cell(cell: str, *, synchronous: bool, seconds: float, rate: int) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"pgq-failover-{cell}-"))
    cluster = Cluster(work, synchronous=synchronous, cut=cell == "network-cut")
    supervisors: list[subprocess.Popen[bytes]] = []
    ledger = work / "ledger"
    result: dict[str, Any] = {"cell": cell, "replication": "sync" if synchronous else "async"}
    prober: Prober | None = None
    try:
        cluster.start()
        dsn = multi_host_dsn(cluster)
        with psycopg.connect(multi_host_dsn(cluster, "postgres"), autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {DATABASE}")
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(PROBE_TABLE)
        supervisors = [start_supervisor(work, i, ledger, dsn) for i in (1, 2)]
        # The load starts once the supervisors serve (their first tick has run).
        wait(
            "the supervisors serving", lambda: any(r[0] == "tick" for r in read_ledger(ledger)), 60
        )
        producer = Producer(dsn, rate)
        producer.start()
        loaded_at = time.time()
        time.sleep(seconds / 2)
        before = cluster.leader()
        assert before is not None
        if cell == "network-cut":
            prober = Prober({n: cluster.client_address(n) for n in NODES}, DATABASE)
            prober.start(before)
            time.sleep(1.0)
        figures = move(cell, cluster, before)
        moved_at = figures.pop("_moved_at")
        result.update(figures)
        if cell == "leader-crash":
            cluster.start_node(before)  # back as a replica (pg_rewind), as an operator would
        # Long enough after the move that jobs are enqueued past the resumption (the pickup
        # after it): a crashed leader is replaced only when its key's TTL runs out, and a
        # loaded CI machine took all of seconds / 2 to get there.
        time.sleep(max(seconds / 2, LEADER_TTL + 5))
        if cell == "network-cut":
            cluster.heal()  # node1 rejoins, rewound, as a replica
            result["cut_s"] = round(time.time() - moved_at, 1)
        producer.stop.set()
        producer.join(10)
        stopped_at = time.time()
        committed = producer.committed

        def drained() -> bool:
            done = {seq for kind, seq, _, _ in read_ledger(ledger) if kind == "work"}
            return set(committed) <= done

        with contextlib.suppress(TimeoutError):
            wait("every committed job run", drained, 60)
        idle = idle_pickups(dsn, ledger)
        hosts = {n: cluster.client_address(n) for n in NODES}
        with contextlib.suppress(TimeoutError):  # the old leader back, streaming (rewound)
            wait("a streaming replica again", cluster.has_streaming_replica, 30)
        result["doctor"] = doctor_looks(hosts, DATABASE, result["primary_after"] or before)
        ended_at = time.time()
        rows = read_ledger(ledger)
        work_rows = [r for r in rows if r[0] == "work" and r[1] < 10_000_000]
        runs = Counter(seq for _, seq, _, _ in work_rows)
        ticks = sorted(ran for kind, _, _, ran in rows if kind == "tick" and ran <= ended_at)
        lost = sorted(set(committed) - set(runs))
        twice = sorted(seq for seq, n in runs.items() if n > 1)
        completions = sorted(r[3] for r in work_rows)
        gap, resumed_at = longest_gap(completions, moved_at - 1, stopped_at)
        # Pickup: jobs enqueued (not the delayed one in ten) in the steady state before the
        # move, and from 2 s after completions resumed on the new primary.
        waits_before = [
            ran - at for _, seq, at, ran in work_rows if loaded_at + 2 < at < moved_at and seq % 10
        ]
        waits_after = [
            ran - at for _, seq, at, ran in work_rows if at > resumed_at + 2 and seq % 10
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
                "seconds_without_completions": round(gap, 2),
                "seconds_to_resume": round(resumed_at - moved_at, 2),
                "pickup_p50_ms_before": p50_ms(waits_before),
                "pickup_p50_ms_after": p50_ms(waits_after),
                "idle_pickup_p50_ms_after": p50_ms(idle),
                "idle_pickup_max_ms_after": round(max(idle) * 1000, 1),
                "ticks": len(ticks),
                # a tick every 2 s from the first to the end of the cell
                "ticks_expected": int((ended_at - ticks[0]) // 2) + 1 if ticks else 0,
                "ticks_closer_than_1s": sum(1 for a, b in itertools.pairwise(ticks) if b - a < 1.0),
                "rescues_logged": logs.count("jobs with expired leases returned"),
                "read_only_errors_logged": logs.count("read-only transaction"),
                # what the supervisors logged as errors across the move (a failover is
                # expected: its outages are warnings)
                "errors_logged": sorted(
                    {_ERROR.sub("", line)[:160] for line in logs.splitlines() if " ERROR " in line}
                ),
                "longest_master_turn_s": max(turns, default=0.0),
                "supervisors_alive": sum(1 for s in supervisors if s.poll() is None),
            }
        )
        if prober is not None:
            prober.stop.set()
            with psycopg.connect(dsn, autocommit=True) as conn:
                kept = {i for (i,) in conn.execute("SELECT id FROM drill_probe")}
            after = result["primary_after"] or before
            result.update(prober.verdict(before, after, moved_at, kept))
        moved_ok = result["moved"] or cell not in MUST_MOVE
        healthy = not lost and result["supervisors_alive"] == 2
        result["verdict"] = "ok" if healthy and moved_ok else "failed"
        return result
    finally:
        if prober is not None:
            prober.stop.set()
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
