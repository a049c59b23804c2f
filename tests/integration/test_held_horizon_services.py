"""The master's lease work through a held xmin horizon (issue 30, item 5).

A REPEATABLE READ reader holds the horizon while the jobs of a busy host run and finish (made
fast here: running rows inserted and deleted in bulk, as a loop of enqueue+complete would leave
them), so the indexes on running jobs keep an entry for every one. The master's services then
run with a statement timeout scaled to the dead entries made (the master's own is 1 s, which a
3,000 jobs/s stream passes in a few minutes of hold): lease renewal must still extend the lease
of a long job whose worker lives, the rescuer must finish its run and return a dead host's
expired job but never the live one, and the cancel watch must see a cancel.

Before the change (16bc6bb) the renewal read "every running job of these workers" and the rescue
"every running job whose lease expired", both through the entries the hold keeps: the renewal
and every rescue slice ran into the timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from supervisor.config import Config, parse_config
from supervisor.observability.view import MasterCounters
from supervisor.services.cancel_watch import CancelWatch
from supervisor.services.leases import LeaseRenewal
from supervisor.services.rescuer import Rescuer
from supervisor.sessions.database import MasterDatabase
from supervisor.shared.board import Board
from tests.master_session import connected

pytestmark = pytest.mark.slow

# Dead entries made while the horizon is held, spread over ten minutes of lease expiries (the
# 600 s hold of the report); and the statement timeout of the services' session. Measured here:
# the renewal by worker over 800,000 of them took 130-200 ms, the renewal by key 1-4 ms.
DEAD = 800_000
TIMEOUT = "60ms"
LIVE = "host-a:1:live"
GONE = "host-b:2:gone"

CONFIG = """
handlers: {long: tests.handlers:noop}
pools:
  main: {processes: 1, queues: {default: 1}}
lease: {duration: 30s, renew_every: 10s}
rescue: {interval: 60s}
"""


@dataclass
class Child:
    """A live child of the master, as the services see it: its board shows the job it runs."""

    worker_id: str
    board: Board
    pid: int = 0
    pool: str = "main"
    slot: int = 0
    draining: bool = False
    kill_reason: str | None = None
    spawned_wall: float = 0.0
    signals: list[int] = field(default_factory=list)

    def signal(self, signum: int) -> None:
        self.signals.append(signum)


@dataclass
class Host:
    db: MasterDatabase
    config: Config
    dsn: str
    children: list[Child]
    supervisor_id: str = "test-supervisor"
    host_name: str = "host-a"
    counters: MasterCounters = field(default_factory=MasterCounters)
    kinds: list[str] = field(default_factory=lambda: ["long"])
    killed: list[str] = field(default_factory=list)

    def live_children(self) -> list[Child]:
        return self.children

    def kill_child(self, child: Child, reason: str) -> None:
        self.killed.append(reason)

    def wake_queue(self, queue: str) -> None:
        pass


def _running(conn: psycopg.Connection[Any], worker: str, lease: str) -> tuple[int, int]:
    row = conn.execute(
        "INSERT INTO pgq.jobs (kind, state, attempts, lease_id, locked_by, lease_until,"
        " started_at) VALUES ('long', 'running', 1, nextval('pgq.lease_seq'), %s,"
        f" now() + interval '{lease}', now()) RETURNING id, lease_id",
        (worker,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


def _lease_left(conn: psycopg.Connection[Any], job_id: int) -> float:
    row = conn.execute(
        "SELECT extract(epoch FROM lease_until - now())::float8 FROM pgq.jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return float(row[0])


@pytest.fixture
def held(dsn: str) -> Iterator[tuple[psycopg.Connection[Any], int, int, int]]:
    """The long job (its worker alive), a dead host's job whose lease ran out 5 s ago, and the
    entries of DEAD finished jobs of the live worker, kept by a reader holding the horizon."""
    conn = psycopg.connect(dsn, autocommit=True)
    long_id, long_lease = _running(conn, LIVE, "3 seconds")
    gone_id, _ = _running(conn, GONE, "-5 seconds")
    reader = psycopg.connect(dsn)
    reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    reader.execute("SELECT count(*) FROM pgq.jobs").fetchone()  # the snapshot is taken
    step = 50_000
    for first in range(0, DEAD, step):
        # Finished jobs of the live worker, their leases ending over the last ten minutes.
        conn.execute(
            "INSERT INTO pgq.jobs (kind, state, attempts, lease_id, locked_by, lease_until,"
            " started_at) SELECT 'short', 'running', 1, nextval('pgq.lease_seq'), %s,"
            " now() - interval '600 seconds' * g / %s, now()"
            " FROM generate_series(%s, %s) AS g",
            (LIVE, DEAD, first + 1, first + step),
        )
        conn.execute("DELETE FROM pgq.jobs WHERE kind = 'short'")
    conn.execute("ANALYZE pgq.jobs")
    try:
        yield conn, long_id, long_lease, gone_id
    finally:
        reader.close()
        conn.close()


@pytest.fixture
def host(dsn: str) -> Iterator[Host]:
    db = connected(
        MasterDatabase(dsn, name="master", connect_timeout=5, timeouts=(TIMEOUT, TIMEOUT))
    )
    board = Board(1, unrecorded=2)
    yield Host(db, parse_config(CONFIG, source="test.yaml"), dsn, [Child(LIVE, board)])
    db.close()
    board.close()


def test_renewal_rescue_and_cancel_watch_finish_through_a_held_horizon(
    held: tuple[psycopg.Connection[Any], int, int, int], host: Host
) -> None:
    conn, long_id, long_lease, gone_id = held
    # The child runs the long job (what a real child writes on its board when it starts one).
    host.children[0].board.job_started(0, long_id, long_lease, 0, None)

    assert _lease_left(conn, long_id) < 3.5
    assert LeaseRenewal(host, 10.0).run_once() == 1
    assert _lease_left(conn, long_id) > 25  # renewed to its 30 s

    rescuer = Rescuer(host, 60.0)
    deadline = time.monotonic() + 30
    rescuer.run_once()
    while rescuer.running and time.monotonic() < deadline:
        rescuer.run_once()
    assert not rescuer.running, "the rescue run never finished"
    states = dict(conn.execute("SELECT id, state FROM pgq.jobs").fetchall())
    assert states == {long_id: "running", gone_id: "available"}
    assert host.counters.rescued == 1

    conn.execute("UPDATE pgq.jobs SET cancel_requested_at = now() WHERE id = %s", (long_id,))
    assert CancelWatch(host, 1.0).run_once() == 1
    child = host.children[0]  # told through its board, and signalled to look
    assert long_id in child.board.cancelled_jobs() and child.signals
