"""The master: one single-threaded loop that keeps every pool's children alive and healthy.

Each turn of the loop does the same things in the same order (gunicorn's arbiter is the model):
handle the signals that arrived, reap children that died, act on what woke the last wait (a
child's report, the listener, a side session's result, a scrape), run the periodic services
that are due, escalate kills whose grace ran out, refill empty slots; then wait until a signal,
a child, the database or a timer wakes it, and say what did. Signal handlers only record the
signal (through the wake-up pipe); everything else happens here. No threads: forking a threaded
process can deadlock the child. Slots (supervisor.master.slots), reaping (.reaping) and stopping
and reloading (.stopping) are parts of the same class, in modules of their own.
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
from typing import TYPE_CHECKING, Any, TypeVar

from supervisor.config.handlers import load_reconcilers
from supervisor.master.children import Child, host_identity
from supervisor.master.listener import Listener
from supervisor.master.pools import PoolRuntime
from supervisor.master.reaping import Reaping
from supervisor.master.scaling_feed import ScalingFeed
from supervisor.master.slots import Slots
from supervisor.master.stopping import Stopping
from supervisor.master.wakeups import WakeupFlags
from supervisor.observability.view import ChildView, MasterCounters, MasterView, PoolView
from supervisor.services.base import Service
from supervisor.services.cancel_watch import CancelWatch
from supervisor.services.heartbeat import Heartbeat
from supervisor.services.leases import LeaseRenewal
from supervisor.services.limits_sync import LimitSync
from supervisor.services.memory_watch import MemoryWatch
from supervisor.services.purge import Purger
from supervisor.services.reconciler import Reconciler
from supervisor.services.requeue import Requeuer
from supervisor.services.rescuer import Rescuer
from supervisor.services.scheduler import Scheduler
from supervisor.services.stager import Stager
from supervisor.services.timeout_watch import TimeoutWatch
from supervisor.services.vacuum import QueueVacuum
from supervisor.sessions.database import MasterDatabase
from supervisor.sessions.pending import Readable
from supervisor.shared import proctitle
from supervisor.shared.exits import MasterExit

if TYPE_CHECKING:
    from supervisor.config import Config
    from supervisor.config.handlers import Handler
    from supervisor.observability.metrics import MetricsServer

log = logging.getLogger("pgq.master")

T = TypeVar("T")

# A turn of the loop busy this long is logged: everything the master does waited behind it.
SLOW_TURN = 1.0
NOTABLE_TURN = 0.05  # logged at debug level, with the step that took longest
# Due services run in a turn until they have taken this long; the rest run at the next turn.
SERVICES_BUDGET = 0.015
# How often the master looks for cancel requests on its children's jobs: a cancelled running
# job stops within about this long (one probe of an index that is almost always empty).
CANCEL_CHECK_EVERY = 1.0
# While a session of the master's is connecting, the loop turns at least this often: each turn
# advances the connect a moment (supervisor.sessions.loop_session), none waits for it.
CONNECTING_WAIT = 0.05


class Master(Slots, Reaping, Stopping):
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
        self.selector = selectors.DefaultSelector()
        self.listener = (
            Listener(
                listen_dsn,
                connect_timeout=config.database.connect_timeout,
                selector=self.selector,
            )
            if listen_dsn is not None
            else None
        )
        self.metrics = metrics
        self.counters = MasterCounters()
        self.pools: dict[str, PoolRuntime] = {}
        self.children: dict[int, Child] = {}
        self.generation = 0
        self.stopping = False
        self.stop_deadline: float | None = None
        self.exit_code = MasterExit.OK
        self.requeuer = Requeuer(self, interval=1.0)
        self.purger = Purger(self)
        interval = config.rescue.interval
        self.rescuer = Rescuer(self, interval, first_in=min(5.0, interval))
        self.vacuum = QueueVacuum(self, self.selector)
        self.reconciler = Reconciler(self, load_reconcilers(config))
        self.stager = Stager(self)
        self.wakeups = WakeupFlags(self)
        self.limit_sync = LimitSync(self)
        self.scaling = ScalingFeed(self, self.selector)
        self.services: list[Service] = []
        self.metrics_services: list[Service] = []
        self.title = ""
        self.woken: list[tuple[selectors.SelectorKey, int]] = []  # what ended the last wait
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
            self.handle_wakeups,
            self.wakeups.flush,
            self.run_due_services,
            self.escalate_kills,
            self.tend_slots,
            self.update_title,
        ]
        busy, slowest, slowest_took = 0.0, "", 0.0
        for step in steps:
            started = time.monotonic()
            self.guarded(step)
            took = time.monotonic() - started
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
        # Not busy: the turn's time excludes the wait.
        self.woken = self.guarded(self.wait) or []

    def guarded(self, step: Callable[[], T]) -> T | None:
        try:
            return step()
        except Exception:
            log.exception("master: %s failed; carrying on", step.__name__)
            time.sleep(0.1)  # never spin on a step that keeps failing
            return None

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
        self.wakeups.configure()
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
        self.limit_sync = LimitSync(self)
        self.services = [
            LeaseRenewal(self, config.lease.renew_every, first_in=config.lease.renew_every),
            self.rescuer,
            self.purger,
            MemoryWatch(self, 2.0),
            TimeoutWatch(self, 0.25),
            CancelWatch(self, CANCEL_CHECK_EVERY),
            Heartbeat(self, 5.0, scaling=self.scaling.published),
            self.requeuer,
            self.stager,
            Scheduler(self),
            self.reconciler,
            self.limit_sync,
            self.scaling,
        ]
        self.scaling.configure()
        # Imported and checked already (startup, or the reload that brought this config).
        self.reconciler.hooks = load_reconcilers(config)
        self.reconciler.interval = config.reconcile.interval
        self.vacuum.configure(config.vacuum)
        if config.vacuum.enabled:
            self.services.append(self.vacuum)
        self.services.extend(self.metrics_services)
        if config.history.enabled:
            from supervisor.queue.maintenance import ensure_history_partitions

            self.db.run("history partitions", ensure_history_partitions)

    def handle_signals(self) -> None:
        if self.woken and all(key.data != "signals" for key, _ in self.woken):
            # Woken by something else (a child, the listener): the signal pipe is empty, and
            # reading it raised BlockingIOError, about 40 us of the master's time before every
            # job's wake-up (issue 29). A signal arriving meanwhile wakes the next wait at once.
            return
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
        pools = {name: self.pool_view(runtime) for name, runtime in self.pools.items()}
        children = tuple(ChildView(c.pool, c.board, c.ready()) for c in self.children.values())
        return MasterView(pools, children, self.counters, self.db.reachable, self.stopping)

    def pool_view(self, runtime: PoolRuntime) -> PoolView:
        size = sum(1 for s in runtime.slots if not s.retired)
        state = self.scaling.states.get(runtime.config.name)
        return PoolView(
            processes=size,
            ready=sum(1 for s in runtime.slots if s.child is not None and s.child.ready()),
            queues=tuple(runtime.config.queues),
            desired=state.desired if state is not None else size,
            need=state.need if state is not None else 0.0,
            backlog_seconds=state.backlog_seconds if state is not None else 0.0,
            reason=state.reason if state is not None else "",
            minimum=state.min if state is not None and state.elastic else 0,
        )

    def side_sessions(self) -> list[Readable]:
        """The master's connections that carry statements it does not wait for."""
        return [
            self.vacuum,
            self.scaling,
            *(s for s in self.metrics_services if isinstance(s, Readable)),
        ]

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

    # -- the title and the wait ------------------------------------------------------------------

    def update_title(self) -> None:
        state = "stopping" if self.stopping else "running"
        title = proctitle.master_title(self.config.path, len(self.children), state)
        if title != self.title:  # every turn of the loop would rewrite it otherwise
            proctitle.set_title(title)
            self.title = title

    def wait(self) -> list[tuple[selectors.SelectorKey, int]]:
        """Sleep until a signal, a child, the database or a timer wakes the loop (at the
        latest when the next service, spawn or kill is due); what woke it."""
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
        recheck = self.wakeups.next_due()
        if recheck is not None:
            wake_at.append(recheck)
        timeout = min(1.0, max(0.0, min(wake_at, default=now + 1.0) - now))
        if any(db.connect_under_way for db in self.connecting_sessions()):
            timeout = min(timeout, CONNECTING_WAIT)
        return self.selector.select(timeout)

    def connecting_sessions(self) -> list[MasterDatabase]:
        listener = [self.listener.session] if self.listener is not None else []
        vacuum = [self.vacuum.session] if self.vacuum.connecting else []
        return [self.db, *listener, *vacuum]

    # -- what woke the loop ------------------------------------------------------------------

    def handle_wakeups(self) -> None:
        """Act on what ended the last wait: each source has its handle_* (the signals have
        theirs at the top of the turn)."""
        woken, self.woken = self.woken, []
        for key, _ in woken:
            data: Any = key.data
            if data == "signals":
                continue
            if isinstance(data, Listener):
                self.handle_listener()
            elif isinstance(data, Child):
                if not data.closed:  # reaped earlier in this turn (it read its pipe then)
                    self.handle_report(data)
            elif isinstance(data, Readable):
                data.on_readable()
            elif self.metrics is not None:
                self.metrics.handle(key)
        if self.db.connect_under_way:  # every turn, not only when a service is due
            self.db.connection()
        if self.vacuum.connecting:  # likewise: a vacuum waits for its session
            self.vacuum.advance()
        if self.listener is not None:
            fd = self.listener.fd
            self.listener.refresh()
            if self.listener.fd is not None and self.listener.fd != fd:
                # NOTIFYs sent while the listener was away are lost: a flag they took stays
                # down until written again.
                self.wakeups.reassert_soon()

    def handle_listener(self) -> None:
        assert self.listener is not None
        heard = self.listener.read(own_pid=self.db.backend_pid())
        if heard.scheduled:
            self.stager.soon()
        for queue in heard.queues:
            self.wake_queue(queue)
            self.wakeups.taken(queue)

    def handle_report(self, child: Child) -> None:
        """What a child wrote on its report pipe: b"M" (a full batch: wake a sibling),
        b"S" (retries or snoozes for later were written: the stager looks again) and b"I"
        (its claim found nothing: the queues' wake-up flags go up)."""
        try:
            data = os.read(child.report_fd, 4096)
        except (BlockingIOError, OSError):
            return
        if b"M" in data:
            self.wake_idle(child.pool, exclude=child)
        if b"S" in data:
            self.stager.soon()
        if b"I" in data:
            self.wakeups.child_idle(child.pool)

    def wake_queue(self, queue: str) -> None:
        """Wake one child of every pool that serves ``queue``: it has jobs due now."""
        for runtime in self.pools.values():
            if queue in runtime.config.queues:
                runtime.wake_one(queue=queue)

    def wake_idle(self, pool: str, *, exclude: Child | None = None) -> None:
        runtime = self.pools.get(pool)
        if runtime is not None:
            runtime.wake_one(exclude=exclude)


def _record_only(signum: int, frame: Any) -> None:
    """Signal handler: the wake-up fd already carries the signal number to the loop."""
