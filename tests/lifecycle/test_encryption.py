"""Encrypted arguments with the real supervisor (issue 30 item 3): Secret on every enqueue path,
the row and a pg_dump of the table holding only envelopes, handlers on inline and threaded
pools getting the plaintext (first attempts, retries, a batch's then job), the refusals of an
`encrypt:` field stored in clear and of a key the supervisor lacks, and an error text that
quotes a secret scrubbed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, Secret, enqueue, enqueue_async, enqueue_batch, enqueue_many
from supervisor.queue.keyring import new_key
from tests.commands import run_cli
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for
from tests.secret_handlers import SECRETS

CARD = "4111-1111-1111-1234"
PIN = "480213"
TOKEN = "tok_live_9f8e7d6c5b4a"
PLAINTEXTS = (CARD, PIN, TOKEN, "1111-1234")

POOLS = """
handlers:
  see: tests.secret_handlers:see
  quote: tests.secret_handlers:quote
pools:
  inline: {processes: 1, queues: {inline: 1}}
  threaded: {processes: 1, threads: 4, queues: {threaded: 1}}
jobs:
  see: {encrypt: [card], backoff: {base: 100ms, cap: 200ms}, max_attempts: %(attempts)s}
  quote: {max_attempts: 1}
"""


@pytest.fixture
def keys_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """PGQ_KEYS for this process (the enqueuer) and the supervisor's environment."""
    value = f"k2:{new_key()},k1:{new_key()}"
    monkeypatch.setenv("PGQ_KEYS", value)
    yield value


@pytest.fixture
def secrets_table(ledger: str) -> str:
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute(SECRETS)
    return ledger


def _seen(dsn: str, job_id: int) -> list[tuple[Any, ...]]:
    return query(
        dsn,
        "SELECT attempt, args, thread FROM test_secrets WHERE job_id = %s ORDER BY attempt",
        (job_id,),
    )


def _no_plaintext(dsn: str, *, envelopes: bool | None = True) -> None:
    """Neither the rows (args, then_args, last_error) nor a pg_dump of the tables hold one."""
    rows = query(
        dsn,
        "SELECT coalesce(string_agg(j::text, ' '), '') FROM pgq.jobs AS j "
        "UNION ALL SELECT coalesce(string_agg(b::text, ' '), '') FROM pgq.batches AS b",
    )
    text = " ".join(r[0] for r in rows)
    assert envelopes is None or ("$pgq_secret" in text) == envelopes
    for plain in PLAINTEXTS:
        assert plain not in text
    dump = shutil.which("pg_dump")
    with psycopg.connect(dsn) as conn:
        same_major = conn.info.server_version // 10000 == 15
    if dump is None or not same_major:
        return  # Debian's pg_dump is 15's: the embedded 18 server is dumped by the rows above
    out = subprocess.run(
        [dump, "--data-only", "-t", "pgq.jobs", "-t", "pgq.batches", dsn],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert envelopes is None or ("$pgq_secret" in out) == envelopes
    for plain in PLAINTEXTS:
        assert plain not in out


def test_handlers_on_inline_and_threaded_pools_get_the_plaintext_and_the_table_holds_none(
    supervisor: Callable[..., Supervisor], secrets_table: str, keys_env: str
) -> None:
    dsn = secrets_table
    ids: dict[str, int] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for queue in ("inline", "threaded"):
            ids[f"one-{queue}"] = enqueue(
                conn, "see", {"card": Secret(CARD), "n": 1, "fail_first": True}, queue=queue
            )
            ids[f"many-{queue}"], ids[f"nested-{queue}"] = enqueue_many(
                conn,
                [
                    NewJob("see", {"card": Secret(CARD), "pin": Secret(PIN)}, queue=queue),
                    NewJob("see", {"card": Secret({"n": CARD, "tokens": [TOKEN]})}, queue=queue),
                ],
            )
            batch = enqueue_batch(
                conn,
                [NewJob("see", {"card": Secret(CARD)}, queue=queue)],
                then=NewJob("see", {"card": Secret(TOKEN), "then": True}, queue=queue),
            )
            ids[f"member-{queue}"] = batch.job_ids[0]

    async def produce() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            ids["async"] = await enqueue_async(aconn, "see", {"card": Secret(PIN)}, queue="inline")

    asyncio.run(produce())
    _no_plaintext(dsn)  # before any run: what enqueue wrote (and the batch's then job)
    sup = supervisor(POOLS % {"attempts": 3}, extra_env={"PGQ_KEYS": keys_env}).start()
    for name, job_id in ids.items():
        runs = 2 if name.startswith("one-") else 1  # a first attempt that failed, its retry
        wait_for(lambda j=job_id, n=runs: len(_seen(dsn, j)) == n, 60, what=f"{name} ran")
    thens = wait_for(
        lambda: (lambda rows: rows if len(rows) == 2 else None)(
            query(dsn, "SELECT job_id FROM test_secrets WHERE args LIKE '%%\"then\"%%'")
        ),
        60,
        what="both then jobs ran",
    )
    for queue in ("inline", "threaded"):
        first, again = _seen(dsn, ids[f"one-{queue}"])
        assert json.loads(first[1]) == {"card": CARD, "n": 1, "fail_first": True}
        assert json.loads(again[1]) == json.loads(first[1]), "the retry sees the plaintext"
        ((_, many, thread),) = _seen(dsn, ids[f"many-{queue}"])
        assert json.loads(many) == {"card": CARD, "pin": PIN}
        assert thread.startswith("handler-") == (queue == "threaded"), thread
        ((_, nested, _),) = _seen(dsn, ids[f"nested-{queue}"])
        assert json.loads(nested) == {"card": {"n": CARD, "tokens": [TOKEN]}}
    for (then_id,) in thens:
        ((_, then_args, _),) = _seen(dsn, then_id)
        assert json.loads(then_args) == {"card": TOKEN, "then": True}
    ((_, async_args, _),) = _seen(dsn, ids["async"])
    assert json.loads(async_args) == {"card": PIN}
    # After the runs: completions and retries wrote none back (completed jobs are deleted; the
    # batches keep their then jobs' envelopes).
    _no_plaintext(dsn, envelopes=None)
    sup.stop()
    for plain in PLAINTEXTS:
        assert plain not in sup.log()


def test_a_field_in_clear_and_a_missing_key_are_refused_naming_the_field_or_key(
    supervisor: Callable[..., Supervisor], secrets_table: str, keys_env: str
) -> None:
    dsn = secrets_table
    with psycopg.connect(dsn, autocommit=True) as conn:
        # From SQL (another language's producer): the encrypt: field arrives in clear.
        clear = conn.execute(
            "SELECT pgq.enqueue('see', %s::jsonb, 'inline')", (json.dumps({"card": CARD}),)
        ).fetchone()[0]
        fine = enqueue(conn, "see", {"card": Secret(CARD)}, queue="threaded")
    # Sealed under a key the supervisor will not have.
    other = f"k9:{new_key()}"
    os.environ["PGQ_KEYS"] = other
    with psycopg.connect(dsn, autocommit=True) as conn:
        lacking = enqueue(conn, "see", {"card": Secret(CARD)}, queue="inline")
    os.environ["PGQ_KEYS"] = keys_env
    with psycopg.connect(dsn, autocommit=True) as conn:
        quoted = enqueue(conn, "quote", {"card": Secret(CARD)}, queue="inline")
    sup = supervisor(POOLS % {"attempts": 2}, extra_env={"PGQ_KEYS": keys_env}).start()

    def state(job_id: int) -> tuple[str, str | None, int]:
        ((s, error, attempts),) = query(
            dsn, "SELECT state, last_error, attempts FROM pgq.jobs WHERE id = %s", (job_id,)
        )
        return s, error, attempts

    for job_id in (clear, lacking, quoted):
        wait_for(lambda j=job_id: state(j)[0] == "discarded", 60, what=f"job {job_id} discarded")
    wait_for(lambda: _seen(dsn, fine), 60, what="the sealed job ran")
    _, error, attempts = state(clear)
    assert attempts == 1 and error is not None
    assert f"job {clear} (see): argument 'card' is stored in clear" in error
    assert "jobs.see.encrypt" in error
    assert _seen(dsn, clear) == [], "the handler never ran"
    _, error, attempts = state(lacking)
    assert attempts == 2, "a missing key follows the kind's retries, then discards"
    assert "key 'k9'" in error and "lacks" in error and "replay" in error
    assert _seen(dsn, lacking) == []
    _, error, attempts = state(quoted)
    assert "declined" in error and CARD not in error and "[encrypted]" in error
    # Every surface an operator reads shows the envelope's key id, never a value: the discarded
    # job under k9 (which nobody here can open) and the one whose error quoted the card.
    for argv in (
        ("jobs", "show", str(lacking)),
        ("jobs", "show", str(quoted)),
        ("jobs", "show", str(quoted), "--json"),
        ("jobs", "list", "--state", "discarded"),
        ("jobs", "list", "--state", "discarded", "--json"),
        ("dlq", "list"),
        ("status",),
    ):
        out = run_cli(sup.config, *argv, env=sup.env)
        assert CARD not in out.stdout + out.stderr, argv
        assert "$pgq_secret" not in out.stdout, argv
    shown = run_cli(sup.config, "jobs", "show", str(lacking), env=sup.env).stdout
    assert "[encrypted: key k9]" in shown, shown
    sup.stop()
    assert f"job {clear} (see): argument 'card' is stored in clear" in sup.log()
    assert "key 'k9'" in sup.log()
    assert CARD not in sup.log()


def test_a_key_added_to_the_keys_file_by_a_reload_opens_the_jobs_waiting_for_it(
    supervisor: Callable[..., Supervisor], secrets_table: str, tmp_path: Any
) -> None:
    dsn = secrets_table
    old, new = f"k1:{new_key()}", f"k2:{new_key()}"
    (tmp_path / "keys").write_text(f"# the supervisor's keys\n{old}\n")
    yaml_text = POOLS % {"attempts": 1000} + "encryption: {keys_file: keys}\n"
    env = {k: v for k, v in os.environ.items() if k != "PGQ_KEYS"}
    sup = supervisor(yaml_text)
    sup.env = {**env, "PGQ_DSN": dsn, "PYTHONPATH": sup.env["PYTHONPATH"]}
    sup.start()
    os.environ["PGQ_KEYS"] = new  # a producer that got the new key first
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            job_id = enqueue(conn, "see", {"card": Secret(CARD)}, queue="threaded")
    finally:
        del os.environ["PGQ_KEYS"]
    wait_for(
        lambda: (
            "key 'k2'"
            in (scalar(dsn, "SELECT last_error FROM pgq.jobs WHERE id = %s", (job_id,)) or "")
        ),
        60,
        what="the attempt that lacks k2",
    )
    assert _seen(dsn, job_id) == []
    (tmp_path / "keys").write_text(f"{new}\n{old}\n")
    sup.send(signal.SIGHUP)
    ((_, args, _),) = wait_for(lambda: _seen(dsn, job_id), 60, what="the job ran after the reload")
    assert json.loads(args) == {"card": CARD}
    sup.wait_log("keys of encrypted arguments changed")
    assert new.split(":")[1] not in sup.log() and CARD not in sup.log()
