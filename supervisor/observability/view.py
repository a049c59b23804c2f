"""What the master shows its metrics: a small read-only picture, filled by the master on demand.

The metrics server never reads the master's internals (its slots, its children's records, its
database session); it asks for this view at each scrape, so the master can change its insides
without breaking a dashboard, and the metrics import nothing of the master.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import dataclass, field

from supervisor.shared.board import Board

# Buckets of the time one turn of the master's loop keeps it busy (waiting in select excluded).
TURN_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class MasterCounters:
    """What the master itself counts: rescues, requeues, restarts, kills, maintenance runs."""

    rescued: int = 0
    rescued_discarded: int = 0
    requeued_after_crash: int = 0
    discarded_after_crash: int = 0
    timeouts: int = 0
    # Running jobs stopped because someone cancelled them (`jobs cancel`).
    cancel_stops: int = 0
    hard_memory_kills: int = 0
    purged: int = 0
    restarts: dict[tuple[str, str], int] = field(default_factory=dict)
    recycles: dict[tuple[str, str], int] = field(default_factory=dict)
    rescuer_runs: int = 0
    vacuums: int = 0
    staged: int = 0  # scheduled jobs this master made available at their run_at
    schedule_jobs: int = 0  # jobs this master enqueued for periodic schedules' ticks
    turn_buckets: list[int] = field(default_factory=lambda: [0] * (len(TURN_BUCKETS) + 1))
    turn_seconds: float = 0.0
    longest_turn: float = 0.0

    def turn(self, busy: float) -> None:
        """One turn of the master's loop kept it busy this long."""
        self.turn_buckets[bisect_left(TURN_BUCKETS, busy)] += 1
        self.turn_seconds += busy
        self.longest_turn = max(self.longest_turn, busy)

    def restart(self, pool: str, reason: str) -> None:
        self.restarts[(pool, reason)] = self.restarts.get((pool, reason), 0) + 1

    def recycle(self, pool: str, why: str) -> None:
        self.recycles[(pool, why)] = self.recycles.get((pool, why), 0) + 1


@dataclass(frozen=True)
class ChildView:
    """One live child: its pool, its status board (shared memory), and whether it is ready
    (connected and claiming: not booting, reconnecting, draining or being stopped)."""

    pool: str
    board: Board
    ready: bool


@dataclass(frozen=True)
class PoolView:
    """A configured pool: how many children it should run, and the queues it serves."""

    processes: int
    ready: int
    queues: tuple[str, ...]
    # What the elastic pools' scaling wants (a fixed pool: its processes), and why.
    desired: int = 0
    need: float = 0.0
    backlog_seconds: float = 0.0
    reason: str = ""
    minimum: int = 0  # an elastic pool's min (0: a fixed pool, ready with all its processes)


@dataclass(frozen=True)
class MasterView:
    pools: Mapping[str, PoolView]
    # Every live child, those of pools retired by a reload included, until they are reaped.
    children: tuple[ChildView, ...]
    counters: MasterCounters
    database_up: bool
    stopping: bool
