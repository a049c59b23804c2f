"""Concurrent producers: one job per transaction through every enqueue path, beside a plain
INSERT of the same row into a copy of pgq.jobs, on one server, in one run.

Each producer is a connection of its own, driven from forked processes (up to PROCESSES of
them, each running producers/PROCESSES connections on threads, or on asyncio tasks for the
async paths), so the Python side is spread over the cores like real web processes are. Every
producer counts the transactions it committed inside the same window of wall time (the window
starts after all of them connected); throughput is their sum over the window.

"before" is the enqueue statement as it was before the wake-up flags (migration 0021): the
INSERT and a pg_notify in every transaction (scripts/benchmarks/benchlib/producers.sql, copied
verbatim), so before and after are measured side by side on one schema.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing as mp
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from supervisor.queue.queries import parse

STATEMENTS = parse((Path(__file__).with_name("producers.sql")).read_text(encoding="utf-8"))
PROCESSES = 16
SYNC_PATHS = ("insert", "insert_notify", "before", "enqueue", "enqueue_many", "pgq.enqueue")
ASYNC_PATHS = ("insert_async", "enqueue_async", "enqueue_many_async")
PATHS = SYNC_PATHS + ASYNC_PATHS
# A library path with this suffix runs another tree's supervisor package (--baseline): the
# producers' processes import it afresh after the fork, so both revisions run in one run.
BASELINE = "@baseline"
LIBRARY_PATHS = ("enqueue", "enqueue_many", "enqueue_async", "enqueue_many_async")


def plain(path: str) -> str:
    """The path without its baseline suffix."""
    return path.removesuffix(BASELINE)


def _use_tree(tree: str) -> None:
    """In a forked producer process: forget this tree's supervisor modules and import tree's."""
    for name in list(sys.modules):
        if name == "supervisor" or name.startswith("supervisor."):
            del sys.modules[name]
    sys.path.insert(0, tree)
    lib = importlib.import_module("supervisor")
    if not str(Path(lib.__file__ or "").resolve()).startswith(str(Path(tree).resolve())):
        raise RuntimeError(f"{lib.__file__} is not under {tree}")


ARGS = {"order": 1234, "customer": "c-42"}
# Seconds ahead every job is due (--delay): 0 writes jobs due now; more writes them 'scheduled',
# for the stagers, on every path (the plain INSERT writes the same row). Set before run() forks.
DELAY = 0.0
STATEMENT_OF = {
    "insert": "plain_insert",
    "insert_notify": "plain_insert_notify",
    "before": "enqueue_before",
    "pgq.enqueue": "sql_enqueue",
}


def _params(queue: str) -> dict[str, Any]:
    return {
        "queue": queue,
        "kind": "k",
        "args": Jsonb(ARGS),
        "priority": 0,
        "run_at": None,
        "delay": DELAY,
        "max_attempts": 10,
        "unique_key": None,
        "notify": True,
    }


def _sync_call(path: str, conn: psycopg.Connection[Any], queue: str) -> Callable[[], object]:
    lib: Any = importlib.import_module("supervisor")  # this tree's, or the baseline's
    if path in STATEMENT_OF:
        statement, params = STATEMENTS[STATEMENT_OF[path]], _params(queue)
        return lambda: conn.execute(statement, params)
    if path == "enqueue":
        return lambda: lib.enqueue(conn, "k", ARGS, queue=queue, delay=DELAY)
    if path == "enqueue_many":
        return lambda: lib.enqueue_many(conn, [lib.NewJob("k", ARGS, queue=queue, delay=DELAY)])
    raise ValueError(f"unknown path {path!r}")


def _sync_producers(dsn: str, path: str, queue: str, count: int, start: float, end: float) -> int:
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(count)]
    totals = [0] * count

    def produce(i: int) -> None:
        call = _sync_call(path, conns[i], queue)
        call()  # warm: prepared plans, caches
        while time.time() < start:
            time.sleep(0.001)
        n = 0
        while time.time() < end:
            call()
            n += 1
        totals[i] = n

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    return sum(totals)


async def _async_producers(
    dsn: str, path: str, queue: str, count: int, start: float, end: float
) -> int:
    conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(count)]
    lib: Any = importlib.import_module("supervisor")  # this tree's, or the baseline's

    async def produce(conn: psycopg.AsyncConnection[Any]) -> int:
        statement, params = STATEMENTS["plain_insert"], _params(queue)

        async def call() -> None:
            if path == "insert_async":
                await conn.execute(statement, params)
            elif path == "enqueue_async":
                await lib.enqueue_async(conn, "k", ARGS, queue=queue, delay=DELAY)
            else:
                await lib.enqueue_many_async(
                    conn, [lib.NewJob("k", ARGS, queue=queue, delay=DELAY)]
                )

        await call()
        while time.time() < start:
            await asyncio.sleep(0.001)
        n = 0
        while time.time() < end:
            await call()
            n += 1
        return n

    totals = await asyncio.gather(*(produce(c) for c in conns))
    for c in conns:
        await c.close()
    return sum(totals)


def _process(
    dsn: str, path: str, queue: str, count: int, start: float, end: float, out: Any, tree: str
) -> None:
    if path.endswith(BASELINE):
        _use_tree(tree)
        path = plain(path)
    if path in ASYNC_PATHS:
        out.put(asyncio.run(_async_producers(dsn, path, queue, count, start, end)))
    else:
        out.put(_sync_producers(dsn, path, queue, count, start, end))


def run(
    dsn: str,
    path: str,
    producers: int,
    seconds: float,
    queue: str = "default",
    baseline: str = "",
) -> float:
    """Transactions per second of ``producers`` concurrent one-job transactions on ``path``
    (``enqueue@baseline``: the library of the tree at ``baseline``)."""
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    processes = min(producers, PROCESSES)
    shares = [
        producers // processes + (1 if i < producers % processes else 0) for i in range(processes)
    ]
    # Every producer connects and warms up first; the window opens for all at once.
    start = time.time() + 1.0 + 0.02 * producers
    end = start + seconds
    procs = [
        ctx.Process(target=_process, args=(dsn, path, queue, n, start, end, out, baseline))
        for n in shares
    ]
    for p in procs:
        p.start()
    total = sum(out.get(timeout=seconds + 120) for _ in procs)
    for p in procs:
        p.join(30)
    return round(total / seconds, 1)


def prepare(dsn: str) -> None:
    """The copy of pgq.jobs the plain INSERT writes to (same columns, defaults, indexes)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(STATEMENTS["create_copy"])


def reset(dsn: str) -> None:
    """Empty both tables between runs, so that every run starts from the same size."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(STATEMENTS["truncate_both"])
        conn.execute("CHECKPOINT")


# -- the same statements through pgbench: the database side alone, no Python client -------------

_ARGS_LITERAL = '\'{"order": 1234, "customer": "c-42"}\''
LITERALS = {
    "queue": "'default'",
    "kind": "'k'",
    "args": _ARGS_LITERAL,
    "priority": "0",
    "run_at": "NULL",
    "delay": "0",
    "max_attempts": "10",
    "unique_key": "NULL",
    "notify": "true",
}
PGBENCH_PATHS = ("insert", "insert_notify", "before", "enqueue", "pgq.enqueue")


def pgbench_statement(path: str) -> str:
    """The statement a path sends, with literals for its parameters (enqueue is the library's
    statement from sql/enqueue.sql, the others this benchmark's)."""
    from supervisor.queue.queries import query

    if path == "enqueue":  # what enqueue and a one-job enqueue_many send
        text, values = query(path), LITERALS
    else:
        text, values = STATEMENTS[STATEMENT_OF[path]], LITERALS
    from benchlib.limit import substitute

    return substitute(text, values) + ";\n"


def pgbench_tps(dsn: str, path: str, clients: int, seconds: float) -> float:
    import subprocess
    import tempfile

    from benchlib.limit import _parse, _pgbench_target, find_pgbench

    target, env = _pgbench_target(dsn)
    with tempfile.TemporaryDirectory(prefix="pgq-producers-") as tmp:
        script = Path(tmp) / "producer.sql"
        script.write_text(pgbench_statement(path), encoding="utf-8")
        done = subprocess.run(
            [
                find_pgbench(dsn),
                "--no-vacuum",
                f"--client={clients}",
                f"--jobs={min(clients, 4)}",
                f"--time={max(1, round(seconds))}",
                "--protocol=prepared",
                f"--file={script}",
                target,
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"pgbench {path} failed ({done.returncode}):\n{done.stderr}")
    return round(_parse(done.stdout)["tps"], 1)
