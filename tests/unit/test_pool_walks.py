"""Each pool's children share one record of who walks from the head (shared/head_walks.py):
the master's PoolRuntime hands it to every child it forks, through spawn and the child's spec.
The records of two pools are apart: their children claim other queues."""

from __future__ import annotations

import os
import traceback
from typing import NoReturn

import pytest

from supervisor.child.spec import ChildSpec
from supervisor.config import parse_config
from supervisor.master import children
from supervisor.master.loop import Master

YAML = """
handlers: {k: tests.handlers:noop}
pools:
  pdf: {processes: 2, queues: {pdf: 1}}
  hooks: {processes: 1, queues: {hooks: 1}}
"""
# What each forked child announces as its walk's end: its pool's number and its slot.
UNTIL = {("pdf", 1): 1001.0, ("pdf", 2): 1002.0, ("hooks", 1): 2001.0}


def test_a_pools_children_share_its_record_and_pools_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = parse_config(YAML, source="queues.yaml")
    master = Master(config, {}, "postgresql://nobody@127.0.0.1:1/none")
    master.pools = {name: master.new_pool_runtime(p) for name, p in config.pools.items()}

    def announce(make_spec: object, close_fds: tuple[int, ...] = ()) -> NoReturn:
        """The forked child: builds its spec as a real one does, then announces a walk in the
        record the spec carries (instead of claiming)."""
        code = 1
        try:
            spec = make_spec()  # type: ignore[operator]
            assert isinstance(spec, ChildSpec) and spec.head_walks is not None
            spec.head_walks.begin(os.getpid(), UNTIL[(spec.pool.name, spec.slot)])
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)

    monkeypatch.setattr(children, "child_main", announce)
    monkeypatch.setattr(master, "inherited_fds", list)  # no signal pipe: the loop never ran
    try:
        seen = {}
        for name, runtime in master.pools.items():
            for slot in runtime.slots:
                master.spawn_into(runtime, slot)
                assert slot.child is not None
                _, status = os.waitpid(slot.child.pid, 0)
                assert os.waitstatus_to_exitcode(status) == 0
                # The child's walk is seen through its pool's record, as a sibling's.
                seen[(name, slot.index)] = runtime.head_walks.sibling_until(os.getpid(), 0.0)
        assert seen == UNTIL
        # Each pool's record kept its own last walker: hooks' child did not overwrite pdf's.
        last = {
            name: r.head_walks.sibling_until(os.getpid(), 0.0) for name, r in master.pools.items()
        }
        assert last == {"pdf": UNTIL[("pdf", 2)], "hooks": UNTIL[("hooks", 1)]}
    finally:
        for runtime in master.pools.values():
            for slot in runtime.slots:
                if slot.child is not None:
                    os.close(slot.child.wake_fd)
                    os.close(slot.child.report_fd)
        master.selector.close()
