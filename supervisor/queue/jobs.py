"""Claiming jobs and every fenced write after the claim.

A claim is its own short READ COMMITTED transaction: lock due rows with FOR UPDATE SKIP LOCKED,
mark them running under a fresh fencing token, commit. The handler then runs with no
transaction open. Completion, failure, release and lease renewal each match the job's
(id, lease_id) fence; a write that matches nothing means the claim was lost (the lease expired
and the job was rescued, or the job was requeued after its worker was presumed dead), and the
caller is told which jobs.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from operator import attrgetter
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg.pq import TransactionStatus

from supervisor.queue import claim_builder
from supervisor.queue.costs import NO_COSTS
from supervisor.queue.job import Job
from supervisor.queue.literals import bigint_array, text_array, timestamp_array
from supervisor.queue.outcomes import Settlement
from supervisor.queue.queries import query

DEFAULT_LEASE_SECONDS = 60.0
# queue -> tenant -> weight, for the tenants whose weight is not 1 (the YAML's `tenants:`).
TenantWeights = Mapping[str, Mapping[str, int]]
# Where a child's claims resume inside a tenant: (queue, tenant key, priority, run_at, id) of the
# last job it claimed there (supervisor.child.cursors); the claim starts past it.
Cursor = tuple[str, str, int, datetime, int]
# A job's fields read in C, for the steps over a whole batch.
_job_id = attrgetter("id")
_job_result = attrgetter("result")


class LeaseLost(RuntimeError):
    """A fenced write matched nothing: another owner (or the rescuer) has the job now."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        self.jobs = list(jobs)
        listed = ", ".join(
            f"{j.kind} job {j.id} (queue {j.queue}, attempt {j.attempts})" for j in self.jobs[:5]
        )
        more = f" and {len(self.jobs) - 5} more" if len(self.jobs) > 5 else ""
        super().__init__(f"lease lost, result dropped: {listed}{more}")


@dataclass(frozen=True)
class Fenced:
    """The result of a fenced write: which jobs were still ours, and which were lost."""

    kept: list[Job] = field(default_factory=list)
    lost: list[Job] = field(default_factory=list)

    def raise_if_lost(self) -> None:
        if self.lost:
            raise LeaseLost(self.lost)


def _own_transaction(conn: psycopg.Connection[Any], what: str) -> None:
    if conn.info.transaction_status != TransactionStatus.IDLE:
        raise RuntimeError(
            f"{what} must run in its own short transaction, but the connection is inside one; "
            "a claim inside a long transaction would hold its row locks until that commits"
        )
    if conn.isolation_level not in (None, IsolationLevel.READ_COMMITTED):
        raise RuntimeError(
            f"{what} needs READ COMMITTED; under {conn.isolation_level.name} SKIP LOCKED claims "
            "can fail with serialization errors"
        )


def use_generic_plans(conn: psycopg.Connection[Any]) -> None:
    """Plan the statements psycopg prepares on this connection once, not at every run.

    PostgreSQL plans a prepared statement afresh at each run while its generic plan's estimate
    looks dearer than the custom plans', and the claim's always does (LIMIT and the pool's
    unnest are guesses without the values): planning it took 1.2 ms of a 1.6 ms claim at batch
    1. A generic plan is kept for the session, and the first may be made while pgq.jobs is
    nearly empty, where reading the whole table looks cheapest: with sequential scans priced
    out (enable_seqscan off: still taken where no index serves) and every fenced write written
    as primary-key look-ups, each plan reads the table by its indexes however the table grows
    (tests/integration/test_generic_plans.py). Only the child's own statements run on this
    connection (a handler gets its own). A connection through a transaction-mode pooler
    prepares nothing: no effect.

    JIT compilation off: before PostgreSQL 18, a disabled sequential scan is priced at 10^10,
    over the JIT thresholds, so any statement that still takes one (a limit function's look-up
    of a small table) was compiled at every run, 27-29 ms each (three tenants' per-tenant
    rates: 90 ms a claim, under the queue's limits mutex). Nothing the child runs is long
    enough for JIT to pay."""
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET jit = off")


# The most JSON of kept results one statement carries (its %(results)s parameter). The claim
# casts it to one jsonb array, and jsonb refuses an array past 256 MiB of elements; past 1 GiB
# the server refuses the message itself and ends the session, and the child, taking that for an
# outage, reconnected and sent it again, forever. results.max_size is at most 64 MiB, so a
# statement always has room for one result.
RESULTS_PER_STATEMENT = 96 * 1024 * 1024


def results_chunks(done: Sequence[Job], limit: int = RESULTS_PER_STATEMENT) -> list[list[Job]]:
    """``done`` in runs, in order, each carrying at most ``limit`` characters of results (a run
    of one job whatever its size); one run, ``done`` itself, in the usual case."""
    if sum(map(len, filter(None, map(_job_result, done)))) <= limit:
        return [list(done)]  # the usual case, told without a Python step per job
    runs: list[list[Job]] = [[]]
    size = 0
    for job in done:
        weight = len(job.result) if job.result is not None else 0
        if runs[-1] and size + weight > limit:
            runs.append([])
            size = 0
        runs[-1].append(job)
        size += weight
    return runs


def results_param(done: Sequence[Job]) -> str:
    """The finished jobs' return values as the claim's JSON array of [id, value] pairs. Built
    as text from values already encoded when the handler returned, so a batch without results
    costs a constant '[]'."""
    kept = [f"[{j.id},{j.result}]" for j in done if j.result is not None]
    return "[" + ",".join(kept) + "]" if kept else "[]"


def claim_params(
    queues: str | Sequence[str],
    *,
    worker: str,
    limit: int,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    done: Sequence[Job] = (),
    history: bool = False,
    resume: Sequence[str] | None = None,
    tenant_weights: TenantWeights | None = None,
    cursors: Sequence[Cursor] = (),
    aging: Mapping[str, float] | None = None,
    only: Collection[str] | None = None,
    spent: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The parameters of the claim statement (sql/claim.sql, ``claim``); with ``only`` (a
    variant's parameter names, ``claim_builder.native``), those the variant takes.

    ``queues`` in the order to try them (one name: that queue alone); ``resume`` the tenant key
    each queue's rotation resumes at (``TenantRotation.resume``; the start when omitted);
    ``tenant_weights`` maps queue -> tenant -> weight for tenants that are not weight 1;
    ``cursors`` where the claim starts inside tenants (``ClaimCursors``; none: from the start of
    every tenant, which finds every due job); ``aging`` maps queue -> seconds a waiting job
    takes to rise a priority level (sql/claim/aging.sql; a queue not named does not age);
    ``spent`` what the attempts written with it cost (``costs.columns``; none without
    history)."""
    names = [queues] if isinstance(queues, str) else list(queues)
    params: dict[str, Any] = {
        "queues": text_array(names),
        "limit": limit,
        "worker": worker,
        "lease_seconds": lease_seconds,
    }
    # Each group of parameters only when the variant sent takes it (``only``: its names); the
    # flat claim builds 8 of the 14 (a claim of one job: 6.7 against 8.7 us).
    if only is None or "done_ids" in only:
        params["done_ids"] = bigint_array(j.id for j in done)
        params["done_lease_ids"] = bigint_array(j.lease_id for j in done)
        params["results"] = results_param(done)
        params["history"] = history
    if only is None or "cost_ids" in only:
        params.update(spent or NO_COSTS)
    if only is None or "resume" in only:
        params["resume"] = text_array(resume if resume is not None else [""] * len(names))
        params["aging"] = _aging_array(names, aging)
        weights = [
            (queue, tenant, weight)
            for queue, tenants in (tenant_weights or {}).items()
            for tenant, weight in tenants.items()
        ]
        params["tenant_queues"] = text_array(q for q, _, _ in weights)
        params["tenant_names"] = text_array(t for _, t, _ in weights)
        params["tenant_weights"] = bigint_array(w for _, _, w in weights)
    if only is None or "cursor_ids" in only:
        params["cursor_queues"] = text_array(c[0] for c in cursors)
        params["cursor_tenants"] = text_array(c[1] for c in cursors)
        params["cursor_priorities"] = bigint_array(c[2] for c in cursors)
        params["cursor_run_ats"] = timestamp_array(c[3] for c in cursors)
        params["cursor_ids"] = bigint_array(c[4] for c in cursors)
    return params


def _aging_array(names: Sequence[str], aging: Mapping[str, float] | None) -> str:
    if not aging:
        return "{" + ",".join(["0"] * len(names)) + "}"
    return "{" + ",".join(repr(float(aging.get(name, 0.0))) for name in names) + "}"


def send_claim(
    conn: psycopg.Connection[Any],
    queues: str | Sequence[str],
    *,
    worker: str,
    limit: int,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    done: Sequence[Job] = (),
    history: bool = False,
    resume: Sequence[str] | None = None,
    tenant_weights: TenantWeights | None = None,
    cursors: Sequence[Cursor] = (),
    variant: str = "claim",
    aging: Mapping[str, float] | None = None,
    cursor: psycopg.RawCursor[Any] | None = None,
    spent: Mapping[str, str] | None = None,
) -> psycopg.Cursor[Any]:
    """Send the claim and return its cursor without reading it (read it with ``read_claim``;
    ``cursor``: the cursor to send it on, see ``execute_claim``).

    One statement claims for every queue in ``queues``, whatever their number. ``done`` are
    finished jobs to complete in the same statement, so a worker's batch costs one statement
    and one commit; in pipeline mode the cursor can also travel in one round trip (and one
    transaction) with the batch's other outcomes. ``variant``: which of the claim's statements
    (``claim_builder.variant``; the default, with every step, is right for any claim)."""
    params = claim_params(
        queues,
        worker=worker,
        limit=limit,
        lease_seconds=lease_seconds,
        done=done,
        history=history,
        resume=resume,
        tenant_weights=tenant_weights,
        cursors=cursors,
        aging=aging,
        only=claim_builder.native(variant)[1],
        spent=spent,
    )
    return execute_claim(conn, params, variant=variant, cursor=cursor)


def execute_claim(
    conn: psycopg.Connection[Any],
    params: Mapping[str, Any],
    statement: tuple[str, tuple[str, ...]] | None = None,
    *,
    variant: str = "claim",
    cursor: psycopg.RawCursor[Any] | None = None,
) -> psycopg.Cursor[Any]:
    """Run the claim with ``claim_params``'s parameters, sent with the statement's own ``$n``
    placeholders (``claim_builder.native``: psycopg would parse its text again at every run).
    ``statement``: another claim's text in that form (``queries.native_text``; the benchmarks'
    earlier claims). ``cursor``: a cursor of ``conn`` to run it on, read before the next claim
    is sent on it (a child keeps one: a new cursor builds its column loaders afresh at every
    claim); a cursor of another connection is not used."""
    text, names = statement or claim_builder.native(variant)
    if cursor is None or cursor.connection is not conn:
        cursor = psycopg.RawCursor(conn)
    # Binary results: the server sends the reply's three timestamps a row as integers instead
    # of formatting them, and psycopg reads them without parsing (100 whole claim rows: 432
    # against 468 us a fetch, wall; scripts/benchmarks/claim_rows_bench.py).
    return cursor.execute(encoded(text), [params[name] for name in names], binary=True)


@lru_cache(maxsize=16)
def encoded(text: str) -> bytes:
    """A statement's text as the bytes psycopg sends, made once: given a str, psycopg encodes
    the claim's 11,600 characters at every run, and the new bytes' hash (its key among the
    prepared statements) is computed afresh too; a bytes object kept here keeps its hash."""
    return text.encode("utf-8")


@dataclass(frozen=True)
class Claimed:
    """What a claim statement did: the jobs it claimed, in the order to run them, and which of
    the finished jobs it carried were still ours. ``limit_wait`` is set when the queue's limits
    held every job back: seconds until its next rate token is due, or -1 when it waits for a
    concurrency slot (see docs/limits.md). ``limits_found``: a claim variant without limits
    found that a limit exists now, and claimed nothing (send the claim with limits)."""

    jobs: list[Job]
    completed: Fenced
    limit_wait: float | None = None
    limits_found: bool = False


def read_claim(cursor: psycopg.Cursor[Any], done: Sequence[Job] = ()) -> Claimed:
    rows = cursor.fetchall()
    # The last row carries the completed ids and the limits' wait; every row before it is a
    # claimed job. Columns found by name: the benchmarks read older claims (earlier releases',
    # scripts/benchmarks/benchlib/earlier_claims.sql) with fewer job columns and no limit_wait.
    result = cursor.pgresult
    assert result is not None, "read_claim needs the claim's cursor, executed"
    at, wait_at, found_at = _reply_columns(tuple(map(result.fname, range(result.nfields))))
    last = rows[-1]
    if len(rows) == 1:
        jobs = []
    elif at == _JOB_FIELDS:
        # Every field in the row, in order: the tuple is made directly (Job(*row) goes through
        # the named tuple's __new__, a Python call filling defaults, twice the cost).
        jobs = [_new_job(Job, row[:at]) for row in rows[:-1]]
        if len(jobs) > 1:
            jobs.sort(key=_claim_order)
    else:
        jobs = [Job(*row[:at]) for row in rows[:-1]]
        if len(jobs) > 1:
            jobs.sort(key=_claim_order)
    wait = last[wait_at] if wait_at is not None else None
    found = bool(last[found_at]) if found_at is not None else False
    return Claimed(jobs, _split(done, last[at] or ()), wait, found)


@lru_cache(maxsize=16)
def _reply_columns(names: tuple[bytes | None, ...]) -> tuple[int, int | None, int | None]:
    """Where a claim's reply holds ``completed``, ``limit_wait`` and ``limits_found``, from its
    column names: read from the result itself, which cursor.description would wrap in a Column
    object each (16 a claim, more than the rest of reading a batch of one)."""
    found = [name.decode() if name is not None else "" for name in names]

    def where(name: str) -> int | None:
        return found.index(name) if name in found else None

    return found.index("completed"), where("limit_wait"), where("limits_found")


_JOB_FIELDS = len(Job._fields)
_new_job = tuple.__new__


def _claim_order(job: Job) -> tuple[int, datetime, int]:
    """Job.sort_key, read by position (a property call per comparison key costs more)."""
    return (-job[4], job[5], job[0])


def claimed_jobs(cursor: psycopg.Cursor[Any]) -> list[Job]:
    return read_claim(cursor).jobs


def claim(
    conn: psycopg.Connection[Any],
    queues: str | Sequence[str],
    *,
    worker: str,
    limit: int = 1,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    resume: Sequence[str] | None = None,
    tenant_weights: TenantWeights | None = None,
    cursors: Sequence[Cursor] = (),
    aging: Mapping[str, float] | None = None,
) -> list[Job]:
    """Claim up to ``limit`` due jobs for ``worker`` from ``queues`` (tried in that order), in
    claim order: tenants in rotation from ``resume``, then best priority, oldest run_at, id
    (past ``cursors`` inside their tenants; ``aging``: see claim_params)."""
    _own_transaction(conn, "claim")
    cursor = send_claim(
        conn,
        queues,
        worker=worker,
        limit=limit,
        lease_seconds=lease_seconds,
        resume=resume,
        tenant_weights=tenant_weights,
        cursors=cursors,
        aging=aging,
    )
    if not conn.autocommit:
        conn.commit()
    return claimed_jobs(cursor)


def _split(jobs: Sequence[Job], kept_ids: Iterable[int]) -> Fenced:
    kept = set(kept_ids)
    if len(kept) == len(jobs) and kept.issuperset(map(_job_id, jobs)):
        return Fenced(kept=list(jobs))  # the usual case: every one still ours
    return Fenced(
        kept=[j for j in jobs if j.id in kept],
        lost=[j for j in jobs if j.id not in kept],
    )


def send_complete(
    conn: psycopg.Connection[Any],
    jobs: Sequence[Job],
    *,
    history: bool = False,
    spent: Mapping[str, str] | None = None,
) -> psycopg.Cursor[Any]:
    """Send the completion of ``jobs`` alone (with what attempts ``spent``, see claim_params):
    the claim statement, claiming nothing."""
    return send_claim(conn, (), worker="", limit=0, done=jobs, history=history, spent=spent)


def send_settle(
    conn: psycopg.Connection[Any], settlements: Sequence[Settlement], *, history: bool = False
) -> psycopg.Cursor[Any]:
    return conn.execute(
        query("settle"),
        {
            "ids": [s.job.id for s in settlements],
            "lease_ids": [s.job.lease_id for s in settlements],
            "states": [s.state for s in settlements],
            "delays": [s.delay for s in settlements],
            "refunds": [s.refund for s in settlements],
            "errors": [s.error for s in settlements],
            "history": history,
        },
    )


def fenced(cursor: psycopg.Cursor[Any], jobs: Sequence[Job]) -> Fenced:
    """Read a fenced write's result: the ids it returned were still ours."""
    return _split(jobs, (r[0] for r in cursor.fetchall()))


def complete(
    conn: psycopg.Connection[Any], jobs: Sequence[Job], *, history: bool = False
) -> Fenced:
    """Delete successfully finished jobs (one statement for the batch, or one per
    RESULTS_PER_STATEMENT of their results), fenced.

    Runs in the connection's current transaction, so a handler's own writes and the completion
    can commit together when the caller wants that.
    """
    if not jobs:
        return Fenced()
    fenced_runs = [
        read_claim(send_complete(conn, run, history=history), run).completed
        for run in results_chunks(jobs)
    ]
    if len(fenced_runs) == 1:
        return fenced_runs[0]
    return Fenced(
        [j for f in fenced_runs for j in f.kept], [j for f in fenced_runs for j in f.lost]
    )


def settle(
    conn: psycopg.Connection[Any], settlements: Sequence[Settlement], *, history: bool = False
) -> Fenced:
    """Record retries, snoozes, releases and discards (one statement for the batch), fenced."""
    if not settlements:
        return Fenced()
    cursor = send_settle(conn, settlements, history=history)
    return fenced(cursor, [s.job for s in settlements])


def renew_leases(
    conn: psycopg.Connection[Any],
    jobs: Sequence[Job],
    *,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> Fenced:
    """Extend the leases of many claimed jobs in one statement, fenced."""
    if not jobs:
        return Fenced()
    rows = conn.execute(
        query("renew_leases"),
        {
            "ids": [j.id for j in jobs],
            "lease_ids": [j.lease_id for j in jobs],
            "lease_seconds": lease_seconds,
        },
    ).fetchall()
    return _split(jobs, (r[0] for r in rows))


def renew_worker_leases(
    conn: psycopg.Connection[Any],
    workers: Sequence[str],
    *,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
) -> int:
    """Extend the lease of every job held by these worker identities; returns how many."""
    if not workers:
        return 0
    cursor = conn.execute(
        query("renew_worker_leases"),
        {"workers": list(workers), "lease_seconds": lease_seconds},
    )
    return cursor.rowcount


def lease_held(conn: psycopg.Connection[Any], job: Job) -> bool:
    row = conn.execute(query("lease_held"), {"id": job.id, "lease_id": job.lease_id}).fetchone()
    return bool(row and row[0])
