"""Which child of a pool walks from the head now: shared memory its children write and read.

While an xmin horizon is held, a claim from the head walks every dead entry the hold keeps at
the head of the claim index (child/cursors.py): a tenth of each child's time at most, hundreds
of milliseconds a walk within minutes. Each child keeps its own cadence, so with three children
two of them walked at once about 3% of the time (three pairs, each a hundredth), and then one
child took the whole offered rate, with the walks' CPU beside it: the slowest hundredth of
pickups were jobs claimed in order, late for everyone together (stalls, not jobs passed over by
a cursor; scripts/benchmarks/steady_latency.py's tail), as long as half a walk. So a child whose
claim from the head is due while a sibling's is under way makes its claim from its cursors, and
walks once the sibling's answer came: the pool's walks take turns, and the rest of the pool
claims meanwhile. Sharing the walks themselves (one for the pool) was tried and reverted
(docs/benchmarks.md): it stretched the wait of a job that only the head finds.

Created by the master for each pool (its PoolRuntime) before it forks the pool's children, as
the boards are (an anonymous MAP_SHARED mapping is shared across fork). Two 8-byte words, each
written whole: the walker (a pid) and when its walk is believed over (time.monotonic(), the
same clock in every process). Not a lock: two children that look at the same moment may both
walk, as before, and a walker that died or took longer than it announced stops being waited
for at the time it announced.
"""

from __future__ import annotations

import mmap

_WALKER = 0
_UNTIL = 1


class HeadWalks:
    def __init__(self) -> None:
        self._map = mmap.mmap(-1, 2 * 8)
        self._d = memoryview(self._map).cast("d")

    def begin(self, walker: int, until: float) -> None:
        """``walker`` sends a claim from the head, believed answered by ``until``."""
        self._d[_UNTIL] = 0.0  # never a moment where the new walker's pid has the old time
        self._d[_WALKER] = float(walker)
        self._d[_UNTIL] = until

    def end(self, walker: int) -> None:
        """``walker``'s claim from the head was answered (or will not be)."""
        if self._d[_WALKER] == float(walker):
            self._d[_UNTIL] = 0.0

    def sibling_until(self, walker: int, now: float) -> float | None:
        """When a sibling's claim from the head under way is believed answered (None: no
        sibling's is under way at ``now``)."""
        until = self._d[_UNTIL]
        if until <= now or self._d[_WALKER] == float(walker):
            return None
        return until
