"""Bad input that reaches a running supervisor: hostile names, kinds it does not know, argument
rows it cannot call a handler with, and a DSN with the wrong password."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.embedded.server import available
from tests.commands import run_cli
from tests.lifecycle.harness import ROOT, Supervisor, query, scalar, wait_for
from tests.lifecycle.own_server import create_login, own_server

KIND = "it's\"; DROP TABLE pgq.jobs; -- ü🚀"
QUEUE = "q'; DELETE FROM pgq.jobs; --\"ünï"


def _enqueue(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, jobs)


def _yaml_single_quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def test_hostile_kind_and_queue_names_run_end_to_end(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    kind, queue = _yaml_single_quoted(KIND), _yaml_single_quoted(QUEUE)
    sup = supervisor(f"""
        handlers:
          {kind}: tests.handlers:record
        pools:
          main:
            processes: 1
            poll_interval: 30s
            queues: {{{queue}: 2, plain: 1}}
        jobs:
          {kind}: {{max_attempts: 3}}
    """).start()
    sup.wait_children(1)
    sup.wait_log("spawned main#1")
    # Enqueued while it runs: the NOTIFY payload carries the queue name to the master, which
    # must wake the child (the poll interval is far longer than the test waits).
    ids = _enqueue(ledger, [NewJob(KIND, {"name": KIND}, queue=QUEUE) for _ in range(3)])
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, 20, what="done")
    ran = query(ledger, "SELECT DISTINCT job_id FROM test_ledger ORDER BY 1")
    assert [r[0] for r in ran] == sorted(ids)
    assert scalar(ledger, "SELECT to_regclass('pgq.jobs') IS NOT NULL")
    assert sup.stop() == 0


def test_unknown_kinds_are_retried_then_discarded_and_never_imported(
    supervisor: Callable[..., Supervisor], ledger: str, tmp_path: Path
) -> None:
    # A module that would betray an import: a job row must never make the supervisor load code.
    marker = tmp_path / "imported"
    (tmp_path / "canary_mod.py").write_text(
        f"open({str(marker)!r}, 'w').close()\ndef boom(**kw):\n    pass\n"
    )
    kinds = ["nope", "os:system", "subprocess.call", "canary_mod:boom", "canary_mod"]
    ids = _enqueue(ledger, [NewJob(k, {"command": "touch /tmp/x"}, max_attempts=2) for k in kinds])
    sup = supervisor(
        """
        handlers:
          record: tests.handlers:record
        pools:
          main:
            processes: 1
            queues: {default: 1}
        """,
        extra_env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])},
    ).start()
    rows = wait_for(
        lambda: (
            r
            if len(
                r := query(
                    ledger,
                    "SELECT id, kind, attempts, last_error FROM pgq.jobs "
                    "WHERE state = 'discarded' ORDER BY id",
                )
            )
            == len(ids)
            else None
        ),
        30,
        what="every unknown kind discarded",
    )
    for (_, kind, attempts, last_error), expected in zip(rows, kinds, strict=True):
        assert kind == expected
        assert attempts == 2
        assert f"no handler for kind {kind!r}" in last_error
        assert "a worker from a newer deploy may know it" in last_error
    log = sup.log()
    # Retried with backoff before it was given up, with the kind in the message.
    assert "(nope) on queue default failed attempt 1, retrying in" in log
    assert not marker.exists()
    assert sup.stop() == 0


def test_a_newer_kind_waits_for_the_deploy_that_knows_it(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("brand_new", max_attempts=5)])
    old = supervisor("""
        handlers:
          record: tests.handlers:record
        pools:
          main: {processes: 1, queues: {default: 1}}
    """).start()
    wait_for(
        lambda: query(
            ledger,
            # Waiting for its retry: scheduled during the backoff, available once it is over.
            "SELECT 1 FROM pgq.jobs WHERE id = %s AND attempts >= 1 "
            "AND state IN ('scheduled', 'available')",
            (job_id,),
        ),
        60,
        what="the old deploy retrying the job",
    )
    assert old.stop() == 0
    # Stopping spawned nothing: a child started after the SIGTERM would have gone on retrying
    # (and spending) the job until the shutdown timeout killed it.
    assert old.log().count("spawned main#1") == 1, old.log()
    new = supervisor("""
        handlers:
          record: tests.handlers:record
          brand_new: tests.handlers:record
        pools:
          main: {processes: 1, queues: {default: 1}}
    """).start()
    # Its run_at is after the old deploy's backoff (1-2 s, or 2-4 s after a second attempt).
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0, 90, what="done")
    assert query(ledger, "SELECT job_id FROM test_ledger") == [(job_id,)]
    assert new.stop() == 0


def test_argument_rows_that_are_not_objects_fail_the_job_not_the_worker(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    # Written behind the API's back (by SQL, an older client): jsonb that is no object.
    with psycopg.connect(ledger, autocommit=True) as conn:
        bad = [
            conn.execute(
                "INSERT INTO pgq.jobs (kind, args, max_attempts) VALUES ('record', %s::jsonb, 1) "
                "RETURNING id",
                (value,),
            ).fetchone()[0]  # type: ignore[index]
            for value in ("[1, 2]", '"text"', "null", "42")
        ]
    (good,) = _enqueue(ledger, [NewJob("record")])
    sup = supervisor("""
        handlers:
          record: tests.handlers:record
        pools:
          main: {processes: 1, queues: {default: 1}}
    """).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded'") == 4,
        30,
        what="bad rows discarded",
    )
    wait_for(lambda: query(ledger, "SELECT 1 FROM test_ledger WHERE job_id = %s", (good,)))
    errors = query(ledger, "SELECT last_error FROM pgq.jobs WHERE id = ANY(%s)", (bad,))
    assert all("must be a mapping" in e for (e,) in errors), errors
    assert "crashed in the worker loop" not in sup.log()
    assert sup.stop() == 0


def test_arguments_that_do_not_fit_the_signature_are_discarded_at_once(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    # One wrong key in a bulk enqueue: before, each was retried as if transient (a TypeError).
    wrong, missing, inside = _enqueue(
        ledger,
        [
            NewJob("offline", {"secs": 0}, max_attempts=5),
            NewJob("offline", {}, max_attempts=5),
            NewJob("inside", {"seconds": 1}, max_attempts=2),
        ],
    )
    sup = supervisor("""
        handlers:
          offline: tests.handlers:sleep_offline
          inside: tests.handlers:type_error_inside
        pools:
          main: {processes: 1, queues: {default: 1}}
    """).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded'") == 3,
        30,
        what="all three discarded",
    )
    rows = dict(
        (r[0], r[1:])
        for r in query(
            ledger,
            "SELECT id, attempts, last_error FROM pgq.jobs WHERE id = ANY(%s)",
            ([wrong, missing, inside],),
        )
    )
    assert rows[wrong][0] == 1, rows  # the first attempt only, not five
    assert "unexpected argument 'secs'" in rows[wrong][1]
    assert "missing argument 'seconds'" in rows[wrong][1]
    assert "tests.handlers:sleep_offline" in rows[wrong][1]
    assert "discarded without a retry" in rows[wrong][1]
    assert rows[missing][0] == 1 and "missing argument 'seconds'" in rows[missing][1]
    # A TypeError from inside the handler is the handler's failure: retried, both attempts run.
    assert rows[inside][0] == 2, rows
    assert "TypeError" in rows[inside][1] and "do not match" not in rows[inside][1]
    ran = query(ledger, "SELECT job_id FROM test_ledger")
    assert ran == [(inside,), (inside,)], ran  # the mismatched handler never ran
    assert sup.stop() == 0


@pytest.mark.skipif(not available(), reason="needs the embedded PostgreSQL")
def test_wrong_password_is_a_clear_error_exit_1_without_the_password(tmp_path: Path) -> None:
    secret = "Wr0ng-S3cret-Pass"
    config = tmp_path / "q.yaml"
    config.write_text(
        "handlers: {record: tests.handlers:record}\npools: {main: {queues: {default: 1}}}\n"
    )
    with own_server(password_auth=True) as server:
        good = create_login(server, "app", "the-right-one")
        wrong = good.replace("the-right-one", secret)
        runs = [
            (["run"], {"PGQ_DSN": wrong}),
            (["migrate"], {"PGQ_DSN": wrong}),
            (["--dsn", wrong, "run"], {}),
        ]
        for args, env in runs:
            flags, verb = args[:-1], args[-1:]
            result = run_cli(
                config,
                *flags,
                *verb,
                env={**{k: v for k, v in os.environ.items() if k != "PGQ_DSN"}, **env},
            )
            said = result.stdout + result.stderr
            assert result.returncode == 1, said
            assert 'password authentication failed for user "app"' in said
            assert secret not in said
            assert "Traceback" not in said
