"""What order keys (issue 33) cost, each figure against its unordered counterpart in the same
run. Prints one line per figure, then one JSON line.

1. throughput: --jobs jobs spread round-robin over 10, 1,000 and 100,000 order keys (at most
   --jobs keys), drained by --workers connections (claim 10, complete them, as a child does),
   against the same jobs without keys: jobs a second from the first claim to the last
   completion. Few keys bound the drain by design (a key runs one job at a time); many keys
   measure what the keys' bookkeeping costs (the key's row at enqueue and at each completion,
   the follower's release). Beside it, the seconds the enqueue of those jobs took.
2. claim with followers waiting: the median claim-and-complete of 10 plain jobs from a queue
   of 2,000 that also holds 1,000 keys whose head is running (claimed by a worker that never
   finishes), with no follower behind them and with --followers followers (100,000) waiting
   behind them in the same queue. Followers wait in state 'waiting', outside the claim index,
   so the figure should not move. Beside the wall time, the claim's server time and the buffers
   it touches under EXPLAIN (ANALYZE, BUFFERS) on the fresh table (the buffers do not depend on
   the machine's load).

Each lane runs in a fresh database; lanes alternate --rounds times and the medians are kept,
since the machine is shared and noisy. The claiming connections commit with
synchronous_commit off (a commit's WAL flush would hide what the statements cost; it is the
same on both sides of every ratio).

    .venv/bin/python scripts/benchmarks/order_key_bench.py [--dsn DSN] [--jobs 100000]
        [--followers 100000] [--workers 4] [--rounds 1]
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

from supervisor import NewJob, enqueue_many, migrate
from supervisor.queue.jobs import claim, complete

KEY_COUNTS = (10, 1000, 100_000)
HELD_KEYS = 1000


def drain(dsn: str, workers: int) -> float:
    """Seconds for ``workers`` connections to claim-and-complete every job of pgq.jobs."""
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
        while watch.execute("SELECT EXISTS (SELECT FROM pgq.jobs)").fetchone() != (False,):
            time.sleep(0.005)
        took = time.perf_counter() - started
    stop.set()
    for t in threads:
        t.join()
    return took


def throughput_lane(dsn: str, jobs: int, keys: int | None, workers: int) -> tuple[float, float]:
    """(jobs a second drained, seconds the enqueue took) for ``jobs`` jobs over ``keys`` keys
    (None: no key)."""
    batch = [
        NewJob("work", {"i": i}, order_key=None if keys is None else f"k{i % keys}")
        for i in range(jobs)
    ]
    with psycopg.connect(dsn) as conn:
        started = time.perf_counter()
        for at in range(0, jobs, 10_000):
            enqueue_many(conn, batch[at : at + 10_000], notify=False)
        conn.commit()
        enqueued = time.perf_counter() - started
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE pgq.jobs")
    return jobs / drain(dsn, workers), enqueued


def claim_lane(dsn: str, followers: int) -> tuple[float, float, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The keys' heads, claimed by a worker that never completes them: running, holding.
        enqueue_many(conn, [NewJob("head", order_key=f"k{k}") for k in range(HELD_KEYS)])
        held = claim(conn, "default", worker="bench:holder", limit=HELD_KEYS)
        assert len(held) == HELD_KEYS, len(held)
        behind = [
            NewJob("follower", {"i": i}, order_key=f"k{i % HELD_KEYS}") for i in range(followers)
        ]
        for at in range(0, followers, 10_000):
            enqueue_many(conn, behind[at : at + 10_000], notify=False)
        enqueue_many(conn, [NewJob("plain", {"i": i}) for i in range(2000)], notify=False)
        waiting = conn.execute("SELECT count(*) FROM pgq.jobs WHERE state = 'waiting'").fetchone()
        assert waiting == (followers,), waiting
        conn.execute("VACUUM ANALYZE pgq.jobs")
        conn.execute("SET synchronous_commit = off")
        conn.autocommit = False
        explained = [explained_claim(conn) for _ in range(30)]
        server_ms = statistics.median(e[0] for e in explained)
        buffers = statistics.median(e[1] for e in explained)
        conn.autocommit = True
        times = []
        for _ in range(150):
            started = time.perf_counter()
            jobs = claim(conn, "default", worker="bench:claim", limit=10)
            assert jobs and all(j.kind == "plain" for j in jobs)
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
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--followers", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    key_counts = sorted({min(k, args.jobs) for k in KEY_COUNTS})
    figures: dict[str, Any] = {
        "jobs": args.jobs,
        "followers": args.followers,
        "key_counts": key_counts,
        "workers": args.workers,
        "rounds": args.rounds,
    }
    runs: dict[str, list[Any]] = {}

    def note(key: str, value: Any) -> None:
        runs.setdefault(key, []).append(value)

    for _ in range(args.rounds):
        for keys in (None, *key_counts):
            name = "unordered" if keys is None else f"{keys}_keys"
            rate, enqueued = in_fresh(
                args.dsn,
                "okthru",
                lambda d, k=keys: throughput_lane(d, args.jobs, k, args.workers),
            )
            note(f"throughput_{name}_jobs_per_s", rate)
            note(f"enqueue_{name}_s", enqueued)
        for followers in (0, args.followers):
            wall, server, buffers = in_fresh(
                args.dsn, "okclaim", lambda d, f=followers: claim_lane(d, f)
            )
            note(f"claim_ms_with_{followers}_followers", wall)
            note(f"claim_server_ms_with_{followers}_followers", server)
            note(f"claim_buffers_with_{followers}_followers", buffers)
    for key, values in runs.items():
        figures[key] = statistics.median(values)
        figures[f"{key}_all"] = values
    ratios: dict[str, float] = {}
    for keys in key_counts:
        ratios[f"throughput_{keys}_keys_over_unordered"] = (
            figures[f"throughput_{keys}_keys_jobs_per_s"]
            / figures["throughput_unordered_jobs_per_s"]
        )
        ratios[f"enqueue_{keys}_keys_over_unordered"] = (
            figures[f"enqueue_{keys}_keys_s"] / figures["enqueue_unordered_s"]
        )
    f = args.followers
    ratios[f"claim_{f}_followers_over_none"] = (
        figures[f"claim_ms_with_{f}_followers"] / figures["claim_ms_with_0_followers"]
    )
    ratios[f"claim_server_{f}_followers_over_none"] = (
        figures[f"claim_server_ms_with_{f}_followers"] / figures["claim_server_ms_with_0_followers"]
    )
    ratios[f"claim_buffers_{f}_followers_over_none"] = (
        figures[f"claim_buffers_with_{f}_followers"] / figures["claim_buffers_with_0_followers"]
    )
    figures["ratios"] = ratios
    for key in sorted(k for k in figures if not k.endswith("_all") and k != "ratios"):
        print(f"{key:44} {figures[key]}")
    for key, value in ratios.items():
        print(f"{key:44} {value:.2f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
