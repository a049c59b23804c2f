"""A pool's last whole claim from the head: shared memory its children write and read.

While an xmin horizon is held, a claim from the head walks every dead entry the hold keeps at
the head of the claim index (child/cursors.py), and each child made its own: with three
children at 3,000 jobs/s, three walks of a second each every ten seconds half an hour into a
hold, the server's CPU they took the pickup's p99 with them. But a claim from the head that came
back with fewer jobs than it asked for, no limit holding one back, took every job waiting in the
pool's queues when it began; any sibling's claim from the head begun earlier would have found
nothing it did not. So each child writes here when its claim began and what its walk cost, and
a sibling counts its next one from that. And a child whose claim from the head is due while a
sibling's is under way (begun, not yet answered) waits for that one's answer, a few walks at
most, instead of walking beside it. So a pool walks the dead entries about once where each of
its children did.

Created by the master for each pool (its PoolRuntime) before it forks the pool's children, as
the boards are (an anonymous MAP_SHARED mapping is shared across fork). Three 8-byte words, each
written whole, by any child: a reader may see one child's start beside another's walk, both
true of a whole claim from the head, and refuses a start later than its own clock or a walk out
of bounds (child/cursors.py); two children that begin at the same moment both walk, as before.
"""

from __future__ import annotations

import mmap

# time.monotonic() (the host's clock, the same in every process) at a claim's send.
_STARTED = 0  # the last whole claim from the head's
_WALK = 1  # seconds its walk is believed to have cost
_BEGUN = 2  # the last claim from the head sent, answered or not


class HeadWalks:
    def __init__(self) -> None:
        self._map = mmap.mmap(-1, 3 * 8)
        self._d = memoryview(self._map).cast("d")

    def record(self, started: float, walk: float) -> None:
        """A child's claim from the head, begun at ``started``, took every job it found."""
        if started > self._d[_STARTED]:
            self._d[_WALK] = walk
            self._d[_STARTED] = started

    def begin(self, now: float) -> None:
        """A child sends a claim from the head."""
        self._d[_BEGUN] = now

    def begun(self) -> float:
        """When the pool's last claim from the head was sent (0.0 before the first)."""
        return self._d[_BEGUN]

    def last(self) -> tuple[float, float]:
        """When the pool's last whole claim from the head began, and what its walk cost (0.0,
        0.0 before the first)."""
        return self._d[_STARTED], self._d[_WALK]
