"""An unknown job holds its unique key (issue 30), on a real database.

A job of a kind with ``effects: external`` whose attempt ended without an outcome waits in
'unknown' while someone finds out whether its effect happened. Producers guard exactly those
jobs with a key (``charge:ORDER``): a retried request must get the first job back, not a second
one that charges again. These tests reproduce what went wrong when the unique index covered
available, running and scheduled jobs only, on every enqueue path, in the reconciler's round,
for a producer of the previous release during a rolling upgrade, and on an upgrade of a
database the old rule had already let a duplicate into.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, claim, enqueue, enqueue_async, enqueue_many, enqueue_many_async
from supervisor.queue.maintenance import requeue_worker
from supervisor.queue.migrations import available, migrate
from supervisor.queue.queries import parse
from supervisor.queue.unknown import resolve
from supervisor.services.reconciler import run_round
from tests.integration.operator_helpers import Cli, Restore

PREVIOUS = parse((Path(__file__).parent / "data" / "previous_enqueue.sql").read_text())


def _unknown(conn: psycopg.Connection[Any], args: dict[str, Any], key: str | None) -> int:
    """A charge_card job whose child died mid-attempt: its outcome is unknown."""
    job_id = enqueue(conn, "charge_card", args, unique_key=key)
    (job,) = claim(conn, "default", worker="h:1:a")
    assert job.id == job_id
    (moved,) = requeue_worker(
        conn, "h:1:a", "worker pay#0 (pid 1) killed", spent=[job_id], external_kinds=["charge_card"]
    )
    assert moved.state == "unknown"
    return job_id


# The previous release's enqueue of a charge_card job (data/previous_enqueue.sql's parameters),
# less its unique key.
PREVIOUS_CHARGE: dict[str, Any] = {
    "queue": "default",
    "kind": "charge_card",
    "args": '{"order": 7}',
    "priority": 0,
    "max_attempts": 10,
    "traceparent": None,
    "tenant": None,
    "run_at": None,
    "delay": 0.0,
    "notify": False,
}


def _enqueue_before(conn: psycopg.Connection[Any], args: dict[str, Any], key: str) -> int:
    """A charge_card job enqueued by the previous release's statement, which a database before
    the current schema runs (this release's reads tables added since, pgq.wakeup_flags, 0071)."""
    params = {**PREVIOUS_CHARGE, "args": json.dumps(args), "unique_key": key}
    row = conn.execute(PREVIOUS["enqueue"], params).fetchone()
    assert row is not None
    return int(row[0])


def _unknown_by_hand(conn: psycopg.Connection[Any], args: dict[str, Any], key: str) -> int:
    """_unknown on a database before the current schema, where this release's enqueue, claim and
    requeue cannot run (they read what was added since, such as order_key, 0066): the row it
    leaves."""
    job_id = _enqueue_before(conn, args, key)
    conn.execute(
        "UPDATE pgq.jobs SET state = 'unknown', attempts = 1, started_at = now(), "
        "last_error = 'outcome unknown (effects: external): worker pay#0 (pid 1) killed' "
        "WHERE id = %s",
        (job_id,),
    )
    return job_id


def _holders(conn: psycopg.Connection[Any], key: str) -> list[tuple[int, str]]:
    return conn.execute(
        "SELECT id, state FROM pgq.jobs WHERE unique_key = %s ORDER BY id", (key,)
    ).fetchall()


def test_every_enqueue_path_returns_the_unknown_job_holding_the_key(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    first = _unknown(conn, {"order": 7, "cents": 4200}, "charge:7")
    again = NewJob("charge_card", {"order": 7, "cents": 4200}, unique_key="charge:7")
    other = NewJob("charge_card", {"order": 8}, unique_key="charge:8")

    assert enqueue(conn, "charge_card", {"order": 7}, unique_key="charge:7") == first
    ids = enqueue_many(conn, [again, other])
    assert ids[0] == first and ids[1] != first
    assert conn.execute(
        "SELECT pgq.enqueue('charge_card', '{\"order\": 7}', unique_key => 'charge:7')"
    ).fetchone() == (first,)

    async def from_async() -> tuple[int, list[int]]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            one = await enqueue_async(aconn, "charge_card", {"order": 7}, unique_key="charge:7")
            many = await enqueue_many_async(aconn, [again, again])
            return one, many

    assert asyncio.run(from_async()) == (first, [first, first])
    # One job, the unknown one: nothing was enqueued to charge order 7 again.
    assert _holders(conn, "charge:7") == [(first, "unknown")]


def test_resolving_retry_after_a_same_key_enqueue_runs_the_job_again(
    conn: psycopg.Connection[Any],
) -> None:
    first = _unknown(conn, {"order": 7}, "charge:7")
    assert enqueue(conn, "charge_card", {"order": 7}, unique_key="charge:7") == first
    (done,) = resolve(conn, [first], "retry")
    assert (done.id, done.state, done.holder) == (first, "available", None)
    assert _holders(conn, "charge:7") == [(first, "available")]


def test_one_job_that_fails_does_not_stop_the_reconcile_round(
    conn: psycopg.Connection[Any], dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    broken = _unknown(conn, {"order": 1}, "charge:1")
    keyed = _unknown(conn, {"order": 2}, "charge:2")
    plain = _unknown(conn, {"order": 3}, None)
    exits = _unknown(conn, {"order": 4}, None)
    # A retried request for order 2 while its charge is unknown: before, a second job (and a
    # second charge), and the hook's "retry" below then failed on the unique index.
    assert enqueue(conn, "charge_card", {"order": 2}, unique_key="charge:2") == keyed
    # A write that fails for one job only, whatever the cause (here: a trigger refusing it).
    conn.execute(
        f"""
        CREATE FUNCTION public.refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.id = {broken} AND NEW.state <> 'unknown' THEN
                RAISE EXCEPTION 'job % cannot be written (test)', OLD.id;
            END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER refuse_one BEFORE UPDATE ON pgq.jobs
            FOR EACH ROW EXECUTE FUNCTION public.refuse_one();
        """
    )
    asked: list[int] = []

    def hook(job: Any) -> str:
        asked.append(job.id)
        if job.id == exits:
            sys.exit("the hook's own code called sys.exit")
        return "retry"

    with caplog.at_level(logging.ERROR, logger="pgq.reconcile"):
        run_round(dsn, {"charge_card": hook}, limit=10, hold=60, backoff=1, history=False)
    assert sorted(asked) == sorted([broken, keyed, plain, exits])
    states = dict(conn.execute("SELECT id, state FROM pgq.jobs ORDER BY id").fetchall())
    assert states == {broken: "unknown", keyed: "available", plain: "available", exits: "unknown"}
    assert any(f"job {broken} (charge_card)" in r.getMessage() for r in caplog.records)


def test_a_previous_release_producer_meeting_an_unknown_holder_fails_loudly_not_forever(
    conn: psycopg.Connection[Any],
) -> None:
    """During a rolling upgrade, producers of the previous release send their own statements.
    Their ON CONFLICT infers only the old index, so the new one refuses the insert: an error
    naming the key, no second job, and no loop (their enqueue looped while the insert did
    nothing and their look-up, blind to 'unknown', found no holder)."""
    first = _unknown(conn, {"order": 7}, "charge:7")
    waiting = enqueue(conn, "send_receipt", {"order": 7}, unique_key="receipt:7")
    with pytest.raises(psycopg.errors.UniqueViolation, match="jobs_unique_key_held"):
        conn.execute(PREVIOUS["enqueue"], {**PREVIOUS_CHARGE, "unique_key": "charge:7"})
    assert _holders(conn, "charge:7") == [(first, "unknown")]
    # A key held by a waiting job still works as it did for them: nothing inserted, and their
    # look-up finds the holder.
    inserted = conn.execute(PREVIOUS["enqueue"], {**PREVIOUS_CHARGE, "unique_key": "receipt:7"})
    assert inserted.fetchone() is None
    found = conn.execute(PREVIOUS["job_by_unique_key"], {"unique_key": "receipt:7"})
    assert found.fetchone() == (waiting,)


def test_concurrent_enqueues_of_a_new_key_wait_and_share_one_job(dsn: str) -> None:
    """Two unique indexes hold keys now; a race on one key must still end with one job and its
    id for both, never a UniqueViolation from an index the insert did not arbitrate."""
    with (
        psycopg.connect(dsn) as one,
        psycopg.connect(dsn, autocommit=True) as two,
    ):
        mine = enqueue(one, "charge_card", {"order": 9}, unique_key="charge:9")
        got: list[Any] = []

        def second() -> None:
            try:
                got.append(enqueue(two, "charge_card", {"order": 9}, unique_key="charge:9"))
            except Exception as exc:  # the assertion below names it
                got.append(exc)

        waiter = threading.Thread(target=second)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive()  # waiting for the first transaction's key
        one.commit()
        waiter.join(10)
        assert got == [mine]


def test_a_duplicate_from_before_the_upgrade_stops_migrate_until_resolved(
    empty_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old rule may already have let a second job take an unknown job's key: the index
    cannot be built over that, so migrate refuses, naming both jobs, and a retry of the unknown
    one is refused while the other holds the key; resolved otherwise, migrate goes on."""
    migrate(empty_dsn, shipped=[m for m in available() if m.version < 40])
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        first = _unknown_by_hand(conn, {"order": 7}, "charge:7")
        second = _enqueue_before(conn, {"order": 7}, "charge:7")
        with pytest.raises(psycopg.errors.UniqueViolation) as refused:
            migrate(empty_dsn)
        message = str(refused.value)
        assert f"job {first} (unknown) and job {second} (available)" in message
        assert "jobs resolve" in (refused.value.diag.message_hint or "")

        (held,) = resolve(conn, [first], "retry")
        assert (held.state, held.holder) == ("held", second)
        monkeypatch.setenv("PGQ_DSN", empty_dsn)
        restore = Restore()
        try:
            said = Cli(tmp_path, capsys)("jobs", "resolve", str(first), "--as", "retry")
        finally:
            restore()
        assert said.code == 1, said
        assert f"unique key is held by job {second}; it stays unknown" in said.err
        assert _holders(conn, "charge:7") == [(first, "unknown"), (second, "available")]

        resolve(conn, [first], "discarded")
        migrate(empty_dsn)
        assert enqueue(conn, "charge_card", {"order": 7}, unique_key="charge:7") == second
