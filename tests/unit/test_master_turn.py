"""The order of the master's turn, with the steps that need processes or a database stubbed."""

from __future__ import annotations

import time

import pytest

from supervisor.config import parse_config
from supervisor.master.children import Slot
from supervisor.master.loop import CONNECTING_WAIT, SERVICES_BUDGET, Master
from supervisor.master.pools import PoolRuntime
from supervisor.services.base import Service

YAML = """
handlers: {k: tests.handlers:noop}
pools: {main: {processes: 2, queues: {default: 1}}}
"""
QUIET_STEPS = (
    "reap_children",
    "handle_wakeups",
    "run_due_services",
    "escalate_kills",
    "update_title",
    "wait",
)


def _master(monkeypatch: pytest.MonkeyPatch) -> tuple[Master, list[Slot]]:
    config = parse_config(YAML, source="queues.yaml")
    master = Master(config, {}, "postgresql://nobody@127.0.0.1:1/none")
    master.pools = {name: master.new_pool_runtime(p) for name, p in config.pools.items()}
    spawned: list[Slot] = []

    def spawn_into(runtime: PoolRuntime, slot: Slot) -> None:
        spawned.append(slot)
        slot.next_spawn = float("inf")  # filled, as far as the loop can tell

    monkeypatch.setattr(master, "spawn_into", spawn_into)
    for step in QUIET_STEPS:
        monkeypatch.setattr(master, step, lambda: None)
    return master, spawned


def test_empty_slots_are_refilled_one_per_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    master, spawned = _master(monkeypatch)
    monkeypatch.setattr(master, "handle_signals", lambda: None)
    master.turn()
    # One fork per turn: forks do not pile up into one long turn.
    assert [(s.pool, s.index) for s in spawned] == [("main", 1)]
    master.turn()
    assert [(s.pool, s.index) for s in spawned] == [("main", 1), ("main", 2)]


def test_a_sigterm_handled_in_a_turn_leaves_the_empty_slots_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deploy's SIGTERM arrives; in the same turn the drained child is reaped and its slot
    is empty. Refilling it would start a child nobody told to drain, which then claims jobs
    until the shutdown timeout kills it."""
    master, spawned = _master(monkeypatch)
    monkeypatch.setattr(master, "handle_signals", lambda: master.begin_stop("SIGTERM"))
    master.turn()
    assert master.stopping
    assert spawned == []


class _Slow(Service):
    """A service that takes longer than a turn's budget for services, due again at once."""

    def __init__(self, master: Master, name: str, ran: list[str], due_in: float) -> None:
        super().__init__(master, interval=0.0, first_in=due_in)
        self.name = name
        self.ran = ran

    def run_once(self) -> int:
        self.ran.append(self.name)
        time.sleep(SERVICES_BUDGET * 2)
        return 1


def test_due_services_are_spread_over_turns_longest_overdue_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    master, _ = _master(monkeypatch)
    ran: list[str] = []
    # Overdue by 3 s, 2 s and 1 s; each is due again at once after it ran (a purge under way).
    master.services = [
        _Slow(master, name, ran, -age) for name, age in (("a", 1), ("b", 3), ("c", 2))
    ]
    for _ in range(3):
        Master.run_due_services(master)
    # One per turn, as each takes longer than the budget, in order of how long each waited.
    assert ran == ["b", "c", "a"]
    # "b" ran first and is due again, but "c" and "a" have waited longer since: no starving.
    Master.run_due_services(master)
    assert ran[3] == "b"


def test_the_limits_once_written_leave_no_due_time_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    master, _ = _master(monkeypatch)
    master.build_services()
    monkeypatch.setattr(master.db, "run", lambda what, fn: [])  # written: nothing changed
    sync = master.limit_sync
    now = time.monotonic()
    sync.run(now)
    assert sync.done and sync.settled
    # Before: 5 s later it was due on the clock but never ran again, so its due time stayed in
    # the past and the loop's wait (until the earliest due time) slept 0 s: the master spun at a
    # full core (10,000 turns a second) from then on.
    later = now + 60
    assert not sync.due(later) and sync.next_due > later


def test_a_connect_under_way_keeps_the_loop_turning(monkeypatch: pytest.MonkeyPatch) -> None:
    master, _ = _master(monkeypatch)
    master.stopping = True  # no slot to refill: nothing else is due
    waited: list[float] = []
    monkeypatch.setattr(master.selector, "select", lambda timeout: waited.append(timeout) or [])
    Master.wait(master)
    # A connect advances a moment per turn (it never waits): the loop turns often meanwhile.
    monkeypatch.setattr(master.db, "connecting", object())
    Master.wait(master)
    assert waited == [1.0, CONNECTING_WAIT]
