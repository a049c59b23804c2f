"""heap_frozen_for_fork: a real fork, the child's and the parent's collectors looked at."""

from __future__ import annotations

import gc
import os
import weakref

import pytest

from supervisor.shared.forking import heap_frozen_for_fork


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def _frozen_in_child() -> int:
    """The child's count of frozen objects, sent back through a pipe."""
    r, w = os.pipe()
    with heap_frozen_for_fork():
        pid = os.fork()
    if pid == 0:
        try:
            os.write(w, str(gc.get_freeze_count()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as pipe:
        frozen = int(pipe.read())
    os.waitpid(pid, 0)
    return frozen


def test_the_child_starts_with_the_parents_objects_frozen() -> None:
    before = len(gc.get_objects())
    frozen = _frozen_in_child()
    # Everything the parent had tracked (this test process: pytest, the supervisor package).
    assert frozen >= before // 2 > 1000


def test_the_parent_leaves_with_nothing_frozen_and_collects_its_cycles() -> None:
    node = _Node()
    gone = weakref.ref(node)
    del node  # garbage from before the fork, in the parent
    _frozen_in_child()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert gone() is None  # frozen for good, the parent would keep it


def test_the_parent_thaws_when_the_fork_fails() -> None:
    with pytest.raises(OSError), heap_frozen_for_fork():
        raise OSError("fork: resource temporarily unavailable")
    assert gc.get_freeze_count() == 0
