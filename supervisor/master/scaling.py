"""How many children an elastic pool should have: pure decisions, no I/O (docs/elastic-pools.md).

The need comes from Little's law and the wait a due job would see. Without a backlog, the jobs
in service are the arrival rate times the service time (L = lambda x S): the fleet's running
jobs, read directly, are the children the load keeps busy. With a backlog, a job enqueued now
waits until the work ahead of it is served: the due jobs' seconds of work (each kind's count
times its measured service time) plus what is left of the running ones (half a service time
each, on average), spread over the children. Keeping that wait within the pool's target takes
(backlog_seconds + running x S / 2) / target_wait children. The need is the larger of the two.
A host sizes only for its share of the fleet (its max against the max of every live supervisor
serving the pool, read from the registry), so two hosts reading the same backlog do not both
grow for the same jobs.

Hysteresis: the pool grows as soon as the need is above its size (by more than GROW_SLACK of a
child: one job's jitter must not fork a child), and shrinks only when the need stayed below the
size for the whole quiet period, then to the largest need seen in it: a steady load, whose
running count wobbles, keeps the size its peaks need instead of flapping.

Budgets: the host's cpu and memory (measured by the caller) allow a number of children for all
elastic pools together; when the pools want more, each gets its min, then the rest by weight.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from supervisor.config.model import ScalingConfig

# A need this far above a whole number of children does not fork one more (rounding jitter).
GROW_SLACK = 0.2
# The service time assumed for a kind before one of its jobs has been measured.
UNMEASURED_SERVICE = 1.0
# Growth plans to fill at most this share of the memory budget: a child's USS moves by a few
# percent while it runs (allocations of the driver, of the handler), and the budget is a ceiling.
MEMORY_PLANNED = 0.95


@dataclass(frozen=True)
class Reading:
    """What the pool's queues look like, fleet-wide, at one moment."""

    ready: int  # due jobs waiting in the pool's queues
    backlog_seconds: float  # their work: each kind's count times its service time
    running: int  # jobs running from those queues, on every host
    share: float = 1.0  # this host's share of the fleet's capacity for the pool (0-1]
    service_seconds: float = UNMEASURED_SERVICE  # a job's measured service time


@dataclass(frozen=True)
class Decision:
    desired: int
    need: float  # children this host needs now (before min, max and budgets)
    reason: str


@dataclass
class PoolScaler:
    """One elastic pool's memory of its recent needs (the hysteresis)."""

    config: ScalingConfig
    threads: int = 1
    needs: deque[tuple[float, float]] = field(default_factory=deque)  # (time, need)
    below_since: float | None = None  # since when the need has stayed below the size

    def need(self, reading: Reading) -> float:
        """Children this host needs: its share of the jobs the load keeps in service, or of
        those that serve the work ahead of a new job within the target wait, the larger."""
        wait = max(self.config.target_wait, 0.001)
        ahead = reading.backlog_seconds + reading.running * reading.service_seconds / 2
        jobs = max(float(reading.running), ahead / wait) if reading.ready else reading.running
        return jobs * reading.share / max(self.threads, 1)

    def decide(self, reading: Reading, actual: int, now: float) -> Decision:
        low, high = self.config.min, self.config.max
        need = self.need(reading)
        quiet = self.config.quiet
        self.needs.append((now, need))
        while self.needs and self.needs[0][0] < now - quiet:
            self.needs.popleft()
        wanted = max(low, min(high, math.ceil(need - GROW_SLACK)))
        why = (
            f"{reading.ready} due jobs ({reading.backlog_seconds:.1f}s of work), "
            f"{reading.running} running fleet-wide, share {reading.share:.2f}: "
            f"need {need:.1f} children"
        )
        if wanted > actual:
            self.below_since = None
            return Decision(
                wanted, need, f"grow: {why} (target wait {_s(self.config.target_wait)})"
            )
        if wanted == actual or actual <= low:
            self.below_since = None
            return Decision(max(actual, low), need, f"hold: {why}")
        # Below the size: shrink only once it has been so for the whole quiet period.
        if self.below_since is None:
            self.below_since = now
        if now - self.below_since < quiet:
            return Decision(
                actual,
                need,
                f"hold: {why}, below {actual} for {now - self.below_since:.0f}s "
                f"of the {_s(quiet)} quiet period",
            )
        peak = max(n for _, n in self.needs)
        target = max(low, min(actual, math.ceil(peak - GROW_SLACK)))
        if target >= actual:
            return Decision(actual, need, f"hold: {why}, peak need {peak:.1f} in the quiet period")
        self.below_since = now  # the next step down waits a quiet period of its own
        return Decision(
            target,
            need,
            f"shrink: {why}; at most {peak:.1f} children needed over the last {_s(quiet)}",
        )


def _s(seconds: float) -> str:
    return f"{seconds:g}s"


def backlog_seconds(ready_by_kind: Mapping[str, int], service: Mapping[str, float]) -> float:
    """Seconds of work waiting: each kind's due jobs times its measured service time."""
    return sum(n * service.get(kind, UNMEASURED_SERVICE) for kind, n in ready_by_kind.items())


def fleet_share(own_max: int, others_max: int) -> float:
    """This host's share of the pool's capacity across the live supervisors serving it."""
    total = own_max + max(others_max, 0)
    return own_max / total if total > 0 else 1.0


@dataclass(frozen=True)
class Room:
    """Children all elastic pools may have together under the host's budgets (None: no bound),
    and which budget set it."""

    children: int | None
    why: str = ""


def budget_room(
    *,
    children: int,
    used_memory: int,
    per_child_memory: int,
    memory_budget: int | None,
    used_cores: float,
    per_child_cores: float,
    cores: int,
    cpu_budget: float | None,
) -> Room:
    """How many children (of the elastic pools, counting the ``children`` they have now) fit:
    each budget's unused part divided by what one child uses, measured."""
    bounds: list[tuple[int, str]] = []
    if memory_budget is not None and per_child_memory > 0:
        spare = (int(memory_budget * MEMORY_PLANNED) - used_memory) // per_child_memory
        bounds.append(
            (
                children + int(spare),
                f"memory {used_memory >> 20} MiB of {memory_budget >> 20} MiB, "
                f"{per_child_memory >> 20} MiB a child",
            )
        )
    # A child that barely uses the CPU (waiting on I/O) is not bounded by it.
    if cpu_budget is not None and per_child_cores >= 0.05:
        spare_cores = cpu_budget * cores - used_cores
        bounds.append(
            (
                children + math.floor(spare_cores / per_child_cores),
                f"cpu {used_cores:.2f} of {cpu_budget * cores:.2f} cores, "
                f"{per_child_cores:.2f} a child",
            )
        )
    if not bounds:
        return Room(None)
    limit, why = min(bounds)
    return Room(max(limit, 0), why)


def allot(
    wanted: Mapping[str, int],
    minimum: Mapping[str, int],
    weights: Mapping[str, int],
    room: int | None,
) -> dict[str, int]:
    """Each pool's children when together they may have at most ``room``: every pool keeps its
    min (never below it, even over the budget), then children go one at a time to the pool
    furthest below its weighted share that still wants more."""
    if room is None or sum(wanted.values()) <= room:
        return dict(wanted)
    given = {name: min(wanted[name], minimum.get(name, 1)) for name in wanted}
    left = room - sum(given.values())
    while left > 0:
        hungry = [n for n in wanted if given[n] < wanted[n]]
        if not hungry:
            break
        pick = min(hungry, key=lambda n: (given[n] / max(weights.get(n, 1), 1), n))
        given[pick] += 1
        left -= 1
    return given
