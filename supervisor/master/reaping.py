"""The master's side of a child's end: reaping it, giving back its jobs, stopping it.

A child that died is reaped at once (``waitpid(-1, WNOHANG)`` in a loop), its status decoded
into a named reason, its jobs handed to the requeue (which of them spend their attempt is read
from its board), its leftover processes killed and its slot told. Stopping a child is TERM to
its process group, then KILL once its grace ran out. A part of Master (supervisor.master.loop).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from typing import TYPE_CHECKING

from supervisor.master.children import Child
from supervisor.services.requeue import PendingRequeue, Requeuer
from supervisor.shared.exits import ChildExit, ExitReason, MasterExit

if TYPE_CHECKING:
    import selectors

    from supervisor.master.pools import PoolRuntime
    from supervisor.observability.metrics import MetricsServer
    from supervisor.observability.view import MasterCounters

log = logging.getLogger("pgq.master")

# How long a child told to stop (timeout, hard memory limit) gets before SIGKILL.
KILL_GRACE = 5.0
# Consecutive failed boots of every slot of a pool that make the master give up (exit 3).
BOOT_FAILURE_LIMIT = 5
# Recycles by the child's own decision; "hard" (killed above the hard memory limit) is counted
# by MemoryWatch when it decides the kill.
RECYCLE_KINDS: dict[ChildExit | None, str] = {
    ChildExit.MEMORY_RECYCLE: "soft",
    ChildExit.MAX_JOBS_RECYCLE: "max_jobs",
}


class Reaping:
    children: dict[int, Child]
    pools: dict[str, PoolRuntime]
    requeuer: Requeuer
    counters: MasterCounters
    metrics: MetricsServer | None
    selector: selectors.BaseSelector
    stopping: bool
    exit_code: int
    # ... and the Master's begin_stop, slot_of and handle_report.

    def reap_children(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is not None:
                self.child_exited(child, ExitReason.from_status(status))

    def child_exited(self, child: Child, reason: ExitReason) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(child.report_fd)
        what = reason.describe(killed_by_master=child.kill_reason is not None)
        if child.kill_reason:
            what += f" after being stopped: {child.kill_reason}"
        label = f"{child.pool}#{child.slot} (pid {child.pid})"
        extra = {"pool": child.pool}
        if reason.clean:
            log.info("%s %s", label, what, extra=extra)
            recycled = RECYCLE_KINDS.get(reason.child_exit)
            if recycled is not None:
                self.counters.recycle(child.pool, recycled)
            # A drained child holds nothing it knows of, but it may hold a claim it never heard
            # of (the connection died as the claim committed) or an outcome the database
            # refused: nobody renews those leases now, so give them back at once.
            self.requeuer.add(
                PendingRequeue(
                    child.worker_id,
                    f"worker {label} {what} still holding it",
                    child.pool,
                    unrecorded=child.board.unrecorded(),
                )
            )
        else:
            log.error("%s %s", label, what, extra=extra)
            spent, interrupted = self.charged_jobs(child)
            self.requeuer.add(
                PendingRequeue(
                    child.worker_id,
                    f"worker {label} {what}",
                    child.pool,
                    spent,
                    interrupted,
                    child.board.unrecorded(),
                )
            )
        self.kill_leftovers(child, label)
        if self.metrics is not None:
            self.metrics.absorb(child.pool, child.board)
        slot = self.slot_of(child)
        if slot is not None and (self.stopping or slot.retired):
            slot.child = None  # its board is closed below; nothing may read it through the slot
        elif slot is not None:
            self.counters.restart(child.pool, reason.metric_label)
            delay = slot.child_exited(child, reason)
            if slot.failed_boots:
                self.check_boot_loop(child.pool)
            if delay > 0:
                log.warning("restarting %s#%s in %.1fs", slot.pool, slot.index, delay, extra=extra)
        self.handle_report(child)  # its last words: a sibling to wake, retries to stage
        child.close()

    def charged_jobs(self, child: Child) -> tuple[list[int], list[int]]:
        """Which of a dead child's running jobs spend their attempt, and which were only
        interrupted. Any of them may have crashed it; but when the master stopped it because
        jobs ran past their timeout, those are the culprits and their siblings get their
        attempt back."""
        running = child.board.running_jobs()
        now = time.monotonic()
        late = [j.job_id for j in running if j.deadline is not None and now >= j.deadline]
        if child.kill_reason is None or not late:
            return [j.job_id for j in running], []
        return late, [j.job_id for j in running if j.job_id not in late]

    def kill_leftovers(self, child: Child, label: str) -> None:
        """Nothing outlives its child: a handler's subprocess still in the child's process
        group (it ignored the TERM of a timeout kill, or its parent was SIGKILLed) would run on
        with nobody left to stop it. The group's id cannot be reused while a member lives."""
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        log.warning(
            "%s left processes behind in its process group; killed them",
            label,
            extra={"pool": child.pool},
        )

    def check_boot_loop(self, pool: str) -> None:
        runtime = self.pools[pool]
        if all(s.failed_boots >= BOOT_FAILURE_LIMIT for s in runtime.slots):
            last = runtime.slots[-1].last_failure
            log.critical(
                "pool %s cannot boot: every one of its %d children failed to start %d times "
                "in a row (last: %s); stopping with exit code %d",
                pool,
                len(runtime.slots),
                BOOT_FAILURE_LIMIT,
                last,
                MasterExit.BOOT_FAILED,
                extra={"pool": pool},
            )
            self.exit_code = MasterExit.BOOT_FAILED
            self.begin_stop(f"pool {pool} crash loop")

    def kill_child(self, child: Child, reason: str) -> None:
        """Stop a child now: TERM its process group, KILL it after a grace period."""
        if child.kill_reason:
            return
        child.kill_reason = reason
        child.kill_by(time.monotonic() + KILL_GRACE, KILL_GRACE)
        log.warning(
            "stopping %s#%s (pid %s): %s",
            child.pool,
            child.slot,
            child.pid,
            reason,
            extra={"pool": child.pool},
        )
        child.signal_group(signal.SIGTERM)

    def escalate_kills(self) -> None:
        now = time.monotonic()
        for child in self.children.values():
            if child.kill_at is not None and now >= child.kill_at:
                log.error(
                    "%s#%s (pid %s) did not stop within %.0fs; killing its process group",
                    child.pool,
                    child.slot,
                    child.pid,
                    child.kill_grace,
                    extra={"pool": child.pool},
                )
                if child.kill_reason is None:
                    child.kill_reason = f"still running {child.kill_grace:.0f}s after a reload"
                child.signal_group(signal.SIGKILL)
                child.kill_at = None
