"""What workflows (issue 32) cost, each figure against its plain counterpart in the same run.
Prints one line per figure, then one JSON line.

1. enqueue: a graph of N steps (a root, N-2 children of it, one join of them all) by
   enqueue_workflow, against the same N jobs by enqueue_many; N = 1,000 and 10,000.
2. release: a root whose completion releases 1,000 steps, drained by --workers connections
   (claim 10, complete them, as a child does in two statements), against 1,000 plain jobs
   drained the same way: jobs a second from the first claim to the last completion.
3. fan-in: 1,000 parents of one join step, drained so, against a batch of 1,000 with a `then`
   job: seconds until the join (the `then` job) is due, and whether it was released once.
4. claim with waiting steps: the median claim-and-complete of 10 jobs from a queue of 2,000,
   with none and with 100,000 waiting steps in pgq.jobs (10 workflows of 10,000, each held
   by a root on a queue nobody claims). The claim index holds only 'available' rows, so the
   figure should not move. Beside the wall time, the claim's server time and the buffers it
   touches under EXPLAIN (ANALYZE, BUFFERS) on the fresh table: the buffers do not depend on
   the machine's load.

Each lane runs in a fresh database; lanes alternate --rounds times and the medians are kept,
since the machine is shared and noisy. The claiming connections commit with
synchronous_commit off: on this machine a commit's WAL flush (5-20 ms) otherwise hides what the
statements cost, and it is the same for both sides of every ratio.

    .venv/bin/python scripts/benchmarks/workflow_bench.py [--dsn DSN] [--workers 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchlib.common import fresh_database
from benchlib.ours import explained_claim

from supervisor import NewJob, Workflow, enqueue_batch, enqueue_many, enqueue_workflow, migrate
from supervisor.queue.jobs import claim, complete


def graph(n: int, queue: str = "default", root_queue: str | None = None) -> Workflow:
    wf = Workflow(f"bench {n}")
    root = wf.add(NewJob("root", queue=root_queue or queue))
    mids = [wf.add(NewJob("mid", {"i": i}, queue=queue), after=[root]) for i in range(n - 2)]
    wf.add(NewJob("join", queue=queue), after=mids)
    return wf


def enqueue_lane(dsn: str, n: int, workflow: bool) -> float:
    with psycopg.connect(dsn) as conn:
        wf = graph(n)
        jobs = [s.job for s in wf.steps]
        started = time.perf_counter()
        if workflow:
            enqueue_workflow(conn, wf, notify=False)
        else:
            enqueue_many(conn, jobs, notify=False)
        conn.commit()
        return time.perf_counter() - started


def drain(dsn: str, workers: int, until: Callable[[psycopg.Connection[Any]], bool]) -> float:
    """Seconds for ``workers`` connections to claim-and-complete until ``until`` holds."""
    stop = threading.Event()
    barrier = threading.Barrier(workers + 1)

    def work(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")  # see the module's docstring
            barrier.wait()
            while not stop.is_set():
                jobs = claim(conn, "default", worker=f"bench:{os.getpid()}:{n}", limit=10)
                if jobs:
                    complete(conn, jobs).raise_if_lost()
                else:
                    time.sleep(0.001)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
    for t in threads:
        t.start()
    with psycopg.connect(dsn, autocommit=True) as watch:
        barrier.wait()
        started = time.perf_counter()
        while not until(watch):
            time.sleep(0.002)
        took = time.perf_counter() - started
    stop.set()
    for t in threads:
        t.join()
    return took


def _count(conn: psycopg.Connection[Any], sql: str) -> int:
    return int(conn.execute(sql).fetchone()[0])  # type: ignore[index]


def release_lane(dsn: str, workers: int, workflow: bool) -> float:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if workflow:
            wf = Workflow("release")
            root = wf.add(NewJob("root"))
            for i in range(1000):
                wf.add(NewJob("mid", {"i": i}), after=[root])
            enqueue_workflow(conn, wf)
        else:
            enqueue_many(conn, [NewJob("root")] + [NewJob("mid", {"i": i}) for i in range(1000)])
    took = drain(dsn, workers, lambda c: _count(c, "SELECT count(*) FROM pgq.jobs") == 0)
    return 1001 / took


def fan_in_lane(dsn: str, workers: int, workflow: bool) -> tuple[float, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        if workflow:
            wf = Workflow("fan-in")
            parents = [wf.add(NewJob("leaf", {"i": i})) for i in range(1000)]
            wf.add(NewJob("join", queue="after"), after=parents)
            enqueue_workflow(conn, wf)
        else:
            leaves = [NewJob("leaf", {"i": i}) for i in range(1000)]
            enqueue_batch(conn, leaves, then=NewJob("join", queue="after"))
    due = "SELECT count(*) FROM pgq.jobs WHERE queue = 'after' AND state = 'available'"
    took = drain(dsn, workers, lambda c: _count(c, due) >= 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        joins = _count(conn, "SELECT count(*) FROM pgq.jobs WHERE queue = 'after'")
    return took, joins


def claim_lane(dsn: str, waiting: int) -> tuple[float, float, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(waiting // 10_000):
            enqueue_workflow(conn, graph(10_000, queue="held", root_queue="nobody"), notify=False)
        enqueue_many(conn, [NewJob("plain", {"i": i}) for i in range(2000)], notify=False)
        conn.execute("VACUUM ANALYZE pgq.jobs")
        conn.execute("SET synchronous_commit = off")
        # First on the fresh table (the timed claims below leave consumed entries behind).
        conn.autocommit = False
        explained = [explained_claim(conn) for _ in range(30)]
        server_ms = statistics.median(e[0] for e in explained)
        buffers = statistics.median(e[1] for e in explained)
        conn.autocommit = True
        times = []
        for _ in range(150):
            started = time.perf_counter()
            jobs = claim(conn, "default", worker="bench:claim", limit=10)
            complete(conn, jobs).raise_if_lost()
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000, server_ms, int(buffers)


def in_fresh(dsn: str, name: str, run: Callable[[str], Any]) -> Any:
    with fresh_database(dsn, name) as db:
        migrate(db)
        return run(db)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("PGQ_DSN", "postgresql://postgres@127.0.0.1/postgres")
    )
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, Any] = {"workers": args.workers, "rounds": args.rounds}
    runs: dict[str, list[Any]] = {}

    def note(key: str, value: Any) -> None:
        runs.setdefault(key, []).append(value)

    for _ in range(args.rounds):
        for n in (1000, 10_000):
            for wf in (False, True):
                note(
                    f"enqueue_{n}_{'workflow' if wf else 'plain'}_s",
                    in_fresh(args.dsn, "wfenq", lambda d, n=n, wf=wf: enqueue_lane(d, n, wf)),
                )
        for wf in (False, True):
            kind = "workflow" if wf else "plain"
            note(
                f"release_{kind}_jobs_per_s",
                in_fresh(args.dsn, "wfrel", lambda d, wf=wf: release_lane(d, args.workers, wf)),
            )
            took, joins = in_fresh(
                args.dsn, "wffan", lambda d, wf=wf: fan_in_lane(d, args.workers, wf)
            )
            note(f"fan_in_{'workflow' if wf else 'batch'}_s", took)
            note(f"fan_in_{'workflow' if wf else 'batch'}_joins", joins)
        for waiting in (0, 100_000):
            wall, server, buffers = in_fresh(
                args.dsn, "wfclaim", lambda d, w=waiting: claim_lane(d, w)
            )
            note(f"claim_ms_with_{waiting}_waiting", wall)
            note(f"claim_server_ms_with_{waiting}_waiting", server)
            note(f"claim_buffers_with_{waiting}_waiting", buffers)
    for key, values in runs.items():
        figures[key] = statistics.median(values) if "joins" not in key else max(values)
        figures[f"{key}_all"] = values
    figures["ratios"] = {
        "enqueue_1000_workflow_over_plain": figures["enqueue_1000_workflow_s"]
        / figures["enqueue_1000_plain_s"],
        "enqueue_10000_workflow_over_plain": figures["enqueue_10000_workflow_s"]
        / figures["enqueue_10000_plain_s"],
        "release_workflow_over_plain": figures["release_workflow_jobs_per_s"]
        / figures["release_plain_jobs_per_s"],
        "fan_in_workflow_over_batch": figures["fan_in_workflow_s"] / figures["fan_in_batch_s"],
        "claim_100000_waiting_over_none": figures["claim_ms_with_100000_waiting"]
        / figures["claim_ms_with_0_waiting"],
        "claim_server_100000_waiting_over_none": figures["claim_server_ms_with_100000_waiting"]
        / figures["claim_server_ms_with_0_waiting"],
        "claim_buffers_100000_waiting_over_none": figures["claim_buffers_with_100000_waiting"]
        / figures["claim_buffers_with_0_waiting"],
    }
    for key in sorted(k for k in figures if not k.endswith("_all") and k != "ratios"):
        print(f"{key:40} {figures[key]}")
    for key, value in figures["ratios"].items():
        print(f"{key:40} {value:.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
