"""What issue 23 costs the hot path, side by side in one run. Prints a table, then one JSON line.

The machine is shared and noisy, so both parts compare variants under the same load at the
same moment rather than one after the other:

1. The claim/complete path: one connection claims 10 jobs and completes the previous 10 in the
   same statement, as a child does, taking turns statement by statement between four queues of
   one table: the claim statement from before issue 23 (read from git, commit BEFORE), the
   current one, the current one completing jobs that returned a small result, and the current
   one on members of a batch. Figures: the median statement latency of each, and its ratio to
   the one before. `effects: external` adds nothing to this path (the rule lives in the requeue
   of a dead child's jobs and in the rescuer; the claim and the completion do not read it).
2. A 100,000-job batch: the same number of jobs drained at the same time by --processes worker
   processes each, one group on a plain queue and one on a batch, until one group runs out;
   the ratio is the jobs the batch's group completed meanwhile over the plain group's. Then the
   batch is drained to its end and its `then` job must exist exactly once.

    .venv/bin/python scripts/benchmarks/outcomes_bench.py [--dsn DSN] [--statements 3000]
        [--batch-jobs 100000] [--processes 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchlib.common import fresh_database

from supervisor import NewJob, enqueue_batch, enqueue_many, migrate
from supervisor.queue.jobs import Job, claim_params, read_claim
from supervisor.queue.queries import parse, query

BEFORE = "75b0d49"  # main just before issue 23 (the move of supervisor/runtime)
ROOT = Path(__file__).resolve().parents[2]
RESULT = json.dumps({"pages": 3, "bytes": 48213, "path": "/srv/invoices/2024/000123.pdf"})
VARIANTS = ("before", "after", "after, with results", "after, in a batch")


def claim_before() -> str:
    text = subprocess.run(
        ["git", "show", f"{BEFORE}:sql/queries.sql"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return parse(text)["claim"]


def enqueue(dsn: str, queue: str, n: int, *, batch: bool) -> int | None:
    """n jobs on ``queue``, in one batch or not; the batch's id."""
    jobs = [NewJob("render", {"n": i}, queue=queue) for i in range(n)]
    with psycopg.connect(dsn) as conn:
        batch_id = None
        if batch:
            batch_id = enqueue_batch(conn, jobs, then=NewJob("archive", queue="after")).id
        else:
            enqueue_many(conn, jobs, notify=False)
        conn.commit()
    return batch_id


def vacuum(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE pgq.jobs")


class Lane:
    """One variant's queue and the jobs it finished but has not completed yet."""

    def __init__(self, name: str, sql: str, queue: str) -> None:
        self.name, self.sql, self.queue = name, sql, queue
        self.done: list[Job] = []
        self.latencies: list[float] = []

    def step(self, conn: psycopg.Connection[Any]) -> int:
        params = claim_params(self.queue, worker="bench", limit=10, done=self.done)
        # The claim before issue 23 took its one queue as %(queue)s (now %(queues)s, an array).
        params["queue"] = self.queue
        started = time.perf_counter()
        jobs = read_claim(conn.execute(self.sql, params), self.done).jobs
        self.latencies.append(time.perf_counter() - started)
        with_result = self.name == "after, with results"
        self.done = [j._replace(result=RESULT) for j in jobs] if with_result else jobs
        return len(jobs)


def path(dsn: str, statements: int) -> dict[str, float]:
    before = claim_before()
    lanes = [
        Lane(v, before if v == "before" else query("claim"), f"lane{i}")
        for i, v in enumerate(VARIANTS)
    ]
    for lane in lanes:
        enqueue(dsn, lane.queue, statements * 10, batch=lane.name == "after, in a batch")
    vacuum(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for turn in range(statements):
            # Each turn in another order, so no lane always follows the same one.
            order = lanes[turn % 4 :] + lanes[: turn % 4]
            for lane in order:
                lane.step(conn)
    return {lane.name: statistics.median(lane.latencies) * 1000 for lane in lanes}


def _worker(dsn: str, queue: str, worker: str, stop: Any, out: Any) -> None:
    done: list[Job] = []
    ran = 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            limit = 0 if stop.is_set() else 10
            params = claim_params(queue, worker=worker, limit=limit, done=done)
            jobs = read_claim(conn.execute(query("claim"), params), done).jobs
            if not jobs:
                if done or not stop.is_set():
                    out.put(("empty", queue, 0))
                out.put(("ran", queue, ran))
                return
            ran += len(jobs)
            done = jobs


def batch_race(dsn: str, n: int, processes: int) -> dict[str, Any]:
    enqueue(dsn, "plain", n, batch=False)
    batch_id = enqueue(dsn, "batch", n, batch=True)
    vacuum(dsn)
    ctx = multiprocessing.get_context("fork")
    stop, out = ctx.Event(), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(dsn, queue, f"bench:{queue}:{i}", stop, out))
        for queue in ("plain", "batch")
        for i in range(processes)
    ]
    started = time.perf_counter()
    for p in procs:
        p.start()
    ran = {"plain": 0, "batch": 0}
    reported = 0
    first_empty = None
    while reported < len(procs):
        what, queue, count = out.get(timeout=600)
        if what == "empty" and first_empty is None:
            first_empty = queue
            stop.set()
        elif what == "ran":
            ran[queue] += count
            reported += 1
    elapsed = time.perf_counter() - started
    for p in procs:
        p.join(30)
    # The rest of the batch, to its end: its then job must be there exactly once.
    rest = ctx.Process(target=_worker, args=(dsn, "batch", "bench:rest", ctx.Event(), out))
    rest.start()
    while out.get(timeout=600)[0] != "ran":
        pass
    rest.join(30)
    with psycopg.connect(dsn, autocommit=True) as conn:
        (thens,) = conn.execute(
            "SELECT count(*) FROM pgq.jobs WHERE kind = 'archive' AND batch ->> 'id' = %s",
            (str(batch_id),),
        ).fetchone()
    assert thens == 1, f"the then job was enqueued {thens} times"
    return {
        "completed_while_racing": ran,
        "seconds": elapsed,
        "first_to_finish": first_empty,
        "ratio": ran["batch"] / ran["plain"],
        "then_jobs": thens,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--statements", type=int, default=3000)
    parser.add_argument("--batch-jobs", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    with fresh_database(args.dsn, "outcomes") as dsn:
        migrate(dsn)
        latency = path(dsn, args.statements)
        race = batch_race(dsn, args.batch_jobs, args.processes)
    print(
        f"claim/complete path: {args.statements} statements per variant (10 jobs each), "
        "interleaved; median latency"
    )
    for v in VARIANTS:
        ratio = "" if v == "before" else f"  {latency[v] / latency['before']:.3f}x before"
        print(f"  {v:<22} {latency[v]:7.3f} ms{ratio}")
    print(
        f"{args.batch_jobs} jobs each, {args.processes} processes each, side by side for "
        f"{race['seconds']:.1f}s"
    )
    for queue, count in race["completed_while_racing"].items():
        print(f"  {queue:<22} {count:9d} completed while both ran")
    print(f"  batch / no batch       {race['ratio']:.3f}x (then job enqueued once)")
    print(
        json.dumps(
            {
                "bench": "outcomes",
                "path_statements": args.statements,
                "path_median_ms": latency,
                "path_cost_vs_before": {v: latency[v] / latency["before"] for v in VARIANTS[1:]},
                "effects_external_on_path": "none: claim and completion do not read it",
                "batch_jobs": args.batch_jobs,
                "batch_processes_each": args.processes,
                "batch_race": race,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
