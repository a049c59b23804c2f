"""The network-cut cell's witness: which node says it is a primary, and which writes the old
leader acknowledged, a look every quarter second through the clients' addresses.

A write acknowledged by the old leader after the new one was promoted is a split-brain write
(the old leader still took writes that the new primary will never have). With synchronous
replication the old leader's commits wait for the standby it lost, so none should be
acknowledged at all once the link is cut; with asynchronous replication it acknowledges writes
until Patroni demotes it, and those are lost when it is rewound.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from typing import Any

import psycopg

from supervisor.doctor import replication
from supervisor.doctor.sql import doctor_query

PROBE_TABLE = "CREATE TABLE IF NOT EXISTS drill_probe (id bigint PRIMARY KEY, at float8)"


class Prober:
    def __init__(self, hosts: dict[str, str], database: str) -> None:
        self.hosts = hosts  # node -> "host:port" as clients reach it
        self.database = database
        self.stop = threading.Event()
        self.primary_since: dict[str, float] = {}  # first look that said "not in recovery"
        self.last_primary: dict[str, float] = {}
        self.standby_since: dict[str, float] = {}
        self.acked: list[tuple[int, float]] = []  # (id, acknowledged at) on the old leader
        self.refused: list[tuple[float, str]] = []  # the old leader's refusals, after the cut
        self._threads: list[threading.Thread] = []

    def _conninfo(self, node: str) -> str:
        host, port = self.hosts[node].split(":")
        return f"host={host} port={port} dbname={self.database} user=postgres connect_timeout=1"

    def start(self, old_leader: str) -> None:
        for node in self.hosts:
            self._threads.append(threading.Thread(target=self._roles, args=(node,), daemon=True))
        self._threads.append(threading.Thread(target=self._writes, args=(old_leader,), daemon=True))
        for t in self._threads:
            t.start()

    def _roles(self, node: str) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(self._conninfo(node), autocommit=True) as conn:
                    while not self.stop.is_set():
                        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                        now = time.time()
                        if row and not row[0]:
                            self.primary_since.setdefault(node, now)
                            self.last_primary[node] = now
                        elif node in self.primary_since:
                            self.standby_since.setdefault(node, now)
                        time.sleep(0.25)
            except psycopg.Error:
                time.sleep(0.25)

    def _writes(self, node: str) -> None:
        """One write at a time on the old leader, with no timeout of its own: cancelling a
        commit that waits for a synchronous standby would acknowledge it (PostgreSQL returns
        success with a warning), the very thing this looks for."""
        seq = 0
        while not self.stop.is_set():
            try:
                with psycopg.connect(self._conninfo(node), autocommit=True) as conn:
                    while not self.stop.is_set():
                        seq += 1
                        conn.execute(
                            "INSERT INTO drill_probe VALUES (%s, %s)",
                            (seq, time.time()),
                        )
                        self.acked.append((seq, time.time()))
                        time.sleep(0.25)
            except psycopg.Error as exc:
                self.refused.append((time.time(), type(exc).__name__))
                time.sleep(0.25)

    def verdict(self, old: str, new: str, cut_at: float, rows_kept: set[int]) -> dict[str, Any]:
        promoted = self.primary_since.get(new)
        acked_after_cut = [(i, t) for i, t in self.acked if t > cut_at]
        return {
            "old_leader_last_primary_s": _since(self.last_primary.get(old), cut_at),
            "old_leader_standby_s": _since(self.standby_since.get(old), cut_at),
            "new_primary_s": _since(promoted, cut_at),
            "both_primary_s": round(max(0.0, self.last_primary.get(old, 0.0) - promoted), 2)
            if promoted
            else None,
            "old_leader_acked_after_cut": len(acked_after_cut),
            "old_leader_acked_after_promotion": sum(
                1 for _, t in acked_after_cut if promoted and t > promoted
            ),
            "old_leader_acked_lost": sum(1 for i, _ in acked_after_cut if i not in rows_kept),
            "old_leader_refusals": dict(Counter(name for t, name in self.refused if t > cut_at)),
        }


def _since(at: float | None, origin: float) -> float | None:
    return round(at - origin, 2) if at is not None else None


def doctor_looks(hosts: dict[str, str], database: str, primary: str) -> dict[str, dict[str, str]]:
    """The doctor's replication checks on each node after the move, by name: the new primary
    must list the old leader (back as a standby) with its hot_standby_feedback xmin, and the
    old leader must call itself a standby (a failure: the queue cannot run there). A snapshot
    held on the standby gives its feedback an xmin to send (within wal_receiver_status_interval,
    10 s)."""

    def conninfo(node: str) -> str:
        host, port = hosts[node].split(":")
        return f"host={host} port={port} dbname={database} user=postgres connect_timeout=2"

    def look(node: str) -> dict[str, Any] | None:
        with psycopg.connect(conninfo(node), autocommit=True) as conn:
            row = conn.execute(doctor_query("replication")).fetchone()
        value = row[0] if row else None
        return json.loads(value) if isinstance(value, str) else value

    seen: dict[str, dict[str, str]] = {}
    with contextlib.ExitStack() as stack:
        for node in hosts:
            if node == primary:
                continue
            with contextlib.suppress(psycopg.Error):
                reader = stack.enter_context(psycopg.connect(conninfo(node)))
                reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                reader.execute("SELECT count(*) FROM pg_class").fetchone()
        deadline = time.monotonic() + 15
        for node in [primary, *(n for n in hosts if n != primary)]:
            try:
                doc = look(node)
                while (
                    node == primary
                    and doc
                    and not any(s.get("backend_xmin") for s in doc.get("standbys") or [])
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.5)
                    doc = look(node)
            except psycopg.Error as exc:
                seen[node] = {"error": type(exc).__name__}
                continue
            seen[node] = {c.name: f"{c.status}: {c.detail}" for c in replication.judge(doc)}
    return seen
