"""The one shape of the master's periodic services, and what they may know of the master.

Each service has a name, an interval and a ``run_once`` that does one bounded piece of work and
returns how many things it did (jobs renewed, rescued, staged; children stopped); the master
calls ``run`` on the ones that are due. A failure is logged and retried at the next interval,
never fatal: the loop that owns the children must outlive any database hiccup. A service logs
only when it did something (a count above zero), never when idle. Settings come from the
service's own section of the config (documented with it in supervisor.config.model) or, for
the watches, from constants named in the module that builds them (supervisor.master.loop).

Services see the master only through ``Host`` and its children only through ``ChildRecord``:
nothing here imports supervisor.master.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

from supervisor.observability.view import MasterCounters
from supervisor.sessions.database import MasterDatabase
from supervisor.shared.board import Board

if TYPE_CHECKING:
    from supervisor.config import Config

log = logging.getLogger("pgq.master")


class ChildRecord(Protocol):
    """What a service may read of one of the master's children."""

    pid: int
    pool: str
    slot: int
    worker_id: str
    board: Board
    draining: bool
    kill_reason: str | None
    spawned_wall: float

    def signal(self, signum: int) -> None: ...


class Host(Protocol):
    """What the services need from the master."""

    db: MasterDatabase
    config: Config
    dsn: str
    supervisor_id: str
    host_name: str
    counters: MasterCounters
    kinds: list[str]

    def live_children(self) -> list[ChildRecord]: ...

    def kill_child(self, child: ChildRecord, reason: str) -> None: ...

    def wake_queue(self, queue: str) -> None: ...


class Service:
    name = "service"

    def __init__(self, host: Host, interval: float, *, first_in: float = 0.0) -> None:
        self.host = host
        self.interval = interval
        self.next_due = time.monotonic() + first_in

    def due(self, now: float) -> bool:
        return now >= self.next_due

    def run(self, now: float) -> None:
        try:
            self.run_once()
        except Exception:
            log.exception("%s failed; it will run again in %.0fs", self.name, self.interval)
        finally:
            self.next_due = self.next_run(now)

    def next_run(self, now: float) -> float:
        return now + self.interval

    def run_once(self) -> int:
        """One bounded piece of work; how many things it did (0 when idle)."""
        raise NotImplementedError
