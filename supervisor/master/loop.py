"""The master: one single-threaded loop that keeps every pool's children alive and healthy.

Each turn of the loop does the same things in the same order (gunicorn's arbiter is the model):
handle the signals that arrived, reap children that died, read what children reported, pass on
job notifications, run the periodic services that are due, escalate kills whose grace ran out,
refill empty slots, then sleep until a signal, a child, the database or a timer wakes it.
Signal handlers only record the signal (through the wake-up pipe); everything else happens here.
No threads: forking a threaded process can deadlock the child.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import selectors
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from supervisor.master.children import Child, Slot, host_identity, spawn
from supervisor.observability.view import ChildView, MasterCounters, MasterView, PoolView
from supervisor.services.base import (
    CancelWatch,
    LeaseRenewal,
    MemoryWatch,
    PendingRequeue,
    Registry,
    Requeuer,
    Service,
    TimeoutWatch,
)
from supervisor.services.database import MasterDatabase
from supervisor.services.pending import Readable
from supervisor.services.purge import Purger
from supervisor.services.rescuer import Rescuer
from supervisor.services.scheduler import Scheduler
from supervisor.services.stager import Stager
from supervisor.services.vacuum import QueueVacuum
from supervisor.shared import proctitle
from supervisor.shared.board import State
from supervisor.shared.exits import ChildExit, ExitReason, MasterExit

if TYPE_CHECKING:
    from supervisor.config import Config, PoolConfig
    from supervisor.config.handlers import Handler
    from supervisor.observability.metrics import MetricsServer

log = logging.getLogger("pgq.master")

# How long a child told to stop (timeout, hard memory limit) gets before SIGKILL.
KILL_GRACE = 5.0
# Consecutive failed boots of every slot of a pool that make the master give up (exit 3).
BOOT_FAILURE_LIMIT = 5
NOTIFY_CHANNEL = "pgq_jobs"
# A turn of the loop busy this long is logged: everything the master does waited behind it.
SLOW_TURN = 1.0
NOTABLE_TURN = 0.05  # logged at debug level, with the step that took longest
# Due services run in a turn until they have taken this long; the rest run at the next turn.
SERVICES_BUDGET = 0.015
# Jobs were scheduled for later: the stager reads the earliest run_at again.
SCHEDULED_CHANNEL = "pgq_scheduled"
# How often the master looks for cancel requests on its children's jobs: a cancelled running
# job stops within about this long (one probe of an index that is almost always empty).
CANCEL_CHECK_EVERY = 1.0
# Recycles by the child's own decision; "hard" (killed above the hard memory limit) is counted
# by MemoryWatch when it decides the kill.
RECYCLE_KINDS: dict[ChildExit | None, str] = {
    ChildExit.MEMORY_RECYCLE: "soft",
    ChildExit.MAX_JOBS_RECYCLE: "max_jobs",
}


@dataclass
class PoolRuntime:
    config: PoolConfig
    generation: int
    slots: list[Slot]


class Master:
    def __init__(
        self,
        config: Config,
        handlers: dict[str, Handler],
        dsn: str,
        *,
        metrics: MetricsServer | None = None,
    ) -> None:
        self.config = config
        self.handlers = handlers
        self.kinds = sorted(handlers)
        self.dsn = dsn
        # Fixed for the master's life: a reload does not rename a running supervisor.
        self.host_name = host_identity(config)
        self.supervisor_id = f"{self.host_name}:{os.getpid()}:{secrets.token_hex(4)}"
        self.db = MasterDatabase(
            dsn,
            name="master",
            connect_timeout=config.database.connect_timeout,
            pooled=config.database.pooled,
        )
        # LISTEN needs a session of its own: never through a transaction pooler. Without a
        # listen_dsn there, no listener at all: idle children poll.
        listen_dsn = config.database.wakeup_dsn(dsn)
        self.listener = (
            MasterDatabase(
                listen_dsn,
                name="listener",
                connect_timeout=config.database.connect_timeout,
                on_connect=lambda conn: conn.execute(
                    f"LISTEN {NOTIFY_CHANNEL}; LISTEN {SCHEDULED_CHANNEL}"
                ),
            )
            if listen_dsn is not None
            else None
        )
        self.listener_fd: int | None = None
        self.metrics = metrics
        self.counters = MasterCounters()
        self.pools: dict[str, PoolRuntime] = {}
        self.children: dict[int, Child] = {}
        self.generation = 0
        self.stopping = False
        self.stop_deadline: float | None = None
        self.exit_code = MasterExit.OK
        self.selector = selectors.DefaultSelector()
        self.requeuer = Requeuer(self, interval=1.0)
        self.purger = Purger(self)
        interval = config.rescue.interval
        self.rescuer = Rescuer(self, interval, first_in=min(5.0, interval))
        self.vacuum = QueueVacuum(self, self.selector)
        self.stager = Stager(self)
        self.services: list[Service] = []
        self.metrics_services: list[Service] = []
        self.title = ""
        self.waited = 0.0  # seconds the current step spent waiting in select
        self.slowest_service = ""  # the service that took longest in this turn, for the log

    # -- the loop ----------------------------------------------------------------------------

    def run(self) -> int:
        self.start()
        try:
            while not (self.stopping and not self.children):
                self.turn()
        finally:
            self.finish()
        return self.exit_code

    def turn(self) -> None:
        """One turn of the loop. A bug in one step is logged and the loop goes on: the master
        owns the children's liveness and must outlive its own mistakes."""
        steps = [
            self.handle_signals,
            self.reap_children,
            self.handle_notifications,
            self.run_due_services,
            self.escalate_kills,
            self.tend_slots,
            self.update_title,
            self.sleep,
        ]
        self.waited = 0.0
        busy, slowest, slowest_took = 0.0, "", 0.0
        for step in steps:
            started = time.monotonic()
            try:
                step()
            except Exception:
                log.exception("master: %s failed; carrying on", step.__name__)
                time.sleep(0.1)  # never spin on a step that keeps failing
            took = time.monotonic() - started - self.waited
            self.waited = 0.0
            busy += took
            if took > slowest_took:
                slowest, slowest_took = step.__name__, took
                if step == self.run_due_services:  # which service: the step runs many
                    slowest += f" {self.slowest_service}"
        self.counters.turn(busy)
        if busy >= NOTABLE_TURN:
            log.debug("master: a turn took %.3fs (%s: %.3fs)", busy, slowest, slowest_took)
        if busy >= SLOW_TURN:
            log.warning(
                "master: one turn of the loop took %.2fs (%s: %.2fs); lease renewal, reaping "
                "and signals waited that long",
                busy,
                slowest,
                slowest_took,
            )

    def start(self) -> None:
        self.update_title()
        self._signal_r, self._signal_w = os.pipe()
        for fd in (self._signal_r, self._signal_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(self._signal_w)
        for signum in (
            signal.SIGTERM,
            signal.SIGINT,
            signal.SIGHUP,
            signal.SIGCHLD,
            signal.SIGQUIT,
        ):
            signal.signal(signum, _record_only)
        self.selector.register(self._signal_r, selectors.EVENT_READ, "signals")
        if self.metrics is not None:
            from supervisor.services.metrics_feed import metrics_services

            self.metrics.attach(self.metrics_view, self.selector)
            # Made once: a reload must not orphan a count in flight on the stats session.
            self.metrics_services = metrics_services(self, self.metrics, self.selector)
        self.build_services()
        for name, pool in self.config.pools.items():
            self.pools[name] = self.new_pool_runtime(pool)
        log.info(
            "supervisor %s started: %d pools, %d children, config %s",
            self.supervisor_id,
            len(self.pools),
            sum(p.processes for p in self.config.pools.values()),
            self.config.path,
        )
        if self.listener is None:
            log.info(
                "wake-ups: no LISTEN through a transaction pooler and no database.listen_dsn; "
                "idle children poll every poll_interval"
            )

    def build_services(self) -> None:
        config = self.config
        if not self.purger.running:  # purge.at may have changed; a run in progress goes on
            self.purger.next_due = self.purger.next_run(time.monotonic())
        self.rescuer.interval = config.rescue.interval  # kept, like a rescue under way
        self.services = [
            LeaseRenewal(self, config.lease.renew_every, first_in=config.lease.renew_every),
            self.rescuer,
            self.purger,
            MemoryWatch(self, 2.0),
            TimeoutWatch(self, 0.25),
            CancelWatch(self, CANCEL_CHECK_EVERY),
            Registry(self, 5.0),
            self.requeuer,
            self.stager,
            Scheduler(self),
        ]
        self.vacuum.configure(config.vacuum)
        if config.vacuum.enabled:
            self.services.append(self.vacuum)
        self.services.extend(self.metrics_services)
        if config.history.enabled:
            from supervisor.queue.maintenance import ensure_history_partitions

            self.db.run("history partitions", ensure_history_partitions)

    def new_pool_runtime(self, pool: PoolConfig) -> PoolRuntime:
        self.generation += 1
        return PoolRuntime(
            pool, self.generation, [Slot(pool.name, i + 1) for i in range(pool.processes)]
        )

    # -- signals -----------------------------------------------------------------------------

    def handle_signals(self) -> None:
        try:
            received = os.read(self._signal_r, 4096)
        except BlockingIOError:
            return
        for signum in received:
            if signum in (signal.SIGTERM, signal.SIGINT):
                self.begin_stop(signal.Signals(signum).name)
            elif signum == signal.SIGQUIT:
                self.stop_now("SIGQUIT")
            elif signum == signal.SIGHUP:
                self.reload()
            # SIGCHLD needs nothing: reap_children runs every turn.

    # -- children ------------------------------------------------------------------------------

    def live_children(self) -> list[Child]:
        return list(self.children.values())

    def metrics_view(self) -> MasterView:
        """What a scrape may know of this master, built afresh for each one."""
        pools = {
            name: PoolView(
                processes=len(runtime.slots),
                ready=sum(1 for s in runtime.slots if s.child is not None and s.child.ready()),
                queues=tuple(runtime.config.queues),
            )
            for name, runtime in self.pools.items()
        }
        children = tuple(ChildView(c.pool, c.board, c.ready()) for c in self.children.values())
        return MasterView(pools, children, self.counters, self.db.reachable, self.stopping)

    def side_sessions(self) -> list[Readable]:
        """The master's connections that carry statements it does not wait for."""
        return [self.vacuum, *(s for s in self.metrics_services if isinstance(s, Readable))]

    def inherited_fds(self) -> list[int]:
        """Descriptors a new child must close at once: nothing of the master's may be used
        (or closed through libpq) on the child's side of the fork."""
        fds = [self._signal_r, self._signal_w]
        with contextlib.suppress(Exception):
            fds.append(self.selector.fileno())  # type: ignore[attr-defined]
        for db in (self.db, self.listener, *self.side_sessions()):
            fd = db.fileno() if db is not None else None
            if fd is not None:
                fds.append(fd)
        for child in self.children.values():
            fds.extend((child.wake_fd, child.report_fd))
        if self.metrics is not None:
            fds.extend(self.metrics.filenos())
        return fds

    def tend_slots(self) -> None:
        """Refill empty slots; while stopping, only enforce the deadline. Decided when the step
        runs, not when the turn begins: a SIGTERM handled earlier in this turn must not be
        followed by a fresh child in the slot its drained child just left."""
        if self.stopping:
            self.enforce_stop_deadline()
        else:
            self.refill_slots()

    def refill_slots(self) -> None:
        """One fork per turn: a fork copies the master's page tables and costs milliseconds,
        and a pool of many children forked in one turn would hold the loop for all of them.
        The next empty slot is due still, so the next turn follows at once."""
        now = time.monotonic()
        for runtime in self.pools.values():
            for slot in runtime.slots:
                if slot.child is None and now >= slot.next_spawn:
                    self.spawn_into(runtime, slot)
                    return

    def spawn_into(self, runtime: PoolRuntime, slot: Slot) -> None:
        try:
            child = spawn(
                config=self.config,
                pool=runtime.config,
                slot=slot.index,
                generation=runtime.generation,
                host=self.host_name,
                dsn=self.dsn,
                handlers=self.handlers,
                kinds=self.kinds,
                inherited_fds=self.inherited_fds,
            )
        except OSError as exc:
            log.error(
                "cannot fork a child for %s#%s: %s; retrying in 1s", slot.pool, slot.index, exc
            )
            slot.next_spawn = time.monotonic() + 1.0
            return
        slot.child = child
        self.children[child.pid] = child
        self.selector.register(child.report_fd, selectors.EVENT_READ, child)
        log.info(
            "spawned %s#%s (pid %s)", slot.pool, slot.index, child.pid, extra={"pool": slot.pool}
        )

    def slot_of(self, child: Child) -> Slot | None:
        runtime = self.pools.get(child.pool)
        if runtime is None or runtime.generation != child.generation:
            return None  # retired by a reload
        slot = runtime.slots[child.slot - 1]
        return slot if slot.child is child else None

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
        if slot is not None and self.stopping:
            slot.child = None  # its board is closed below; nothing may read it through the slot
        elif slot is not None:
            self.counters.restart(child.pool, reason.metric_label)
            delay = slot.child_exited(child, reason)
            if slot.failed_boots:
                self.check_boot_loop(child.pool)
            if delay > 0:
                log.warning("restarting %s#%s in %.1fs", slot.pool, slot.index, delay, extra=extra)
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

    def read_child_report(self, child: Child) -> None:
        try:
            data = os.read(child.report_fd, 4096)
        except (BlockingIOError, OSError):
            return
        if b"M" in data:
            self.wake_idle(child.pool, exclude=child)
        if b"S" in data:
            self.stager.soon()

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

    # -- wake-ups ------------------------------------------------------------------------------

    def handle_notifications(self) -> None:
        if self.listener is None:
            return  # polling only: a transaction pooler and no listen_dsn
        conn = self.listener.connection()
        fd = conn.fileno() if conn is not None else None
        if fd != self.listener_fd:
            if self.listener_fd is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self.selector.unregister(self.listener_fd)
            if fd is not None:
                self.selector.register(fd, selectors.EVENT_READ, "listener")
            self.listener_fd = fd

    def read_notifications(self) -> None:
        if self.listener is None:
            return
        notifies = self.listener.run("listen", lambda conn: list(conn.notifies(timeout=0)))
        # The stager and the scheduler wake this host's children themselves, without waiting
        # for their NOTIFY to come back round (it is for the other hosts).
        own = self.db.backend_pid()
        queues = []
        for n in notifies or []:
            if n.channel == SCHEDULED_CHANNEL:
                self.stager.soon()
            elif n.pid != own:
                queues.append(n.payload)
        for queue in dict.fromkeys(queues):
            self.wake_queue(queue)

    def wake_queue(self, queue: str) -> None:
        """Wake one child of every pool that serves ``queue``: it has jobs due now."""
        for runtime in self.pools.values():
            if queue in runtime.config.queues:
                self.wake_idle(runtime.config.name, queue=queue)

    def wake_idle(
        self, pool: str, *, exclude: Child | None = None, queue: str | None = None
    ) -> None:
        """Wake one child of the pool that can take the work, telling it which queue has it.

        An idle child first. Then one that is claiming: its claim may have looked before this
        job committed, and it would then sleep a whole poll interval with the job waiting; the
        byte left in its pipe sends it straight back to claim. Then a threaded child with a
        free thread, which otherwise waits for a running job to end. Single-threaded running
        children claim when their batch is done, and connecting ones once connected.
        """
        runtime = self.pools.get(pool)
        if runtime is None:
            return
        queues = list(runtime.config.queues)
        hint = queues.index(queue) + 1 if queue in queues else 0
        threads = runtime.config.threads
        children = [s.child for s in runtime.slots if s.child not in (None, exclude)]
        preferences: list[Callable[[Child], bool]] = [
            lambda c: c.board.state == State.IDLE,
            lambda c: c.board.state == State.CLAIMING,
            lambda c: (
                threads > 1
                and c.board.state == State.RUNNING
                and len(c.board.running_jobs()) < threads
            ),
        ]
        for can_take in preferences:
            for child in children:
                if can_take(child):
                    child.wake(hint)
                    return

    # -- services, reload, stop ----------------------------------------------------------------

    def run_due_services(self) -> None:
        """The due services, longest overdue first, until the turn has spent SERVICES_BUDGET
        on them; the others stay due and run at the next turn, which follows at once after
        signals and reaping. Many services falling due together (at start, after a database
        outage, beside a purge slice) thus never pile up into one long turn, and the order by
        due time keeps a service that is due every turn (a purge under way) from starving the
        ones after it."""
        now = time.monotonic()
        due = sorted((s for s in self.services if s.due(now)), key=lambda s: s.next_due)
        self.slowest_service, slowest = "", 0.0
        for service in due:
            started = time.monotonic()
            if started - now >= SERVICES_BUDGET:
                return
            service.run(now)
            if time.monotonic() - started > slowest:
                self.slowest_service, slowest = service.name, time.monotonic() - started

    def reload(self) -> None:
        from supervisor.config import ConfigError, load_config
        from supervisor.config.handlers import load_handlers

        log.info("SIGHUP: reloading %s", self.config.path)
        try:
            new = load_config(self.config.path)
            handlers = load_handlers(new)
        except ConfigError as exc:
            log.error("reload rejected, keeping the running configuration: %s", exc)
            return
        if new.database != self.config.database:
            log.warning("reload: database settings changed; they apply at the next restart")
            new = replace(new, database=self.config.database)
        if new.metrics != self.config.metrics:
            log.warning("reload: metrics settings changed; they apply at the next restart")
        shared_changed = (
            {k: h.target for k, h in handlers.items()}
            != {k: h.target for k, h in self.handlers.items()}
            or new.jobs != self.config.jobs
            or new.lease != self.config.lease
            or new.history != self.config.history
        )
        old_pools = self.pools
        self.config, self.handlers, self.kinds = new, handlers, sorted(handlers)
        self.pools = {}
        for name, pool in new.pools.items():
            runtime = old_pools.pop(name, None)
            if runtime is not None and runtime.config == pool and not shared_changed:
                self.pools[name] = runtime
                continue
            self.pools[name] = self.new_pool_runtime(pool)
            if runtime is not None:
                old_pools[name] = runtime
            log.info("reload: pool %s %s", name, "changed" if runtime else "added")
        # Retired children drain under the same deadline as a stop: one waiting out a
        # database outage, or running a job that never ends, must not outlive the reload.
        grace = self.config.shutdown_timeout
        for name, runtime in old_pools.items():
            for slot in runtime.slots:
                if slot.child is not None:
                    slot.child.draining = True
                    slot.child.kill_by(time.monotonic() + grace, grace)
                    slot.child.signal(signal.SIGTERM)
            if name not in new.pools:
                log.info("reload: pool %s removed", name)
        self.build_services()

    def begin_stop(self, why: str) -> None:
        if self.stopping:
            self.stop_now(f"second {why}")
            return
        self.stopping = True
        self.stop_deadline = time.monotonic() + self.config.shutdown_timeout
        log.info(
            "%s: draining %d children (up to %.0fs)",
            why,
            len(self.children),
            self.config.shutdown_timeout,
        )
        for child in self.children.values():
            child.draining = True
            child.signal(signal.SIGTERM)

    def stop_now(self, why: str) -> None:
        self.stopping = True
        self.stop_deadline = time.monotonic()
        log.warning("%s: stopping now; killing %d children", why, len(self.children))
        self.enforce_stop_deadline()

    def enforce_stop_deadline(self) -> None:
        if self.stop_deadline is None or time.monotonic() < self.stop_deadline:
            return
        for child in self.children.values():
            if child.kill_reason is None:
                child.kill_reason = "still running at the end of the shutdown timeout"
                child.signal_group(signal.SIGKILL)
        self.stop_deadline = None

    def finish(self) -> None:
        """After the last child: give back what is still held, say goodbye, close up."""
        deadline = time.monotonic() + 5.0
        while self.requeuer.pending and time.monotonic() < deadline:
            self.requeuer.run_once()
            if self.requeuer.pending:
                time.sleep(0.5)
        if self.requeuer.pending:
            log.error(
                "could not requeue the jobs of %d stopped workers (database unreachable); "
                "the rescuer will return them when their leases expire",
                len(self.requeuer.pending),
            )
        from supervisor.services import registry

        self.db.run("unregister", lambda conn: registry.unregister(conn, self.supervisor_id))
        for session in self.side_sessions():
            session.close()
        self.db.close()
        if self.listener is not None:
            self.listener.close()
        if self.metrics is not None:
            self.metrics.close()
        signal.set_wakeup_fd(-1)
        log.info("supervisor stopped (exit code %d)", self.exit_code)

    # -- sleeping --------------------------------------------------------------------------------

    def update_title(self) -> None:
        state = "stopping" if self.stopping else "running"
        title = proctitle.master_title(self.config.path, len(self.children), state)
        if title != self.title:  # every turn of the loop would rewrite it otherwise
            proctitle.set_title(title)
            self.title = title

    def sleep(self) -> None:
        now = time.monotonic()
        wake_at = [s.next_due for s in self.services]
        if not self.stopping:  # a stopping master refills nothing: a past spawn time would spin
            wake_at += [
                slot.next_spawn
                for rt in self.pools.values()
                for slot in rt.slots
                if slot.child is None
            ]
        wake_at += [c.kill_at for c in self.children.values() if c.kill_at is not None]
        if self.stop_deadline is not None:
            wake_at.append(self.stop_deadline)
        timeout = min(1.0, max(0.0, min(wake_at, default=now + 1.0) - now))
        started = time.monotonic()
        ready = self.selector.select(timeout)
        self.waited = time.monotonic() - started  # not busy: the turn's time excludes it
        for key, _ in ready:
            data: Any = key.data
            if data == "signals":
                continue  # read at the top of the next turn
            if data == "listener":
                self.read_notifications()
            elif isinstance(data, Child):
                self.read_child_report(data)
            elif isinstance(data, Readable):
                data.on_readable()
            elif self.metrics is not None:
                self.metrics.handle(key)


def _record_only(signum: int, frame: Any) -> None:
    """Signal handler: the wake-up fd already carries the signal number to the loop."""
