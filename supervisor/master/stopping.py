"""How the master changes its mind: a reload (SIGHUP), a drain (TERM, INT), a stop now (QUIT,
or a second TERM), and what it does after its last child left. A part of Master
(supervisor.master.loop)."""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from supervisor.master.children import Child
from supervisor.master.reload_diff import pool_changes, weights_only
from supervisor.services import registry

if TYPE_CHECKING:
    from supervisor.config import Config, PoolConfig
    from supervisor.config.handlers import Handler
    from supervisor.master.listener import Listener
    from supervisor.master.pools import PoolRuntime
    from supervisor.master.wakeups import WakeupFlags
    from supervisor.observability.metrics import MetricsServer
    from supervisor.services.requeue import Requeuer
    from supervisor.sessions.database import MasterDatabase

log = logging.getLogger("pgq.master")


class Stopping:
    config: Config
    handlers: dict[str, Handler]
    kinds: list[str]
    pools: dict[str, PoolRuntime]
    children: dict[int, Child]
    stopping: bool
    stop_deadline: float | None
    exit_code: int
    requeuer: Requeuer
    db: MasterDatabase
    listener: Listener | None
    metrics: MetricsServer | None
    supervisor_id: str
    wakeups: WakeupFlags
    # and the Master's own methods it calls (new_pool_runtime, build_services, side_sessions)

    def reload(self) -> None:
        from supervisor.config import ConfigError, load_config
        from supervisor.config.handlers import load_handlers, load_reconcilers

        log.info("SIGHUP: reloading %s", self.config.path)
        try:
            new = load_config(self.config.path)
            handlers = load_handlers(new)
            load_reconcilers(new)
            keys_changed = reload_keys(new)
        except ConfigError as exc:
            log.error("reload rejected, keeping the running configuration: %s", exc)
            return
        if new.database != self.config.database:
            log.warning("reload: database settings changed; they apply at the next restart")
            new = replace(new, database=self.config.database)
        if new.metrics != self.config.metrics:
            log.warning("reload: metrics settings changed; they apply at the next restart")
        # What every child reads at fork: a change to any restarts every pool.
        shared = {
            "handlers": {k: h.target for k, h in handlers.items()}
            != {k: h.target for k, h in self.handlers.items()},
            "jobs": new.jobs != self.config.jobs,
            "lease": new.lease != self.config.lease,
            "history": new.history != self.config.history,
            "tenants": new.tenants != self.config.tenants,
            "encryption keys": keys_changed,  # children open and seal with their fork's keys
            "fairness": new.fair_by_cost != self.config.fair_by_cost,
        }
        shared_changed = any(shared.values())
        if shared_changed:
            changed = ", ".join(name for name, did in shared.items() if did)
            log.info("reload: %s changed: every pool's children restart", changed)
        old_pools = self.pools
        self.config, self.handlers, self.kinds = new, handlers, sorted(handlers)
        self.pools = {}
        for name, pool in new.pools.items():
            runtime = old_pools.pop(name, None)
            if runtime is not None and runtime.config == pool and not shared_changed:
                self.pools[name] = runtime
                continue
            if runtime is not None and not shared_changed and weights_only(runtime.config, pool):
                self.reweigh(runtime, pool)
                self.pools[name] = runtime
                continue
            self.pools[name] = self.new_pool_runtime(pool)
            if runtime is not None:
                old_pools[name] = runtime
                said = "; ".join(pool_changes(runtime.config, pool)) or "its children's settings"
                log.info("reload: pool %s changed (%s): its children restart", name, said)
            else:
                log.info("reload: pool %s added", name)
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
        self.wakeups.configure()

    def reweigh(self, runtime: PoolRuntime, pool: PoolConfig) -> None:
        """A weight-only change: the running children take the new weights from their boards
        at their next claim, and children forked later from the pool's new config; none is
        drained or respawned."""
        said = "; ".join(pool_changes(runtime.config, pool))
        runtime.config = pool
        live = [s.child for s in runtime.slots if s.child is not None and not s.child.draining]
        for child in live:
            child.board.set_weights(list(pool.queues.values()))
        log.info(
            "reload: pool %s changed (%s): %d running children take the new weights at their "
            "next claim, without a restart",
            pool.name,
            said,
            len(live),
        )

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


def reload_keys(new: Config) -> bool:
    """Install the reloaded keys file's ring for the processes forked from now on; whether it
    differs from the running one (then every child is replaced). PGQ_KEYS cannot change in a
    running process: only a keys file can."""
    from supervisor.config import ConfigError, ConfigIssue
    from supervisor.config.encryption import ring
    from supervisor.queue import keyring

    try:
        fresh = ring(new.encryption) if new.encryption.keys_file else None
    except keyring.KeysError as exc:  # changed again since load_config read it
        raise ConfigError([ConfigIssue("encryption.keys_file", str(exc))], new.path) from None
    if fresh == keyring.installed():
        return False
    keyring.install(fresh)
    log.info("reload: the keys of encrypted arguments changed; every child is replaced")
    return True
