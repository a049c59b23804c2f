"""The failover drill's cluster: etcd and two Patroni nodes (PostgreSQL 15) in a scratch folder
owned by the postgres user, and the ways its primary is made to move.

With ``cut=True`` node1 (the first leader) runs in a network namespace of its own, joined to
this one by two veth pairs with test addresses only: the *cluster link* (a /30 in 10.231.0.0/16)
carries etcd, replication and Patroni's REST calls; the *client link* (a /30 in 10.232.0.0/16)
carries the supervisors' and the producer's sessions. Setting the
cluster link down cuts node1 off from etcd and the replica while clients still reach it: the
partition a cluster manager exists for. The packets are dropped, not refused (no RST), as on a
real network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import yaml

NODES = ("node1", "node2")
# Patroni's leader key TTL: a crashed leader's replica is promoted only once it expires.
LEADER_TTL = 10
LOOPBACK = "127.0.0.1"
# The links' /30s are chosen per cluster (from its tag), as its ports are: a drill killed half way
# leaves interfaces and processes behind, and the next one must not trip over them.
CLUSTER_NET, CLIENT_NET = "10.231", "10.232"
# How much of each log a failed start quotes, so that CI says why.
_LOG_TAIL = 30
# What Patroni says when it will not (yet) switch over: logged by the leader after the request.
_REFUSAL = re.compile(
    r"(manual failover: .*|Member \S+ is .*|.*not possible.*|.*exceeds maximum.*|"
    r".*does not match with sync_standbys.*|.*not healthy.*)"
)


def pg_bin_dir() -> Path:
    for major in ("17", "16", "15"):
        path = Path(f"/usr/lib/postgresql/{major}/bin")
        if (path / "postgres").exists():
            return path
    raise SystemExit("no PostgreSQL server binaries under /usr/lib/postgresql")


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on now, on loopback and on every address (etcd and Patroni bind
    both). Held open together so that the kernel hands out distinct ones."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def link_pair(net: str, tag: int) -> tuple[str, str]:
    """The two host addresses of the tag's /30 in ``net``/16: (here, there)."""
    base = (tag % 16383 + 1) * 4  # block 0 is the partition drill's (10.231.0.0/30)
    return f"{net}.{base // 256}.{base % 256 + 1}", f"{net}.{base // 256}.{base % 256 + 2}"


def tail(path: Path, lines: int = _LOG_TAIL) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty)"


def wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise TimeoutError(f"waited {timeout:.0f}s for {what}")


class Cluster:
    def __init__(self, work: Path, *, synchronous: bool, cut: bool = False) -> None:
        self.work = work
        self.synchronous = synchronous
        self.cut_mode = cut
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        tag = os.getpid() % 10000
        etcd_client, etcd_peer, *node_ports = free_ports(2 + 2 * len(NODES))
        self.etcd_client, self.etcd_peer = etcd_client, etcd_peer
        # name -> (PostgreSQL port, REST port)
        self.ports = {n: (node_ports[2 * i], node_ports[2 * i + 1]) for i, n in enumerate(NODES)}
        self.cluster_here, self.cluster_there = link_pair(CLUSTER_NET, tag)
        self.client_here, self.client_there = link_pair(CLIENT_NET, tag)
        self.ns = f"pgqfo{tag}"
        self.links = {
            "cluster": (f"pgqfc{tag}", f"pgqfC{tag}"),
            "client": (f"pgqfk{tag}", f"pgqfK{tag}"),
        }
        shutil.chown(work, "postgres", "postgres")

    # -- addresses -------------------------------------------------------------------------
    def pg_port(self, name: str) -> int:
        return self.ports[name][0]

    def rest_port(self, name: str) -> int:
        return self.ports[name][1]

    def client_address(self, name: str) -> str:
        """host:port of the node's PostgreSQL, as clients reach it."""
        return f"{self.client_host(name)}:{self.pg_port(name)}"

    def client_host(self, name: str) -> str:
        """Where clients (and this drill's probes) reach the node's PostgreSQL and REST API."""
        return self.client_there if self.cut_mode and name == "node1" else LOOPBACK

    def peer_host(self, name: str) -> str:
        """Where the other node and etcd's members reach it (Patroni's connect_address)."""
        if not self.cut_mode:
            return LOOPBACK
        return self.cluster_there if name == "node1" else self.cluster_here

    def etcd_host(self) -> str:
        return self.cluster_here if self.cut_mode else LOOPBACK

    def client_hosts(self) -> str:
        return ",".join(self.client_address(n) for n in NODES)

    # -- the namespace ---------------------------------------------------------------------
    def _make_namespace(self) -> None:
        sh("ip", "netns", "add", self.ns)
        sh("ip", "netns", "exec", self.ns, "ip", "link", "set", "lo", "up")
        for (here_if, there_if), here, there in (
            (self.links["cluster"], self.cluster_here, self.cluster_there),
            (self.links["client"], self.client_here, self.client_there),
        ):
            sh("ip", "link", "add", here_if, "type", "veth", "peer", "name", there_if)
            sh("ip", "link", "set", there_if, "netns", self.ns)
            sh("ip", "addr", "add", f"{here}/30", "dev", here_if)
            sh("ip", "link", "set", here_if, "up")
            sh("ip", "netns", "exec", self.ns, "ip", "addr", "add", f"{there}/30", "dev", there_if)
            sh("ip", "netns", "exec", self.ns, "ip", "link", "set", there_if, "up")

    def cut(self) -> None:
        """node1 off etcd and the replica; its clients still reach it."""
        sh("ip", "link", "set", self.links["cluster"][0], "down")

    def heal(self) -> None:
        sh("ip", "link", "set", self.links["cluster"][0], "up")

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        try:
            self._start()
        except TimeoutError as exc:
            logs = "\n".join(
                f"--- {name}.log (last {_LOG_TAIL} lines) ---\n{tail(self.work / f'{name}.log')}"
                for name in ("etcd", *NODES)
            )
            raise TimeoutError(
                f"{exc} (ports {self.ports}, etcd {self.etcd_client})\n{logs}"
            ) from exc

    def _start(self) -> None:
        if self.cut_mode:
            self._make_namespace()
        etcd, port = self.etcd_host(), self.etcd_client
        listen = {f"http://{LOOPBACK}:{port}", f"http://{etcd}:{port}"}
        self.procs["etcd"] = self._spawn(
            "etcd",
            [
                "etcd",
                "--name=e1",
                f"--data-dir={self.work / 'etcd'}",
                f"--listen-client-urls={','.join(sorted(listen))}",
                # Patroni's etcd client reconnects to the advertised URLs: one node1 reaches too.
                f"--advertise-client-urls=http://{etcd}:{port}",
                f"--listen-peer-urls=http://{LOOPBACK}:{self.etcd_peer}",
                f"--initial-advertise-peer-urls=http://{LOOPBACK}:{self.etcd_peer}",
                f"--initial-cluster=e1=http://{LOOPBACK}:{self.etcd_peer}",
            ],
        )
        for name in NODES:
            self.start_node(name)
            if name == "node1":
                wait("node1 leads", lambda: self.leader() == "node1", 90)
        wait("a streaming replica", self.has_streaming_replica, 120)
        if self.synchronous:
            wait("a synchronous standby", self.has_sync_standby, 60)

    def node_config(self, name: str) -> Path:
        port, rest = self.ports[name]
        peer = self.peer_host(name)
        if self.cut_mode:
            hosts = [LOOPBACK, peer] + ([self.client_there] if name == "node1" else [])
            rest_listen = f"0.0.0.0:{rest}" if name == "node1" else f"{peer}:{rest}"
        else:
            hosts, rest_listen = [LOOPBACK], f"{LOOPBACK}:{rest}"
        config = {
            "scope": "pgqdrill",
            "namespace": "/pgqdrill/",
            "name": name,
            "restapi": {"listen": rest_listen, "connect_address": f"{peer}:{rest}"},
            "etcd3": {"hosts": f"{self.etcd_host()}:{self.etcd_client}"},
            "bootstrap": {
                "dcs": {
                    "ttl": LEADER_TTL,
                    "loop_wait": 1,
                    "retry_timeout": 4,
                    "maximum_lag_on_failover": 16 * 1024 * 1024,
                    "synchronous_mode": self.synchronous,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "hot_standby_feedback": "on",
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
                "listen": f"{','.join(hosts)}:{port}",
                "connect_address": f"{peer}:{port}",
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
                    f"host all all {CLUSTER_NET}.0.0/16 trust",
                    f"host replication all {CLUSTER_NET}.0.0/16 trust",
                    f"host all all {CLIENT_NET}.0.0/16 trust",
                ],
            },
        }
        path = self.work / f"{name}.yml"
        path.write_text(yaml.safe_dump(config))
        shutil.chown(path, "postgres", "postgres")
        return path

    def start_node(self, name: str) -> None:
        argv = ["patroni", str(self.node_config(name))]
        if self.cut_mode and name == "node1":
            # Entering a namespace needs root; Patroni then runs as postgres inside it.
            self.procs[name] = self._spawn(
                name,
                ["ip", "netns", "exec", self.ns, "runuser", "-u", "postgres", "--", *argv],
                user=None,
            )
        else:
            self.procs[name] = self._spawn(name, argv)

    def _spawn(
        self, name: str, argv: list[str], user: str | None = "postgres"
    ) -> subprocess.Popen[bytes]:
        log = (self.work / f"{name}.log").open("ab")
        return subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, user=user, start_new_session=True
        )

    # -- looks -----------------------------------------------------------------------------
    def rest(self, name: str, path: str) -> tuple[int, dict[str, Any]]:
        port = self.rest_port(name)
        host = self.client_host(name) if name == "node1" else self.peer_host(name)
        try:
            with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=3) as r:
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

    def sql(self, name: str, query: str) -> Any:
        """One value from the node, or None when it does not answer."""
        port = self.pg_port(name)
        try:
            with psycopg.connect(
                host=self.client_host(name),
                port=port,
                dbname="postgres",
                user="postgres",
                connect_timeout=2,
                autocommit=True,
            ) as conn:
                row = conn.execute(query).fetchone()  # type: ignore[arg-type]
                return row[0] if row else None
        except psycopg.Error:
            return None

    def has_streaming_replica(self) -> bool:
        """A replica streaming from the leader, as the leader sees it. (Patroni's /cluster
        lists a replica still copying its base backup as running: not enough.)"""
        leader = self.leader()
        if leader is None:
            return False
        streaming = self.sql(
            leader, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
        )
        return bool(streaming)

    def has_sync_standby(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        _, body = self.rest(leader, "/cluster")
        return any(m.get("role") == "sync_standby" for m in body.get("members", []))

    def postmaster_pid(self, name: str) -> int:
        return int((self.work / name / "postmaster.pid").read_text().split()[0])

    # -- moves -----------------------------------------------------------------------------
    def switchover(self) -> str:
        """Asks Patroni for a switchover; returns what patronictl said."""
        leader = self.leader()
        candidate = next(n for n in NODES if n != leader)
        done = subprocess.run(
            [
                "patronictl",
                "-c",
                str(self.work / f"{leader}.yml"),
                "switchover",
                "--candidate",
                candidate,
                "--force",
            ],
            check=False,
            capture_output=True,
            text=True,
            user="postgres",
        )
        return (done.stdout + done.stderr).strip()

    def refusal(self, name: str, since: float) -> str | None:
        """Why Patroni on ``name`` did not switch over: its last refusal logged since then."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(since))
        found = None
        for line in (self.work / f"{name}.log").read_text(errors="replace").splitlines():
            if line[:19] >= stamp and (m := _REFUSAL.search(line[24:])):
                found = m.group(1).strip()
        return found

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
        if self.cut_mode:
            for here_if, _ in self.links.values():
                subprocess.run(["ip", "link", "del", here_if], capture_output=True, check=False)
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, check=False)
