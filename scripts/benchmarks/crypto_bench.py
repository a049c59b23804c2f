"""What encrypted arguments cost: enqueue and claim-to-handler, with and without a Secret,
side by side in one run, as ratios. Figures as text on stderr, then one JSON line on stdout.

    python scripts/benchmarks/crypto_bench.py [--dsn DSN] [--jobs 2000] [--rounds 5] [--batch 50]

Three measures, each alternated plain / sealed round after round on the same database (the
machine is shared: alternation spreads its noise over both), median of the rounds:

- ``encode``: encode_args alone (the CPU of building the row's JSON), per job;
- ``enqueue``: client process time per ``enqueue`` call on an autocommit connection (the
  Python and libpq time; the server's and the commit's flush run elsewhere), and wall time;
- ``claim_to_handler``: per job, a claim of ``--batch`` jobs on a connection set up as a child's
  (the fast jsonb loader) and what the executor does before calling the handler (Opener.wants
  and, for sealed args, open), process and wall time. Completing the jobs is outside the timing.

Sealing interleaved with round trips costs more than in the encode loop (cold caches): the
enqueue figures are the ones a producer sees. The args are a small order:
``{"order": n, "card": CARD, "email": EMAIL}``; sealed, card and email are Secrets (two
envelopes a job). Uses PGQ_KEYS if set, else a key made for the run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import psycopg

from supervisor import Secret, enqueue
from supervisor.crypto.opening import Opener
from supervisor.queue import jobs as jobs_api
from supervisor.queue import keyring
from supervisor.queue.enqueue import encode_args
from supervisor.queue.loaders import use_fast_json
from supervisor.queue.migrations import migrate

CARD = "tok_4111111111111111"
EMAIL = "someone@example.com"


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def args_of(n: int, sealed: bool) -> dict[str, Any]:
    if sealed:
        return {"order": n, "card": Secret(CARD), "email": Secret(EMAIL)}
    return {"order": n, "card": CARD, "email": EMAIL}


def time_encode(jobs: int, sealed: bool) -> float:
    made = [args_of(n, sealed) for n in range(jobs)]
    start = time.process_time()
    for a in made:
        encode_args("order", a)
    return (time.process_time() - start) / jobs * 1e6


def time_enqueue(conn: psycopg.Connection[Any], jobs: int, sealed: bool) -> tuple[float, float]:
    queue = "sealed" if sealed else "plain"
    made = [args_of(n, sealed) for n in range(jobs)]
    cpu, wall = time.process_time(), time.perf_counter()
    for a in made:
        enqueue(conn, "order", a, queue=queue)
    return (
        (time.process_time() - cpu) / jobs * 1e6,
        (time.perf_counter() - wall) / jobs * 1e6,
    )


def time_claims(
    conn: psycopg.Connection[Any], jobs: int, batch: int, sealed: bool, opener: Opener
) -> tuple[float, float]:
    queue = "sealed" if sealed else "plain"
    cpu = wall = 0.0
    seen = 0
    while seen < jobs:
        c0, w0 = time.process_time(), time.perf_counter()
        claimed = jobs_api.claim(conn, queue, worker="bench:1:a", limit=batch)
        for job in claimed:
            args = job.args
            if opener.wants(job.kind, args):
                args, _ = opener.open(job.id, job.kind, args)
            assert args["card"] == CARD
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        if not claimed:
            break
        seen += len(claimed)
        jobs_api.complete(conn, claimed)
    return cpu / max(seen, 1) * 1e6, wall / max(seen, 1) * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQ_DSN", "postgresql:///test"))
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=50)
    a = parser.parse_args()
    if not os.environ.get(keyring.ENV):
        os.environ[keyring.ENV] = f"bench:{keyring.new_key()}"
    migrate(a.dsn)
    opener = Opener(keyring.active(), {})
    results: dict[str, dict[bool, list[float]]] = {
        k: {False: [], True: []}
        for k in ("encode", "enqueue_cpu", "enqueue_wall", "claim_cpu", "claim_wall")
    }
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        use_fast_json(conn)  # as a child's session: sealed args come back marked
        conn.execute("DELETE FROM pgq.jobs WHERE queue IN ('plain', 'sealed')")
        for r in range(a.rounds):
            for sealed in (r % 2 == 1, r % 2 == 0):  # alternate which goes first
                results["encode"][sealed].append(time_encode(a.jobs, sealed))
                cpu, wall = time_enqueue(conn, a.jobs, sealed)
                results["enqueue_cpu"][sealed].append(cpu)
                results["enqueue_wall"][sealed].append(wall)
                cpu, wall = time_claims(conn, a.jobs, a.batch, sealed, opener)
                results["claim_cpu"][sealed].append(cpu)
                results["claim_wall"][sealed].append(wall)
            say(f"round {r + 1}/{a.rounds} done")
    doc: dict[str, Any] = {"jobs": a.jobs, "rounds": a.rounds, "batch": a.batch, "us_per_job": {}}
    say(f"{'measure':<14} {'plain us':>10} {'sealed us':>10} {'ratio':>7}  (spread of rounds)")
    for name, by in results.items():
        plain, sealed = statistics.median(by[False]), statistics.median(by[True])
        spread = max(by[False]) / min(by[False])
        doc["us_per_job"][name] = {
            "plain": round(plain, 2),
            "sealed": round(sealed, 2),
            "ratio": round(sealed / plain, 3),
            "plain_spread": round(spread, 3),
        }
        say(f"{name:<14} {plain:>10.2f} {sealed:>10.2f} {sealed / plain:>7.3f}  ({spread:.2f})")
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
