"""The order of the master's turn, with the steps that need processes or a database stubbed."""

from __future__ import annotations

import pytest

from supervisor.config import parse_config
from supervisor.runtime.children import Slot
from supervisor.runtime.master import Master, PoolRuntime

YAML = """
handlers: {k: tests.handlers:noop}
pools: {main: {processes: 2, queues: {default: 1}}}
"""
QUIET_STEPS = (
    "reap_children",
    "handle_notifications",
    "run_due_services",
    "escalate_kills",
    "update_title",
    "sleep",
)


def _master(monkeypatch: pytest.MonkeyPatch) -> tuple[Master, list[Slot]]:
    config = parse_config(YAML, source="queues.yaml")
    master = Master(config, {}, "postgresql://nobody@127.0.0.1:1/none")
    master.pools = {name: master.new_pool_runtime(p) for name, p in config.pools.items()}
    spawned: list[Slot] = []

    def spawn_into(runtime: PoolRuntime, slot: Slot) -> None:
        spawned.append(slot)

    monkeypatch.setattr(master, "spawn_into", spawn_into)
    for step in QUIET_STEPS:
        monkeypatch.setattr(master, step, lambda: None)
    return master, spawned


def test_empty_slots_are_refilled_in_a_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    master, spawned = _master(monkeypatch)
    monkeypatch.setattr(master, "handle_signals", lambda: None)
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
