"""Claiming: one statement for every queue of the pool, in the order the weights chose, each
from where its tenant rotation stopped, with the outcomes still waiting to be written in the
same round trip (sql/claim.sql; docs/claim-order.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from supervisor.child.completer import Completer
from supervisor.child.cursors import ClaimCursors
from supervisor.child.process import read_all
from supervisor.child.session import ChildSession
from supervisor.child.weights import TenantRotation, WeightedQueues
from supervisor.queue import claim_builder
from supervisor.queue import jobs as jobs_api
from supervisor.queue.dsn import RECONNECT_ERRORS, STATEMENT_CUT
from supervisor.queue.jobs import Job
from supervisor.shared.board import Counter, State


class Claimer:
    def __init__(self, session: ChildSession, completer: Completer) -> None:
        self.session = session
        self.completer = completer
        self.process = session.process
        self.spec = session.spec
        self.board = self.process.board
        self.queue_names = list(self.spec.pool.queues)
        self.queues = WeightedQueues(self.spec.pool.queues)
        self.weights_seen = 0  # the board's weights generation this child claims by
        self.tenants = TenantRotation(
            {q: w for q, w in self.spec.config.tenants.items() if q in self.spec.pool.queues}
        )
        # Where each tenant's next claim starts (past this child's last job there), with a claim
        # from the head at most a poll interval apart for jobs that arrived below a cursor,
        # taking turns with the pool's other children while a walk is dear.
        self.cursors = ClaimCursors(self.spec.pool.poll_interval, self.spec.head_walks, os.getpid())
        # The pool's queues whose jobs age (YAML `aging:`), with their periods. Their claims go
        # without cursors: aging takes a tenant's jobs out of index order, so "everything
        # before the last job claimed was consumed" no longer holds (sql/claim/aging.sql).
        self.aging = self.spec.config.aging.of(self.queue_names)
        # Which queue the master's wake-up named, tried first at the next claim.
        self.hint: str | None = None
        self.woke_from_idle = False
        # Seconds until a rate-limited queue's next token is due for this child, after a claim
        # that a rate held back (None: no rate did): the idle wait ends then (docs/limits.md).
        self.token_due: float | None = None
        # Whether the database may hold limits: until a claim says it does, the claim is sent
        # without them (claim_builder's _unlimited variants: 9% less of the server's CPU a
        # claim), and such a claim takes nothing once a limit exists.
        self.limits = False
        # Whether the claims must share among tenants: until one of this child's claims returns
        # a job with a tenant (or the pool's queues have tenant weights or share by cost), the
        # claim without limits or aging is the flat one (claim_builder.FLAT: no tenant walk, the
        # queue's jobs in the global claim order), and from then on the walking variants, for the
        # rest of its life.
        self.tenanted = bool(self.tenants.weights) or bool(
            self.spec.config.fair_by_cost & set(self.queue_names)
        )
        # The cursor the claims are sent on, kept across claims (read before the next is sent):
        # a new one per claim built its result's loaders afresh (see jobs_api.execute_claim).
        self._claim_cursor: psycopg.RawCursor[Any] | None = None

    def _reweigh(self) -> None:
        """Take the weights a reload wrote on the board, if it wrote new ones."""
        generation = self.board.weights_generation()
        if generation != self.weights_seen:
            self.queues.reweigh(dict(zip(self.queue_names, self.board.weights(), strict=True)))
            self.weights_seen = generation

    def claim_cursor(self, conn: psycopg.Connection[Any]) -> psycopg.RawCursor[Any]:
        """The kept cursor of ``conn``; a new one after a reconnect."""
        cursor = self._claim_cursor
        if cursor is None or cursor.connection is not conn or cursor.closed:
            cursor = self._claim_cursor = psycopg.RawCursor(conn)
        return cursor

    def claim(self, limit: int) -> list[Job]:
        """Claim up to ``limit`` jobs across the pool's queues in one statement. Outcomes still
        waiting to be written go in the same round trip."""
        session = self.session
        if session.conn is None and not session.connect():
            return []  # told to stop while the database was away
        assert session.conn is not None
        self.board.set_state(State.CLAIMING)
        self._reweigh()
        config, worker = self.spec.config, self.spec.worker_id
        history = config.history.enabled
        now = time.monotonic()
        # Woken for a particular queue: try it first, outside the weighted rotation (an idle
        # child is not taking anyone's share).
        hint, self.hint = self.hint, None
        if hint is not None:
            self.queues.wake(hint)
            order = [hint, *(q for q in self.queue_names if q != hint)]
        else:
            order = self.queues.order(now)
        resume = self.tenants.resume_all(order)
        cursors = self.cursors.for_claim(order, now)
        if self.aging:
            cursors = [c for c in cursors if c[0] not in self.aging]
        variant = claim_builder.variant(
            limits=self.limits,
            batch=limit,
            aging=bool(self.aging),
            tenants=self.tenanted,
            cursors=bool(cursors),
        )

        def send(
            conn: psycopg.Connection[Any],
            done: Sequence[Job],
            spent: Mapping[str, str] | None = None,
        ) -> psycopg.Cursor[Any]:
            return jobs_api.send_claim(
                conn,
                order,
                worker=worker,
                limit=limit,
                lease_seconds=config.lease.duration,
                done=done,
                history=history,
                resume=resume,
                tenant_weights=self.tenants.weights,
                cursors=cursors,
                variant=claim_builder.carrying(variant, bool(done), history),
                aging=self.aging,
                cursor=self.claim_cursor(conn),
                spent=spent,
            )

        self.token_due = None
        started = time.perf_counter()
        queues = ", ".join(order)
        try:
            if self.completer:
                jobs = self.completer.write(claim=send)
                limit_wait, limits_found = self.completer.limit_wait, self.completer.limits_found
            else:
                claimed = jobs_api.read_claim(send(session.conn, ()))
                jobs, limit_wait, limits_found = (
                    claimed.jobs,
                    claimed.limit_wait,
                    claimed.limits_found,
                )
        except STATEMENT_CUT as exc:
            # Cut short by the session's lock or statement timeout (child/session.py): a stall,
            # not a fault. Nothing was written (outcomes it carried wait in the completer), and
            # the claim is made again at once.
            session.warn(f"claim from queues {queues} cut short, retrying: {exc}")
            return []
        except RECONNECT_ERRORS as exc:
            session.warn(f"claim from queues {queues} failed: {exc}")
            session.reconnect()
            return []
        except psycopg.Error as exc:
            session.error(f"claim from queues {queues} failed: {exc}")
            self.process.sleep(1.0)
            return []
        if limits_found and not self.limits:
            # A limit was written since this child started: from now on, the claim with limits
            # (its completions, if any, are written; the claim took nothing).
            self.limits = True
            return self.claim(limit)
        took = time.perf_counter() - started
        if not self.tenanted and any(job.tenant is not None for job in jobs):
            # A tenant's job: its rotation shares from the next claim on (this one, flat, took
            # the jobs in the global claim order).
            self.tenanted = True
        self.board.observe_claim(took)
        self.board.count(Counter.CLAIMS)
        self.queues.observe(order, jobs, limit, now, charge=hint is None)
        self.cursors.observe(
            jobs, now, took, whole=len(jobs) < limit and limit_wait is None and not self.limits
        )
        if self.tenanted:
            # Untenanted, the claim is the flat one, which takes no resume point.
            self.tenants.advance_all(order, resume, jobs)
        if not jobs:
            self.board.count(Counter.CLAIMS_EMPTY)
            if limit_wait is not None and limit_wait >= 0:
                # Held back by a rate: come back when the token promised to this child is due.
                self.token_due = limit_wait
            # Every queue was empty: the master raises their wake-up flags
            # (master/wakeups.py), so that the next enqueue to them notifies.
            self.process.report(b"I")
            return []
        if self.woke_from_idle and len(jobs) == limit:
            self.process.report(b"M")  # a burst arrived: ask the master to wake a sibling
        self.woke_from_idle = False
        return jobs

    def next_claim_in(self, now: float) -> float | None:
        """Seconds until the next claim is owed, for a child about to wait (None: only the
        poll and the wake-ups bring it): the rate token promised to this child, else the claim
        from the head (child/cursors.py). Not sooner than the token: a claim before it takes a
        later promise, and the token nobody waits for any more overflows the bucket (the rate
        runs short); the claim at the token is the head's when that is due."""
        if self.token_due is not None:
            return self.token_due
        return self.cursors.due_in(now)

    def woken(self, wake_fd: int) -> None:
        """The master wrote to the wake-up pipe: note which queue it named."""
        names = self.queue_names
        hints = [b for b in read_all(wake_fd) if 0 < b <= len(names)]
        self.hint = names[hints[-1] - 1] if hints else None
        self.woke_from_idle = True
