"""The elastic pools' decisions (supervisor.master.scaling): pure logic, no processes."""

from __future__ import annotations

import math
import random

import pytest

from supervisor.config import ConfigError, parse_config
from supervisor.config.model import ScalingConfig
from supervisor.master.scaling import (
    PoolScaler,
    Reading,
    allot,
    backlog_seconds,
    budget_room,
    fleet_share,
)

CONFIG = ScalingConfig(min=1, max=6, target_wait=5.0, quiet=10.0)


def test_a_burst_grows_at_once_to_max():
    scaler = PoolScaler(CONFIG)
    # 30 jobs of 2 s: 60 s of work to serve within 5 s.
    decision = scaler.decide(Reading(30, 60.0, 1), actual=1, now=0.0)
    assert decision.desired == 6
    assert decision.reason.startswith("grow: 30 due jobs (60.0s of work)")


def test_the_need_follows_littles_law():
    scaler = PoolScaler(CONFIG)
    # No backlog: the running jobs are the arrival rate times the service time.
    assert scaler.decide(Reading(0, 0.0, 3, service_seconds=2.0), 1, now=0.0).desired == 3
    # 20 s of due work and 3 jobs half done (3 s) ahead of a new job, over a 5 s target wait.
    assert scaler.decide(Reading(10, 20.0, 3, service_seconds=2.0), 1, now=0.0).desired == 5


def test_it_shrinks_only_after_the_quiet_period_and_to_the_peak_need_seen_in_it():
    scaler = PoolScaler(CONFIG)
    assert scaler.decide(Reading(30, 60.0, 6), actual=1, now=0.0).desired == 6
    # The backlog is gone; two jobs still run.
    for t in range(1, 11):
        decision = scaler.decide(Reading(0, 0.0, 2), actual=6, now=float(t))
        assert decision.desired == 6, decision.reason
    # Below 6 since t=1: at t=11 the quiet period is over, and 2 running is its peak need.
    decision = scaler.decide(Reading(0, 0.0, 2), actual=6, now=11.0)
    assert decision.desired == 2 and decision.reason.startswith("shrink:"), decision.reason
    # Idle: the next step down waits a quiet period of its own, and stops at min.
    downs = [scaler.decide(Reading(0, 0.0, 0), actual=2, now=11.0 + t).desired for t in range(12)]
    assert downs[0] == 2 and downs[9] == 2 and downs[-1] == 1
    assert scaler.decide(Reading(0, 0.0, 0), actual=1, now=40.0).desired == 1


def simulate(quiet: float, seed: int, seconds: int = 900) -> list[int]:
    """A pool serving Poisson arrivals of 2 jobs a second, 2 s each (4 busy children on
    average), deciding once a second; the size at each second."""
    rng = random.Random(seed)
    scaler = PoolScaler(ScalingConfig(min=1, max=6, target_wait=5.0, quiet=quiet))
    actual, busy, backlog, sizes = 1, [], 0, []
    for t in range(seconds):
        arrivals, p, floor = 0, rng.random(), math.exp(-2.0)
        while p >= floor:
            arrivals, p = arrivals + 1, p * rng.random()
        backlog += arrivals
        busy = [left - 1 for left in busy if left > 1]
        while backlog and len(busy) < actual:
            busy.append(2)
            backlog -= 1
        reading = Reading(backlog, 2.0 * backlog, len(busy), service_seconds=2.0)
        actual = scaler.decide(reading, actual, t).desired
        sizes.append(actual)
    return sizes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_steady_load_holds_a_steady_size(seed):
    sizes = simulate(quiet=30.0, seed=seed)
    assert max(sizes[:10]) >= 4  # it grew within seconds
    settled = sizes[60:]
    assert len(set(settled)) == 1, settled  # and then never changed


def test_two_hosts_split_the_fleet_need():
    # Each host has max 6; the need is 6 children in total: each takes its half.
    one = PoolScaler(CONFIG).decide(Reading(15, 30.0, 0, share=fleet_share(6, 6)), 1, 0.0)
    assert one.desired == 3
    busy = Reading(6, 12.0, 6, share=0.5, service_seconds=2.0)
    assert PoolScaler(CONFIG).decide(busy, 3, 0.0).desired == 3
    assert fleet_share(6, 0) == 1.0
    assert fleet_share(2, 6) == 0.25


def test_threads_divide_the_need():
    scaler = PoolScaler(CONFIG, threads=4)
    assert scaler.decide(Reading(0, 0.0, 12), actual=1, now=0.0).desired == 3


def test_rounding_jitter_does_not_fork_a_child():
    scaler = PoolScaler(CONFIG)
    # 3 running and one job due: need 3.1 (the work ahead of a new job), not 4.
    reading = Reading(1, 2.0, 3, service_seconds=2.0)
    assert scaler.decide(reading, actual=3, now=0.0).need == pytest.approx(3.0)
    assert scaler.decide(Reading(1, 12.5, 0), actual=3, now=0.0).desired == 3


def test_backlog_seconds_uses_each_kinds_service_time():
    assert backlog_seconds({"pdf": 10, "mail": 100}, {"pdf": 2.0, "mail": 0.01}) == 21.0
    assert backlog_seconds({"new": 3}, {}) == 3.0  # unmeasured: 1 s each


def test_the_memory_budget_bounds_the_children():
    room = budget_room(
        children=3,
        used_memory=700 << 20,
        per_child_memory=200 << 20,
        memory_budget=1 << 30,
        used_cores=0.0,
        per_child_cores=0.0,
        cores=2,
        cpu_budget=0.9,
    )
    assert room.children == 4  # 324 MiB spare: one more child of 200 MiB
    assert "memory" in room.why


def test_the_cpu_budget_bounds_busy_children_only():
    busy = budget_room(
        children=2,
        used_memory=0,
        per_child_memory=0,
        memory_budget=None,
        used_cores=1.6,
        per_child_cores=0.8,
        cores=2,
        cpu_budget=0.9,
    )
    assert busy.children == 2
    idle = budget_room(
        children=2,
        used_memory=0,
        per_child_memory=0,
        memory_budget=None,
        used_cores=0.02,
        per_child_cores=0.01,
        cores=2,
        cpu_budget=0.9,
    )
    assert idle.children is None


def test_allot_keeps_mins_and_shares_the_rest_by_weight():
    wanted = {"a": 6, "b": 6}
    assert allot(wanted, {"a": 1, "b": 1}, {"a": 1, "b": 1}, None) == wanted
    assert allot(wanted, {"a": 1, "b": 1}, {"a": 1, "b": 1}, 6) == {"a": 3, "b": 3}
    assert allot(wanted, {"a": 1, "b": 1}, {"a": 2, "b": 1}, 6) == {"a": 4, "b": 2}
    assert allot({"a": 6, "b": 1}, {"a": 1, "b": 1}, {"a": 1, "b": 1}, 4) == {"a": 3, "b": 1}
    # The budget is smaller than the mins: the mins stand.
    assert allot(wanted, {"a": 2, "b": 2}, {"a": 1, "b": 1}, 1) == {"a": 2, "b": 2}


BASE = 'handlers: {a: "m:f"}\npools:\n  p:\n    queues: {q: 1}\n'


def test_config_reads_elastic_pools_and_budgets():
    text = "host: {name: h1, cpu: 90%, memory: 2GiB}\n" + BASE
    text += "    processes: {min: 2, max: 6, target_wait: 2s, quiet: 30s, weight: 3}\n"
    config = parse_config(text, source="t.yaml", env={})
    pool = config.pools["p"]
    assert pool.processes == 2
    assert pool.scaling == ScalingConfig(min=2, max=6, target_wait=2.0, quiet=30.0, weight=3)
    assert config.host == "h1"
    assert config.budget.cpu == 0.9 and config.budget.memory == 2 << 30
    fixed = parse_config(BASE + "    processes: 3\n", source="t.yaml", env={})
    assert fixed.pools["p"].processes == 3 and fixed.pools["p"].scaling is None


@pytest.mark.parametrize(
    ("processes", "path", "problem"),
    [
        ("{min: 4, max: 2}", "pools.p.processes.max", "must be at least min (4)"),
        ("{min: 1}", "pools.p.processes", "needs max"),
        ("{min: 1, max: 300}", "pools.p.processes.max", "at most 256"),
        ("{max: 3, quite: 10s}", "pools.p.processes.quite", "did you mean 'quiet'"),
    ],
)
def test_bad_elastic_settings_name_their_key(processes, path, problem):
    with pytest.raises(ConfigError) as caught:
        parse_config(BASE + f"    processes: {processes}\n", source="t.yaml", env={})
    issues = [(i.path, i.message) for i in caught.value.issues]
    assert any(p == path and problem in text for p, text in issues), issues


def test_a_bad_budget_names_its_key():
    with pytest.raises(ConfigError) as caught:
        parse_config("host: {cpu: 2, memory: 1KiB}\n" + BASE, source="t.yaml", env={})
    paths = {i.path for i in caught.value.issues}
    assert paths == {"host.cpu", "host.memory"}
