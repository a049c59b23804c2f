"""A child process: claim -> run -> write outcomes, for one pool, until told to stop.

Forked by the master (supervisor.master.children), it builds its parts (supervisor.child.parts)
after the fork and runs the inline loop (one thread) or the threaded one. It leaves with
os._exit, so nothing inherited from the master (atexit hooks, buffered files, the master's
connection objects) runs or is closed in the child.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import NoReturn

from supervisor.child.executor import Orphaned
from supervisor.child.inline import InlineLoop
from supervisor.child.parts import Parts
from supervisor.child.session import BootFailure
from supervisor.child.spec import ChildSpec
from supervisor.child.threaded import ThreadedLoop
from supervisor.queue import outcomes
from supervisor.shared.exits import ChildExit

log = logging.getLogger("pgq.worker")


def child_main(make_spec: Callable[[], ChildSpec], close_fds: tuple[int, ...] = ()) -> NoReturn:
    """Everything the child runs from the fork on: whatever happens (building its spec
    included), it leaves through os._exit, never by unwinding into the master's loop."""
    code = ChildExit.CRASHED
    try:
        for fd in close_fds:
            os.close(fd)
        code = Worker(make_spec()).run()
    except BaseException:
        with contextlib.suppress(BaseException):
            log.exception("a child crashed before its worker loop began")
    finally:
        for stream in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


class Worker:
    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.parts = Parts(spec)

    def run(self) -> int:
        try:
            return self._run()
        finally:
            self.parts.executor.close()  # the last spans must not die with the child

    def _run(self) -> int:
        parts = self.parts
        process, label, extra = parts.process, parts.process.label, {"pool": parts.pool.name}
        try:
            process.after_fork()
            if not parts.session.connect():
                return ChildExit.DRAINED
            parts.board.set_ready()
            process.report(b"R")
            loop = InlineLoop(parts) if parts.pool.threads == 1 else ThreadedLoop(parts)
            code = loop.run()
            # The master died while no handler code ran (no Orphaned raised): leave as orphans do.
            return self.leave_orphaned() if process.orphaned else code
        except BootFailure as exc:
            log.error("%s could not boot: %s", label, exc, extra=extra)
            return ChildExit.BOOT_FAILED
        except Orphaned:
            return self.leave_orphaned()
        except Exception:
            log.exception("%s crashed in its worker loop", label, extra=extra)
            return ChildExit.CRASHED

    def leave_orphaned(self) -> int:
        """The master is gone: give back what we hold and leave, taking our subprocesses."""
        parts = self.parts
        log.warning(
            "%s: the master (pid %s) died; giving back jobs and stopping",
            parts.process.label,
            self.spec.master_pid,
            extra={"pool": parts.pool.name},
        )
        if parts.in_hand is not None:
            parts.completer.add(
                parts.in_hand,
                outcomes.retry(
                    parts.in_hand, 0, "interrupted: the supervisor died while this job ran"
                ),
            )
        parts.release_unstarted()
        if parts.session.conn is not None:
            parts.completer.flush()
        parts.process.leave_group()
        return ChildExit.ORPHANED
