"""Bad input: hostile and malformed YAML through the real CLI, and job arguments that cannot be
stored. Everything is refused with a clear message before anything runs or is written."""

from __future__ import annotations

import asyncio
import os
import subprocess
from datetime import date, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import (
    EnqueueError,
    NewJob,
    enqueue,
    enqueue_async,
    enqueue_batch,
    enqueue_many,
    enqueue_many_async,
)
from supervisor.queue.enqueue import MAX_ARGS_BYTES
from tests.commands import run_cli

NOBODY = "postgresql://nobody@127.0.0.1:1/none"
VALID = "handlers: {k: tests.handlers:noop}\npools: {p: {queues: {q: 1}}}\n"


def _laughs(levels: int = 9) -> str:
    """A billion-laughs value: nine aliases of nine aliases of ... nine strings, as one flow
    sequence (expanded, it would hold 9**10 strings)."""
    items = ['&l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        items.append(f"&l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return "[" + ", ".join(items) + "]"


def _cli(path: Path, *verb: str) -> subprocess.CompletedProcess[str]:
    # A database nobody listens on: a config that got past validation would fail with 1.
    return run_cli(path, *verb, env={**os.environ, "PGQ_DSN": NOBODY})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (VALID.replace("{q: 1}", '{q: 1}, processes: "two"'), "pools.p.processes"),
        (VALID.replace("{q: 1}", "{q: 1}, processes: 99999999999999999999999"), "processes"),
        (VALID.replace("{q: 1}", "{q: 1}, batch: 1e400"), "pools.p.batch"),
        (VALID.replace("{q: 1}", "{q: 1}, memory_limit: 9999999TiB"), "memory_limit"),
        (VALID + "shutdown_timeout: 1e308s\n", "shutdown_timeout"),
        (VALID.replace("{q: 1}", "{q: -5}"), "pools.p.queues.q"),
        (VALID + "frobnicate: 1\n", "frobnicate: unknown key"),
        (VALID + "jobs: {k: {timeout: [1, 2]}}\n", "jobs.k.timeout"),
        (VALID.replace("tests.handlers:noop", "'os.system; rm -rf /'"), "handlers.k"),
        ("handlers: [1, 2\n", "line"),
        ("\x00\xff\xfe garbage", ""),
        ("", ""),
        ("- just\n- a list\n", ""),
        (VALID + f"bomb: {_laughs()}\n", "bomb: unknown key"),
        (VALID.replace("{q: 1}", f"{{q: 1}}, max_jobs: {_laughs()}"), "pools.p.max_jobs"),
        (VALID.replace("{q: 1}", f"{_laughs()}"), "pools.p.queues"),
    ],
)
def test_malformed_yaml_exits_2_before_anything_runs(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, errors="surrogateescape")
    for verb in ([], ["check"]):
        result = _cli(path, *verb)
        assert result.returncode == 2, (verb, result.stdout, result.stderr)
        assert expected in result.stderr
        assert "Traceback" not in result.stderr


HOSTILE = [
    VALID + "metrics: TAG\n",
    "handlers: {k: tests.handlers:noop}\npools: {p: {queues: {q: 1}, processes: TAG}}\n",
    "handlers: {k: TAG}\npools: {p: {queues: {q: 1}}}\n",
    VALID + "database: {dsn: TAG}\n",
    "TAG\n",
]


@pytest.mark.parametrize("where", HOSTILE)
@pytest.mark.parametrize(
    "tag", ["!!python/object/apply:os.system", "!!python/object/new:os.system"]
)
def test_python_tags_are_refused_and_never_run(tmp_path: Path, where: str, tag: str) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "hostile.yaml"
    path.write_text(where.replace("TAG", f'{tag} ["touch {marker}"]'))
    for verb in ([], ["check"]):
        result = _cli(path, *verb)
        assert result.returncode == 2, result.stderr
        assert f"YAML tag '{tag}' is not allowed" in result.stderr
    assert not marker.exists()


# -- job arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (b"not a mapping", "args must be a JSON object"),
        (["a", "list"], "args must be a JSON object"),
        ('{"a": "json string"}', "args must be a JSON object"),
        ({"when": object()}, "not JSON-serialisable"),
        ({"x": float("nan")}, "not JSON-serialisable"),
        ({"x": float("inf")}, "not JSON-serialisable"),
        ({1j: "complex key"}, "not JSON-serialisable"),
        ({"nested": {"deep": ["a\x00b"]}}, "NUL character"),
        ({"key\x00": 1}, "NUL character"),
        ({"x": "\ud800"}, "not valid Unicode"),
        ({"\udcff": 1}, "not valid Unicode"),
        ({"x": "a" * MAX_ARGS_BYTES}, f"the limit is {MAX_ARGS_BYTES} bytes"),
        ({"x": "é" * (MAX_ARGS_BYTES // 2)}, f"the limit is {MAX_ARGS_BYTES} bytes"),
    ],
)
def test_args_that_cannot_be_stored_are_refused_clearly(
    conn: psycopg.Connection[Any], args: Any, message: str
) -> None:
    with pytest.raises(EnqueueError, match=message):
        enqueue(conn, "k", args)
    with pytest.raises(EnqueueError, match=message):
        enqueue_many(conn, [NewJob("k", {}), NewJob("k", args)])
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_args_just_under_the_limit_are_stored(conn: psycopg.Connection[Any]) -> None:
    overhead = len('{"x":""}')
    args = {"x": "a" * (MAX_ARGS_BYTES - overhead)}
    job_id = enqueue(conn, "k", args)
    stored = conn.execute("SELECT args->>'x' FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()
    assert stored is not None and len(stored[0]) == MAX_ARGS_BYTES - overhead
    with pytest.raises(EnqueueError, match="the limit is"):
        enqueue(conn, "k", {"x": args["x"] + "a"})


@pytest.mark.parametrize("name", ["\ud800", "a\x00b", "", " ", "q" * 201])
def test_bad_kind_and_queue_names_are_refused(conn: psycopg.Connection[Any], name: str) -> None:
    with pytest.raises(EnqueueError):
        enqueue(conn, name, {})
    with pytest.raises(EnqueueError):
        enqueue(conn, "k", {}, queue=name)
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("max_attempts", 2**40, "max_attempts must be at most 2147483647"),
        ("max_attempts", 2**31, "max_attempts must be at most 2147483647"),
        ("delay", 1e13, "more than a century"),
        ("delay", 10**12, "more than a century"),
        ("priority", 2**15, "outside -32768..32767"),
    ],
)
def test_numbers_past_their_column_are_refused_before_sending(
    conn: psycopg.Connection[Any], field: str, value: float, says: str
) -> None:
    """Before: max_attempts=2**40 and delay=1e13 reached the server, whose error aborted the
    caller's transaction (its business write with it)."""
    with conn.transaction():
        conn.execute("CREATE TEMP TABLE orders (id int)")
        conn.execute("INSERT INTO orders VALUES (1)")
        with pytest.raises(EnqueueError, match=says):
            enqueue(conn, "k", {}, **{field: value})
        with pytest.raises(EnqueueError, match=says):
            enqueue_many(conn, [NewJob("k", **{field: value})])
        # The caller's transaction goes on: nothing was sent.
        assert conn.execute("SELECT count(*) FROM orders").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


def test_a_literal_backslash_u0000_in_a_string_is_stored(conn: psycopg.Connection[Any]) -> None:
    # Before: refused as a NUL, though it is six printable characters.
    args = {"path": "C:\\u0000\\x", "odd": "\\\\u0000"}
    job_id = enqueue(conn, "k", args)
    assert conn.execute("SELECT args FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone() == (args,)
    with pytest.raises(EnqueueError, match="NUL"):
        enqueue(conn, "k", {"path": "C:\\\x00"})  # a backslash, then a real NUL


class _NoOffset(tzinfo):
    """A tzinfo that knows no offset: a datetime with it is naive, though its tzinfo is set."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None


def _nested(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    inner = top
    for _ in range(levels):
        inner["a"] = inner = {}
    return top


# Values of the wrong type (or past what Python can even print) that reached psycopg, the
# server or a slice before: a bare TypeError, OverflowError, RecursionError or ValueError, or a
# server error that aborted the caller's transaction. Each is the keyword given to enqueue and
# to NewJob (notify: to the call), and the message the EnqueueError must carry.
WRONG_TYPES = [
    pytest.param(
        "traceparent", 123, "job 'k': traceparent must be a string .*, not int", id="trace-int"
    ),
    pytest.param("traceparent", {"a": 1}, "job 'k': traceparent .*, not dict", id="trace-dict"),
    pytest.param("notify", 1, "notify must be True or False, not int", id="notify-1"),
    pytest.param("notify", 0, "notify must be True or False, not int", id="notify-0"),
    pytest.param("notify", "no", "notify must be True or False, not str", id="notify-str"),
    pytest.param("notify", None, "notify must be True or False, not NoneType", id="notify-none"),
    pytest.param("delay", 10**400, "job 'k': delay .* got ~10\\*\\*400", id="delay-huge"),
    pytest.param("delay", -(10**400), "job 'k': delay .* got ~-10\\*\\*400", id="delay-neg"),
    pytest.param(
        "priority", 10**5000, "job 'k': priority ~10\\*\\*5000 is outside", id="priority-huge"
    ),
    pytest.param(
        "max_attempts", 10**5000, "job 'k': max_attempts must be at most", id="attempts-huge"
    ),
    pytest.param(
        "run_at",
        datetime(2030, 1, 1, tzinfo=_NoOffset()),
        "job 'k': run_at must be timezone-aware",
        id="run_at-no-offset",
    ),
    pytest.param(
        "run_at", date(2030, 1, 1), "job 'k': run_at must be a datetime, not date", id="run_at-date"
    ),
    pytest.param("args", _nested(5000), "job 'k': args are nested too deeply", id="args-deep"),
]
PYTHON_PATHS = ["enqueue", "enqueue_async", "enqueue_many", "enqueue_many_async"]


async def _enqueue_by(path: str, conn: Any, field: str, value: Any) -> None:
    """Enqueue a job with ``field=value`` by one path; the bulk paths put a good job first."""
    notify = value if field == "notify" else True
    job = {} if field == "notify" else {field: value}
    if path == "enqueue":
        enqueue(conn, "k", notify=notify, **job)
    elif path == "enqueue_async":
        await enqueue_async(conn, "k", notify=notify, **job)
    elif path == "enqueue_many":
        enqueue_many(conn, [NewJob("ok"), NewJob("k", **job)], notify=notify)
    else:
        await enqueue_many_async(conn, [NewJob("ok"), NewJob("k", **job)], notify=notify)


@pytest.mark.parametrize("path", PYTHON_PATHS)
@pytest.mark.parametrize(("field", "value", "says"), WRONG_TYPES)
def test_wrong_types_are_refused_by_every_python_path_before_sending(
    dsn: str, path: str, field: str, value: Any, says: str
) -> None:
    async def attempt() -> None:
        if path.endswith("_async"):
            conn: Any = await psycopg.AsyncConnection.connect(dsn)
        else:
            conn = psycopg.connect(dsn)
        try:
            # The caller's own write, in the transaction the enqueue joins.
            await _maybe(conn.execute("CREATE TEMP TABLE orders AS SELECT 1 AS id"))
            with pytest.raises(EnqueueError, match=says):
                await _enqueue_by(path, conn, field, value)
            # Nothing was sent: the transaction goes on and commits the caller's write.
            cur = await _maybe(conn.execute("SELECT count(*) FROM orders"))
            assert await _maybe(cur.fetchone()) == (1,)
            await _maybe(conn.commit())
        finally:
            await _maybe(conn.close())

    asyncio.run(attempt())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


async def _maybe(result: Any) -> Any:
    """The result of a sync or async psycopg call alike."""
    return await result if asyncio.iscoroutine(result) else result


def test_a_connection_of_the_other_kind_is_refused_before_sending(dsn: str) -> None:
    """Before: enqueue_async on a sync Connection ran the INSERT, committed it (autocommit),
    then raised TypeError on its await; enqueue on an AsyncConnection raised TypeError."""

    async def attempts() -> None:
        with psycopg.connect(dsn, autocommit=True) as sync:
            enqueue(sync, "warm")  # the connection holds its enqueue cursor now
            for call in (
                lambda: enqueue_async(sync, "k"),
                lambda: enqueue_many_async(sync, [NewJob("k"), NewJob("k")]),
            ):
                with pytest.raises(EnqueueError, match=r"conn must be a psycopg\.AsyncConnection"):
                    await call()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            for wrong in (
                lambda: enqueue(aconn, "k"),
                lambda: enqueue_many(aconn, [NewJob("k"), NewJob("k")]),
            ):
                with pytest.raises(EnqueueError, match="not AsyncConnection; await enqueue_async"):
                    wrong()
        for nothing in (None, dsn):
            with pytest.raises(EnqueueError, match=r"conn must be a psycopg\.Connection, not"):
                enqueue(nothing, "k")  # type: ignore[arg-type]

    asyncio.run(attempts())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT kind FROM pgq.jobs").fetchall() == [("warm",)]


@pytest.mark.parametrize(
    ("jobs", "says"),
    [
        (None, "jobs must be an iterable of NewJob .*, not NoneType"),
        (NewJob("k"), "jobs must be an iterable of NewJob .*, not NewJob"),
        ([NewJob("ok"), {"kind": "k"}], "each job must be a NewJob, not dict: {'kind': 'k'}"),
        ([NewJob("ok"), "k"], "each job must be a NewJob, not str"),
    ],
)
def test_bulk_jobs_that_are_not_new_jobs_are_refused(
    conn: psycopg.Connection[Any], dsn: str, jobs: Any, says: str
) -> None:
    # Before: TypeError ('NoneType' object is not iterable) or AttributeError (no attribute 'kind').
    with pytest.raises(EnqueueError, match=says):
        enqueue_many(conn, jobs)
    with pytest.raises(EnqueueError, match=says):
        enqueue_batch(conn, jobs)

    async def many_async() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            await enqueue_many_async(aconn, jobs)

    with pytest.raises(EnqueueError, match=says):
        asyncio.run(many_async())
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


@pytest.mark.parametrize(
    "name", ["a\nb", "pdf\r", "x\x1b[31mred", "q\u202eevil", "tab\there", "del\x7f", "l\u2028s"]
)
def test_kinds_and_queues_with_control_characters_are_refused(
    conn: psycopg.Connection[Any], name: str
) -> None:
    # Before: stored, and every log line naming the job printed the newline or the escape.
    with pytest.raises(EnqueueError, match="control or format character U\\+"):
        enqueue(conn, name, {})
    with pytest.raises(EnqueueError, match="control or format character U\\+"):
        enqueue(conn, "k", {}, queue=name)
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (0,)


@pytest.mark.parametrize("password", ["a", "pdf", "postgres", "failed"])
def test_a_short_or_ordinary_password_does_not_garble_logs(password: str) -> None:
    from supervisor.queue.dsn import scrub

    dsn = f"postgresql://postgres:{password}@db.example/app"
    line = 'job 12 (pdf) on queue a: password authentication failed for user "postgres"'
    # Before: every "a" (or "postgres") in the line became ***.
    assert scrub(line, dsn) == line
    assert scrub(f"cannot connect: {dsn}", dsn) == (
        "cannot connect: postgresql://postgres:***@db.example/app"
    )
    assert scrub(f"password={password} host=db", dsn) == "password=*** host=db"


def test_a_real_password_is_removed_wherever_it_stands() -> None:
    from supervisor.queue.dsn import scrub

    dsn = "postgresql://app:Kn0wn-P4ss-w0rd@db/app"
    assert scrub("echoed Kn0wn-P4ss-w0rd back", dsn) == "echoed *** back"


# -- no database given (issue 11, item 7) ----------------------------------------------------


@pytest.mark.parametrize("verb", ["run", "migrate"])
def test_no_dsn_and_no_embedded_opt_in_exits_2_naming_the_ways(tmp_path: Path, verb: str) -> None:
    """A production host whose environment lost PGQ_DSN refuses to start: before, it started
    an embedded PostgreSQL on an empty data folder and ran its children against it."""
    data = tmp_path / "pg"
    config = tmp_path / "q.yaml"
    config.write_text(VALID + f"database: {{embedded_dir: {data}}}\n")
    env = {k: v for k, v in os.environ.items() if k != "PGQ_DSN"}
    result = run_cli(config, verb, env=env, timeout=30)
    said = result.stderr
    assert result.returncode == 2, said + result.stdout
    for way in ("PGQ_DSN", "--dsn", "database.dsn", "database.embedded: true", "--embedded"):
        assert way in said, (way, said)
    assert not data.exists()  # nothing was started, not even initdb


def test_embedded_and_a_dsn_together_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(VALID + "database: {dsn: 'postgresql://x@h/d', embedded: true}\n")
    result = _cli(config, "check")
    assert result.returncode == 2
    assert "database.embedded: cannot be true with database.dsn set" in result.stderr


def test_the_shipped_config_opts_in_to_the_embedded_server() -> None:
    from supervisor.config import load_config
    from tests.commands import ROOT

    assert load_config(str(ROOT / "config" / "queues.yaml")).database.embedded


NO_AUTO_MIGRATE = """
database: {auto_migrate: false}
handlers: {noop: tests.handlers:noop}
pools: {main: {processes: 1, queues: {default: 1}}}
"""


def test_run_on_a_database_without_the_schema_exits_2_and_says_to_migrate(
    tmp_path: Path, empty_dsn: str
) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(NO_AUTO_MIGRATE)
    done = run_cli(config, "run", env={**os.environ, "PGQ_DSN": empty_dsn}, timeout=30)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "has no pgq schema" in done.stderr
    assert f"pgq-supervisor -c {config} migrate" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") < 5, done.stderr
    # An old schema (a migration not applied) is named too.
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        from supervisor.queue.migrations import migrate

        migrate(conn)
        (last,) = conn.execute("SELECT max(version) FROM pgq.schema_migrations").fetchone()
        conn.execute("DELETE FROM pgq.schema_migrations WHERE version = %s", (last,))
    done = run_cli(config, "run", env={**os.environ, "PGQ_DSN": empty_dsn}, timeout=30)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"1 migration(s) not applied: {last:04d}_" in done.stderr
