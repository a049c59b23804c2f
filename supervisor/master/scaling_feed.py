"""Elastic pools on the master's loop: read the backlog, measure the host, resize the pools.

Once a second it sends, on a session of its own and without waiting (like the queue stats of
supervisor.services.metrics_feed), what the other live supervisors can serve of each pool and
the due and running jobs of the elastic pools' queues; when the rows are in, it measures this
host (the children's USS, subprocesses included, and their CPU, with psutil) and the pools'
service time (from the children's boards), asks supervisor.master.scaling what each pool needs
and hands the sizes to the master, which forks or drains. Nothing here waits for the database:
a slow read only makes the next decision later.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import psutil
import psycopg

from supervisor.master.scaling import (
    UNMEASURED_SERVICE,
    Decision,
    PoolScaler,
    Reading,
    Room,
    allot,
    budget_room,
    fleet_share,
)
from supervisor.queue.dsn import scrub
from supervisor.queue.scaling import scaling_query
from supervisor.services.base import Host, Service
from supervisor.services.registry import STALE_AFTER
from supervisor.sessions.database import MasterDatabase
from supervisor.sessions.pending import PendingStatement, Readable
from supervisor.shared import memory

log = logging.getLogger("pgq.master")

SCALING_EVERY = 1.0
# Due jobs counted per queue: a bounded read of the claim index, and far past what any max needs.
READY_CAP = 5000
# Weight of the newest batch of finished jobs in a pool's service time (a moving average).
SERVICE_SMOOTHING = 0.3

Rows = list[tuple[str | None, ...]]


class Resizable(Host, Protocol):
    """What the scaling needs of the master besides the services' Host."""

    def pool_size(self, pool: str) -> int: ...

    def resize_pool(self, pool: str, desired: int, reason: str) -> None: ...


@dataclass
class PoolState:
    """What this host shows of one pool (status, /metrics, the dashboard, the registry)."""

    min: int
    max: int
    desired: int
    actual: int
    need: float = 0.0
    backlog_seconds: float = 0.0
    service_seconds: float = UNMEASURED_SERVICE
    reason: str = "starting"
    elastic: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "min": self.min,
            "max": self.max,
            "desired": self.desired,
            "actual": self.actual,
            "elastic": self.elastic,
            "need": round(self.need, 2),
            "backlog_seconds": round(self.backlog_seconds, 2),
            "service_seconds": round(self.service_seconds, 3),
            "reason": self.reason,
        }


class ScalingFeed(Service, Readable):
    name = "scaling"

    def __init__(self, host: Resizable, selector: selectors.BaseSelector) -> None:
        super().__init__(host, SCALING_EVERY)
        self.resizer = host
        self.selector = selector
        database = host.config.database
        self.session = MasterDatabase(
            host.dsn,
            name="scaling",
            connect_timeout=database.connect_timeout,
            pooled=database.pooled,
            timeouts=("5s", "5s"),
            quiet=True,
        )
        self.pending: PendingStatement | None = None
        self.todo: list[tuple[str, Callable[[Rows], None]]] = []
        self.handler: Callable[[Rows], None] | None = None
        self.fd = -1
        self.scalers: dict[str, PoolScaler] = {}
        self.states: dict[str, PoolState] = {}
        self.others_max: dict[str, int] = {}
        self.backlog: dict[str, tuple[int, int]] = {}  # queue -> (ready, running)
        self.service: dict[str, float] = {}  # pool -> seconds per job
        self.finished: dict[int, tuple[int, float]] = {}  # child pid -> (jobs, seconds) seen
        self.cpu: dict[int, tuple[psutil.Process, float]] = {}  # child pid -> (process, cpu s)
        self.cpu_at = time.monotonic()
        self.largest_child = 0  # the largest USS a child of an elastic pool has had
        self.configure()

    def configure(self) -> None:
        """(Re)read the pools' scaling settings: at start and after a reload."""
        config = self.host.config
        scalers = {}
        for name, pool in config.pools.items():
            if pool.scaling is None:
                continue
            old = self.scalers.get(name)
            if old is not None and old.config == pool.scaling and old.threads == pool.threads:
                scalers[name] = old
            else:
                scalers[name] = PoolScaler(pool.scaling, threads=pool.threads)
        self.scalers = scalers
        states = {}
        for name, pool in config.pools.items():
            low, high = (pool.scaling.min, pool.scaling.max) if pool.scaling else (0, 0)
            if pool.scaling is None:
                low = high = pool.processes
            state = self.states.get(name) or PoolState(low, high, low, low)
            state.min, state.max, state.elastic = low, high, pool.scaling is not None
            if pool.scaling is None:
                state.desired, state.reason = low, "fixed"
            states[name] = state
        self.states = states

    def published(self) -> str:
        """The registry's copy: every pool, fixed ones too (their capacity counts for others)."""
        for name, state in self.states.items():
            state.actual = self.resizer.pool_size(name)
        return json.dumps({name: s.as_json() for name, s in self.states.items()})

    # -- reading, without waiting ---------------------------------------------------------

    def run_once(self) -> int:
        if self.pending is not None or not self.scalers:
            return 0
        if self.host.db.in_outage:
            return 0
        conn = self.session.connection()
        if conn is None:
            return 0
        queues = sorted({q for n in self.scalers for q in self.host.config.pools[n].queues})
        render = psycopg.ClientCursor(conn).mogrify
        self.todo = [
            (
                render(
                    scaling_query("scaling_fleet"),
                    {"id": self.host.supervisor_id, "stale_after": STALE_AFTER},
                ),
                self._fleet,
            ),
            (
                render(scaling_query("scaling_backlog"), {"queues": queues, "cap": READY_CAP}),
                self._backlog,
            ),
        ]
        if not self._send_next(conn):
            return 0
        assert self.pending is not None
        self.fd = self.pending.fileno()
        self.selector.register(self.fd, selectors.EVENT_READ, self)
        return 0

    def _send_next(self, conn: psycopg.Connection[Any]) -> bool:
        statement, self.handler = self.todo.pop(0)
        try:
            self.pending = PendingStatement(conn, statement)
        except psycopg.Error as exc:
            self._lost(str(exc))
            return False
        return True

    def fileno(self) -> int | None:
        with contextlib.suppress(psycopg.Error):
            return self.session.fileno()
        return None

    def on_readable(self) -> None:
        pending = self.pending
        if pending is None or not pending.poll():
            return
        if pending.error:
            self._unregister()
            self._lost(pending.error)
            return
        handler = self.handler
        assert handler is not None
        handler(pending.rows)
        if self.todo and self.session.conn is not None:
            self._send_next(self.session.conn)
            return
        self._unregister()
        self.decide(time.monotonic())

    def _fleet(self, rows: Rows) -> None:
        self.others_max = {str(pool): int(n or 0) for pool, n, _ in rows}

    def _backlog(self, rows: Rows) -> None:
        backlog: dict[str, tuple[int, int]] = {}
        for queue, _kind, ready, running in rows:
            seen = backlog.get(str(queue), (0, 0))
            backlog[str(queue)] = (seen[0] + int(ready or 0), int(running or 0))
        self.backlog = backlog

    def _lost(self, why: str) -> None:
        log.warning("scaling: %s; pools keep their size", scrub(why.strip(), self.host.dsn))
        self.session.close()

    def _unregister(self) -> None:
        if self.pending is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.fd)
        self.pending = None
        self.todo = []

    def close(self) -> None:
        self._unregister()
        self.session.close()

    # -- deciding ---------------------------------------------------------------------------

    def decide(self, now: float) -> None:
        self.measure_service()
        config = self.host.config
        wanted: dict[str, Decision] = {}
        for name, scaler in self.scalers.items():
            pool = config.pools[name]
            ready = sum(self.backlog.get(q, (0, 0))[0] for q in pool.queues)
            running = sum(self.backlog.get(q, (0, 0))[1] for q in pool.queues)
            seconds = self.service.get(name, UNMEASURED_SERVICE)
            share = fleet_share(scaler.config.max, self.others_max.get(name, 0))
            reading = Reading(ready, ready * seconds, running, share, seconds)
            wanted[name] = scaler.decide(reading, self.resizer.pool_size(name), now)
            state = self.states[name]
            state.backlog_seconds, state.service_seconds = reading.backlog_seconds, seconds
        room = self.room()
        sizes = allot(
            {n: d.desired for n, d in wanted.items()},
            {n: s.config.min for n, s in self.scalers.items()},
            {n: s.config.weight for n, s in self.scalers.items()},
            room.children,
        )
        for name, decision in wanted.items():
            size, reason = sizes[name], decision.reason
            if size < decision.desired:
                reason = f"{reason}; held to {size} by the host budget ({room.why})"
            state = self.states[name]
            state.desired, state.need, state.reason = size, decision.need, reason
            state.actual = self.resizer.pool_size(name)
            if size != state.actual:
                self.resizer.resize_pool(name, size, reason)

    def measure_service(self) -> None:
        """Each elastic pool's seconds per job, from what its children's boards say finished
        since the last look (a moving average); a pool whose running jobs are already older
        than that average is at least as slow as they are."""
        totals: dict[str, tuple[int, float]] = {}
        oldest: dict[str, float] = {}
        now = time.monotonic()
        seen: dict[int, tuple[int, float]] = {}
        for child in self.host.live_children():
            buckets, seconds = child.board.job_histogram()
            jobs = sum(buckets)
            before = self.finished.get(child.pid, (0, 0.0))
            seen[child.pid] = (jobs, seconds)
            done, spent = totals.get(child.pool, (0, 0.0))
            totals[child.pool] = (done + jobs - before[0], spent + seconds - before[1])
            for job in child.board.running_jobs():
                age = now - job.started
                oldest[child.pool] = max(oldest.get(child.pool, 0.0), age)
        self.finished = seen
        for pool, (done, spent) in totals.items():
            if done > 0:
                mean = spent / done
                old = self.service.get(pool)
                self.service[pool] = mean if old is None else old + SERVICE_SMOOTHING * (mean - old)
        for pool, age in oldest.items():
            if age > self.service.get(pool, UNMEASURED_SERVICE):
                self.service[pool] = age

    def room(self) -> Room:
        """Children the elastic pools may have together under the host's budgets."""
        budget = self.host.config.budget
        if budget.cpu is None and budget.memory is None:
            return Room(None)
        elastic = [c for c in self.host.live_children() if c.pool in self.scalers]
        others = [c for c in self.host.live_children() if c.pool not in self.scalers]
        used_memory = memory.uss(os.getpid()) + sum(memory.group_uss(c.pid) for c in others)
        elastic_memory = [memory.group_uss(c.pid) for c in elastic]
        now = time.monotonic()
        wall, self.cpu_at = max(now - self.cpu_at, 1e-3), now
        cores_used, measured = 0.0, {}
        for child in self.host.live_children():
            process, before = self.cpu.get(child.pid, (None, None))
            try:
                process = process or psutil.Process(child.pid)
                times = process.cpu_times()
            except psutil.Error:
                continue
            spent = times.user + times.system + times.children_user + times.children_system
            measured[child.pid] = (process, spent)
            if before is not None:
                cores_used += (spent - before) / wall
        self.cpu = measured
        # The largest child yet, not the mean: a child grows while it runs a job, and a budget
        # planned on an idle one would be overrun once the new children are busy.
        self.largest_child = max(self.largest_child, *elastic_memory, 0)
        return budget_room(
            children=len(elastic),
            used_memory=used_memory + sum(elastic_memory),
            per_child_memory=self.largest_child,
            memory_budget=budget.memory,
            used_cores=cores_used,
            per_child_cores=cores_used / max(len(self.host.live_children()), 1),
            cores=psutil.cpu_count() or 1,
            cpu_budget=budget.cpu,
        )
