"""Network partition drill: one host's link to the database is cut while it holds leases.

    sudo python scripts/drills/partition_drill.py [--dsn DSN] [--cut 14] [--jobs 4]

Host A runs in a network namespace of its own, joined to this one by a veth pair
(10.231.0.1 here, 10.231.0.2 there; nothing but these test addresses), and reaches the
database through a small TCP forwarder on 10.231.0.1 (the server listens on the loopback
only). Host B runs here. A claims long jobs; then A's link is cut (the veth is set down) for
--cut seconds: A's leases run out, B's rescuer puts the jobs back and B runs them; the link
comes back and A's late completions must be fenced. Checks: each job completed exactly once in
the database (pgq.job_history), none left; A's /livez answered throughout (probed from inside
its namespace) and its /readyz said the database was unreachable once the cut was noticed;
A's processes did not spin while cut off (CPU seconds); after the link came back A claimed and
completed new work within the TCP timeouts (its children did not hang).
The last line on stdout is one JSON object; exit 0 only if every check held.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below need the path set up first)
import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "drills")]

from supervisor import NewJob, enqueue_many
from supervisor.queue.migrations import migrate

HERE, THERE = "10.231.0.1", "10.231.0.2"
CONFIG = """
database: {{auto_migrate: false}}
handlers: {{hold: partition_drill_jobs:hold}}
pools: {{main: {{processes: 2, queues: {queues}, batch: 1, poll_interval: 200ms}}}}
lease: {{duration: 3s, renew_every: 1s}}
rescue: {{interval: 1s}}
history: {{enabled: true}}
shutdown_timeout: 10s
metrics: {{port: 9391, host: 0.0.0.0}}
"""


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


class Forwarder:
    """10.231.0.1:PORT -> the database's own address, one pair of pumping threads per link."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server((HERE, 0))
        self.port = self.server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            host, port = self.target
            if host.startswith("/"):  # a server on a Unix socket (the embedded one)
                upstream = socket.socket(socket.AF_UNIX)
                upstream.connect(f"{host}/.s.PGSQL.{port}")
            else:
                upstream = socket.create_connection(self.target)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.server.close()


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'scripts' / 'drills'}", **env},
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def cpu_seconds(pid: int) -> float:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def completions(conn: psycopg.Connection[Any], ids: list[int]) -> dict[int, int]:
    rows = conn.execute(
        "SELECT id, count(*) FROM pgq.job_history WHERE id = ANY(%s) AND outcome = 'completed'"
        " GROUP BY id",
        (ids,),
    ).fetchall()
    return {i: 0 for i in ids} | dict(rows)


def wait(what: str, check: Any, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise TimeoutError(what)
        time.sleep(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("PGQ_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    )
    parser.add_argument("--cut", type=float, default=14.0)
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args()
    tag = os.getpid() % 10000
    ns, here_if, there_if = f"pgqpart{tag}", f"pgqh{tag}", f"pgqn{tag}"
    work = Path(tempfile.mkdtemp(prefix="pgq-partition-"))
    name = f"pgq_partition_drill_{os.getpid()}"
    procs: list[subprocess.Popen[bytes]] = []
    figures: dict[str, Any] = {"cut_s": args.cut}
    forwarder = None
    try:
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", here_if, "type", "veth", "peer", "name", there_if)
        sh("ip", "link", "set", there_if, "netns", ns)
        sh("ip", "addr", "add", f"{HERE}/30", "dev", here_if)
        sh("ip", "link", "set", here_if, "up")
        sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{THERE}/30", "dev", there_if)
        sh("ip", "netns", "exec", ns, "ip", "link", "set", there_if, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        dsn = make_conninfo(args.dsn, dbname=name)
        migrate(dsn)
        params = conninfo_to_dict(dsn)
        forwarder = Forwarder((str(params.get("host", "127.0.0.1")), int(params.get("port", 5432))))
        dsn_a = make_conninfo(dsn, host=HERE, port=str(forwarder.port))
        config_a, config_b = work / "a.yaml", work / "b.yaml"
        config_a.write_text(CONFIG.format(queues="{long: 1, a_only: 1}"))
        config_b.write_text(CONFIG.format(queues="{long: 1}").replace("9391", "9392"))
        cli = [sys.executable, "-m", "supervisor.cli"]
        host_a = start(
            ["ip", "netns", "exec", ns, *cli, "-c", str(config_a), "run"],
            {"PGQ_DSN": dsn_a, "PGQ_HOST": "host-a"},
            work / "a.log",
        )
        procs.append(host_a)
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = enqueue_many(
                conn, [NewJob("hold", {"seconds": 5.0}, queue="long") for _ in range(args.jobs)]
            )
            wait(
                "host A holding jobs",
                lambda: (
                    conn.execute(
                        "SELECT count(*) FROM pgq.jobs WHERE state = 'running'"
                        " AND locked_by LIKE 'host-a%'"
                    ).fetchone()[0]
                    >= 2
                ),
                60,
            )
            host_b = start(
                [*cli, "-c", str(config_b), "run"],
                {"PGQ_DSN": dsn, "PGQ_HOST": "host-b"},
                work / "b.log",
            )
            procs.append(host_b)
            prober, ready_prober = (
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        ns,
                        sys.executable,
                        str(ROOT / "scripts" / "drills" / "partition_drill_jobs.py"),
                        "probe",
                        f"http://127.0.0.1:9391/{path}",
                        str(args.cut + 25),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for path in ("livez", "readyz")
            )
            procs += [prober, ready_prober]  # type: ignore[list-item]
            time.sleep(1)
            held = [
                i
                for (i,) in conn.execute(
                    "SELECT id FROM pgq.jobs WHERE state = 'running' AND locked_by LIKE 'host-a%'"
                )
            ]
            figures["held_by_a_at_cut"] = len(held)
            cpu_before = cpu_seconds(host_a.pid)
            sh("ip", "link", "set", here_if, "down")
            cut_at = time.monotonic()
            time.sleep(args.cut)
            figures["a_cpu_s_while_cut"] = round(cpu_seconds(host_a.pid) - cpu_before, 2)
            sh("ip", "link", "set", here_if, "up")
            back_at = time.monotonic()
            figures["rescued_before_link_back"] = sum(completions(conn, held).values())
            wait("every job done", lambda: all(completions(conn, ids).values()), 90)
            # A's children must work again after the link is back: jobs only A serves.
            after = enqueue_many(
                conn, [NewJob("hold", {"seconds": 0.1}, queue="a_only") for _ in range(4)]
            )
            wait("host A working again", lambda: all(completions(conn, after).values()), 90)
            figures["a_back_at_work_s"] = round(time.monotonic() - back_at, 1)
            done = completions(conn, ids + after)
            figures["completed_exactly_once"] = sum(1 for n in done.values() if n == 1)
            figures["completed_twice"] = sum(1 for n in done.values() if n > 1)
            (figures["left"],) = conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()
            figures["jobs"] = len(ids) + len(after)
        prober.wait(args.cut + 60)
        ready_prober.wait(args.cut + 60)
        looks = [
            line.split() for line in (prober.stdout.read() if prober.stdout else "").splitlines()
        ]
        ready_looks = [
            line.split()
            for line in (ready_prober.stdout.read() if ready_prober.stdout else "").splitlines()
        ]
        # Once the cut is noticed (a lease renewal a second, the master's wait 1.5 s): every
        # /readyz answers 503 and names the database.
        settled = [look for look in ready_looks if cut_at + 5 <= float(look[0]) <= back_at]
        figures["readyz_looks_while_cut"] = len(settled)
        figures["readyz_said_unreachable"] = sum(
            1 for look in settled if look[2] == "503:database-unreachable"
        )
        during = [look for look in looks if cut_at <= float(look[0]) <= back_at]
        figures["livez_looks"] = len(looks)
        figures["livez_looks_while_cut"] = len(during)
        failed = [look for look in looks if look[2] != "200"]
        figures["livez_failures"] = failed[:5]
        figures["livez_failed_looks"] = len(failed)
        figures["livez_slowest_s"] = max((float(look[1]) for look in looks), default=None)
        log_a = (work / "a.log").read_text(errors="replace")
        figures["a_logged_lease_lost"] = "lease" in log_a.lower() and "lost" in log_a.lower()
        for proc in (host_a, host_b):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in (host_a, host_b):
            proc.wait(60)
    finally:
        for proc in procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
                proc.wait()
        if forwarder:
            forwarder.close()
        subprocess.run(["ip", "link", "del", here_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    checks = {
        "a_held_leases_at_cut": figures.get("held_by_a_at_cut", 0) >= 1,
        "rescued_while_cut": figures.get("rescued_before_link_back", 0) >= 1,
        "each_completed_exactly_once": figures.get("completed_exactly_once") == figures.get("jobs")
        and figures.get("completed_twice") == 0,
        "none_left": figures.get("left") == 0,
        "livez_answered_throughout": figures.get("livez_looks_while_cut", 0) > 0
        and not figures.get("livez_failures"),
        "readyz_said_unreachable_while_cut": figures.get("readyz_looks_while_cut", 0) > 0
        and figures.get("readyz_said_unreachable") == figures.get("readyz_looks_while_cut"),
        "no_spin_while_cut": figures.get("a_cpu_s_while_cut", 99) < 0.25 * args.cut,
        "a_back_at_work": figures.get("a_back_at_work_s") is not None,
    }
    figures["checks"] = checks
    figures["ok"] = all(checks.values())
    print(json.dumps(figures, sort_keys=True, default=str))
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
