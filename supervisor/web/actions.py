"""What the dashboard's buttons do: the library's own functions, each in one transaction.

The queue library (supervisor.queue) is synchronous, and an action is rare: each one runs on a
short-lived connection in a worker thread, so the pages' async pool is never held by a write
and the event loop never blocks. Every action returns the sentence the page shows afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from starlette.concurrency import run_in_threadpool

from supervisor.config import ScheduleConfig
from supervisor.queue import bulk, control, maintenance, scheduled, unknown
from supervisor.queue.dsn import DatabaseError, connect, describe, scrub
from supervisor.queue.enqueue import enqueue
from supervisor.shared.words import plural
from supervisor.views.clock import server_clock
from supervisor.views.text import age, clock_time, listing

T = TypeVar("T")


class ActionError(Exception):
    """An action that could not be done, with the reason in words for the page."""


@dataclass(frozen=True)
class Done:
    """What an action did: the sentence for the page, and the jobs it changed (for the audit
    log; empty for a queue's pause or resume, and for a purge, which counts)."""

    said: str
    jobs: tuple[int, ...] = ()


class Actions:
    def __init__(
        self,
        conninfo: str,
        *,
        history: bool = False,
        pooled: bool = False,
        purge_batch: int = maintenance.PURGE_BATCH,
    ) -> None:
        self._conninfo = conninfo
        # A purge deletes this many per transaction, as `dlq purge` does: one transaction over
        # millions of dead letters would hold their locks, and the WAL, until it ended.
        self._purge_batch = purge_batch
        # Through a transaction-mode pooler: connect() then prepares nothing server-side.
        self._pooled = pooled
        # Whether a cancel writes pgq.job_history, as the supervisor's own outcomes do.
        self._history = history

    async def _run(self, fn: Callable[[psycopg.Connection[Any]], T], *, one: bool = True) -> T:
        """``fn`` on a connection of its own, in one transaction (``one``), or left to make
        its own transactions."""

        def work() -> T:
            try:
                with connect(
                    self._conninfo, application_name="pgq-supervisor web", pooled=self._pooled
                ) as conn:
                    if not one:
                        return fn(conn)
                    with conn.transaction():
                        return fn(conn)
            except DatabaseError as exc:
                raise ActionError(str(exc)) from None
            except psycopg.Error as exc:
                detail = scrub(str(exc).strip(), self._conninfo).replace("\n", " ")
                raise ActionError(f"{describe(self._conninfo)}: {detail}") from None

        return await run_in_threadpool(work)

    async def replay(
        self, which: maintenance.ReplayFilter, *, older_than: float | None = None
    ) -> Done:
        def replay(conn: psycopg.Connection[Any]) -> maintenance.Replayed:
            if older_than is None:
                return maintenance.replay(conn, which)
            # The cutoff is on the server's clock, like `dlq replay --older-than`.
            cutoff = server_clock(conn) - timedelta(seconds=older_than)
            return maintenance.replay(conn, replace(which, finished_before=cutoff))

        done = await self._run(replay)
        said = []
        if done.jobs:
            queues = sorted({queue for _, queue in done.jobs})
            said.append(
                f"replayed {_jobs(len(done.jobs))} ({listing(done.ids)}) into "
                f"{', '.join(queues)}: attempts reset, due now"
            )
        for job_id, key in done.held:
            said.append(
                f"job {job_id} stays dead: its unique key {key!r} is held by a waiting or "
                "running job"
            )
        return Done("; ".join(said) or "nothing to replay: no dead letter matched", tuple(done.ids))

    async def purge(self, older_than: float, kind: str | None, queue: str | None) -> Done:
        def purge(conn: psycopg.Connection[Any]) -> int:
            # The cutoff is on the server's clock, like `dlq purge --older-than`.
            with conn.transaction():
                cutoff = server_clock(conn) - timedelta(seconds=older_than)
            deleted = 0
            while True:
                with conn.transaction():  # one commit per slice
                    n = maintenance.purge_dead_letters_slice(
                        conn, cutoff, limit=self._purge_batch, kind=kind, queue=queue
                    )
                deleted += n
                if n < self._purge_batch:
                    return deleted

        deleted = await self._run(purge, one=False)
        narrowed = "".join(
            f" {label} {value}"
            for label, value in (("of kind", kind), ("in queue", queue))
            if value
        )
        return Done(f"purged {_jobs(deleted)}{narrowed} older than {age(older_than)}")

    async def cancel(self, job_id: int) -> Done:
        done = await self._run(lambda conn: control.cancel(conn, job_id, history=self._history))
        if done.cancelled:
            return Done(f"cancelled job {job_id}: it will not run", (job_id,))
        if done.requested:
            return Done(
                f"asked the supervisor running job {job_id} to stop it; it ends cancelled "
                "within about a second",
                (job_id,),
            )
        if done.finished:
            return Done(
                f"job {job_id} was not cancelled: it had already ended {done.finished[job_id]}"
            )
        return Done(f"job {job_id} was not cancelled: there is no such job (completed or purged)")

    async def resolve(self, job_id: int, resolution: str) -> Done:
        done = await self._run(
            lambda conn: unknown.resolve(conn, [job_id], resolution, history=self._history)
        )
        if not done:
            return Done(f"job {job_id} was not resolved: its outcome is no longer unknown")
        if done[0].state == "held":
            return Done(
                f"job {job_id} was not retried: its unique key is held by job {done[0].holder}; "
                "it stays unknown (resolve it as completed or discarded, or retry it once that "
                "job has ended)"
            )
        said = {"completed": "completed", "available": "due again now", "discarded": "discarded"}
        return Done(f"job {job_id} resolved: {said[done[0].state]}", (job_id,))

    async def retry_now(self, job_id: int) -> Done:
        done = await self._run(lambda conn: control.retry_now(conn, job_id))
        if done is None:
            return Done(f"job {job_id} was not waiting (running, finished or gone): nothing to do")
        return Done(
            f"job {job_id} is due now in queue {done.queue} (it was {done.previous_state}, "
            f"due {clock_time(done.previous_run_at)})",
            (job_id,),
        )

    async def pause(self, queue: str) -> Done:
        if await self._run(lambda conn: control.pause_queue(conn, queue)):
            return Done(f"paused queue {queue}: no host claims from it until it is resumed")
        return Done(f"queue {queue} was paused already")

    async def resume(self, queue: str) -> Done:
        if await self._run(lambda conn: control.resume_queue(conn, queue)):
            return Done(f"resumed queue {queue}: its workers were woken")
        return Done(f"queue {queue} was not paused")

    async def run_schedule(self, schedule: ScheduleConfig) -> Done:
        """One job of the schedule now, as a tick would enqueue it (without a tick's unique
        key: the next tick still runs on time)."""

        def work(conn: psycopg.Connection[Any]) -> int:
            return enqueue(
                conn,
                schedule.kind,
                dict(schedule.args),
                queue=schedule.queue,
                priority=schedule.priority,
            )

        job_id = await self._run(work)
        return Done(
            f"schedule {schedule.name}: enqueued job {job_id} ({schedule.kind}) on queue "
            f"{schedule.queue} now; its next tick runs as planned",
            (job_id,),
        )

    async def pause_schedule(self, name: str, by: str) -> Done:
        if await self._run(lambda conn: scheduled.pause(conn, name, by)):
            return Done(f"paused schedule {name}: its ticks pass without a job until resumed")
        return Done(f"schedule {name} was paused already")

    async def resume_schedule(self, name: str) -> Done:
        if await self._run(lambda conn: scheduled.resume(conn, name)):
            return Done(f"resumed schedule {name}: its next tick enqueues a job")
        return Done(f"schedule {name} was not paused")

    async def bulk_slice(
        self,
        name: str,
        params: dict[str, Any],
        *,
        top: int,
        floor: int,
        below: int | None,
        limit: int,
    ) -> bulk.Sliced:
        """One slice of an action on everything a filter matches (supervisor.web.bulk): the
        next ``limit`` matching ids below ``below``, locked, acted on in this transaction."""

        def work(conn: psycopg.Connection[Any]) -> bulk.Sliced:
            conn.execute(bulk.bulk_query("web_bound"))
            return bulk.act_slice(
                conn,
                name,
                params,
                top=top,
                floor=floor,
                below=below,
                limit=limit,
                history=self._history,
            )

        return await self._run(work)

    async def bulk_ids(self, name: str, ids: list[int]) -> Done:
        """An action on the jobs ticked in the list."""
        changed = await self._run(lambda conn: self._act(conn, name, ids))
        left = len(ids) - len(changed)
        verb = {"cancel": "cancelled or stopping", "run-now": "made due now"}.get(name, "replayed")
        rest = f"; {left} left as they were (not in a state it applies to)" if left else ""
        return Done(
            f"{verb} {len(changed)} of {plural(len(ids), 'job')} ({listing(ids)}){rest}", changed
        )

    def _act(self, conn: psycopg.Connection[Any], name: str, ids: list[int]) -> tuple[int, ...]:
        return bulk.act(conn, name, ids, history=self._history)


def _jobs(n: int) -> str:
    return "1 dead letter" if n == 1 else f"{n} dead letters"
