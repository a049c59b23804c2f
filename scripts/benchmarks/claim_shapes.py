"""The claim on the shapes production grows into, side by side in one run, as ratios.

Each figure is a drain: one connection claims batches and completes them in the next claim's
statement, exactly as a child does (the weights' order, the tenants' rotation, one statement per
round trip), until a fixed backlog is gone; rounds alternate between the variants compared so
both see the same machine. It measures the claim itself (no fork, no handler), where the shapes
differ.

- queues: one busy queue in a pool of 1, 10, 100, 1000 queues (the others empty), against the
  same pool claimed the previous release's way (one statement per queue, weighted order,
  falling through the empty ones). Ratio: jobs/s against the busy queue alone.
- tenants: one queue whose backlog is spread over 1, 100, 10,000 tenants. Ratio against 1.
- fairness: the claim (tenant rotation) against the previous release's claim (priority order,
  no tenants: scripts/benchmarks/benchlib/earlier_claims.sql, claim_one_queue) on the same
  backlog, at batch 1, 10, 100:
  the drain's rate, and its CPU per job (the server backend's, read with psutil when the server
  is on this machine, plus this client's), which the machine's noise and the commits' waits on
  the disk move far less than the rate.
- flood: one tenant enqueues --flood jobs, then --quiet tenants 3 jobs each, while the drain
  runs: the quiet jobs' p99 wait against their wait with no flood, and the flood's own rate
  against a queue of the same jobs without tenants.

    .venv/bin/python scripts/benchmarks/claim_shapes.py [--dsn DSN] [--jobs 20000] [--rounds 2]

Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.common import fresh_database

from supervisor import NewJob, enqueue_many, migrate
from supervisor.child.cursors import ClaimCursors
from supervisor.child.weights import TenantRotation, WeightedQueues
from supervisor.queue import claim_builder
from supervisor.queue.job import Job
from supervisor.queue.jobs import claim_params, execute_claim, read_claim, use_generic_plans
from supervisor.queue.queries import native_text, parse

LEASE = 60.0
EARLIER = Path(__file__).resolve().parent / "benchlib" / "earlier_claims.sql"
OLD_CLAIM = parse(EARLIER.read_text(encoding="utf-8"))["claim_one_queue"]


def claim_from(path: str) -> str:
    """The claim statement of another sql/claim.sql (e.g. `git show main:sql/claim.sql`, or an
    older release's sql/queries.sql)."""
    return parse(Path(path).read_text())["claim"]


@dataclass(frozen=True)
class Baseline:
    """Another build's claim (the queues' and fairness' "main" lane) and how that build's child
    ran it: planned once (``generic``: 6ba3471 and later) or at every run, sent with its own
    $n placeholders (``native``: 7cbb2d1 and later) or through psycopg's, with the child's
    cursors (``cursors``: 8037970 and later) or without."""

    sql: str
    generic: bool = False
    native: bool = False
    cursors: bool = False


class Drain:
    """A child's claim loop on one connection: the new claim, or the previous release's.

    ``baseline``: another build's one-statement claim, run the way that build's child ran it
    (no cursors)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        pool: Sequence[str],
        *,
        old: bool,
        baseline: Baseline | None = None,
    ) -> None:
        self.conn = conn
        self.pool = list(pool)
        self.old = old
        self.sql = baseline.sql if baseline is not None else None
        self.baseline = baseline
        self.native = (
            native_text(baseline.sql) if baseline is not None and baseline.native else None
        )
        self.queues = WeightedQueues(dict.fromkeys(pool, 1))
        self.tenants = TenantRotation()
        # As a child with the default poll interval (supervisor/child/cursors.py).
        self.cursors = ClaimCursors(1.0)
        self.statements = 0
        # CPU seconds the last run spent: the server backend's (None when it is not on this
        # machine) and this process's.
        self.server_cpu: float | None = None
        self.client_cpu = 0.0
        self._backend = _local_backend(conn)
        # Planned as each release's child plans it: this one once (use_generic_plans), the
        # earlier ones at every run.
        if old or (baseline is not None and not baseline.generic):
            conn.execute("RESET plan_cache_mode; RESET enable_seqscan; RESET jit")
        else:
            use_generic_plans(conn)

    def claim(self, limit: int, done: Sequence[Job]) -> list[Job]:
        now = time.monotonic()
        if self.old:
            return self._claim_old(limit, done)
        order = self.queues.order(now)
        resume = self.tenants.resume_all(order)
        with_cursors = self.sql is None or (self.baseline is not None and self.baseline.cursors)
        cursors = self.cursors.for_claim(order, now) if with_cursors else []
        params = claim_params(
            order,
            worker="bench",
            limit=limit,
            lease_seconds=LEASE,
            done=done,
            resume=resume,
            cursors=cursors,
        )
        started = time.perf_counter()
        if self.sql is None or self.native is not None:
            # As the child sends it: this build's the variant its child chooses (no limits here).
            variant = claim_builder.variant(limits=False, batch=limit, aging=False)
            cursor = execute_claim(self.conn, params, self.native, variant=variant)
        else:
            cursor = self.conn.execute(self.sql, params)
        jobs = read_claim(cursor).jobs
        self.statements += 1
        self.queues.observe(order, jobs, limit, now)
        if with_cursors:
            self.cursors.observe(jobs, now, time.perf_counter() - started)
        self.tenants.advance_all(order, resume, jobs)
        return jobs

    def _claim_old(self, limit: int, done: Sequence[Job]) -> list[Job]:
        # The previous release's child: weighted order, one statement per queue until one
        # gives jobs, every empty queue charged its turn.
        order = self.queues.order(0.0)
        for queue in order:
            params = {
                **claim_params(queue, worker="bench", limit=limit, done=done),
                "queue": queue,
            }
            jobs = read_claim(self.conn.execute(OLD_CLAIM, params)).jobs
            self.statements += 1
            done = ()
            if jobs:
                return jobs
        return []

    def run(
        self, limit: int, total: int, on_claim: Callable[[list[Job]], None] | None = None
    ) -> float:
        """Drain ``total`` jobs; jobs per second."""
        server_before = _cpu(self._backend)
        client_before = time.process_time()
        started = time.perf_counter()
        done: list[Job] = []
        got = 0
        idle_since: float | None = None
        while got < total:
            jobs = self.claim(limit, done)
            done = jobs
            got += len(jobs)
            if on_claim is not None and jobs:
                on_claim(jobs)
            if not jobs:
                idle_since = idle_since or time.perf_counter()
                if time.perf_counter() - idle_since > 10:
                    raise RuntimeError(f"drain stalled at {got} of {total} jobs")
                time.sleep(0.001)
            else:
                idle_since = None
        if done:
            self.claim(0, done)
        rate = total / (time.perf_counter() - started)
        self.client_cpu = time.process_time() - client_before
        server_after = _cpu(self._backend)
        if server_before is not None and server_after is not None:
            self.server_cpu = server_after - server_before
        return rate


def _local_backend(conn: psycopg.Connection[Any]) -> psutil.Process | None:
    """The server process serving ``conn``, when the server runs on this machine."""
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    try:
        proc = psutil.Process(pid)
        return proc if "postgres" in proc.name() else None
    except psutil.Error:
        return None


def _cpu(proc: psutil.Process | None) -> float | None:
    if proc is None:
        return None
    try:
        times = proc.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def _fill(conn: psycopg.Connection[Any], jobs: list[NewJob]) -> None:
    for start in range(0, len(jobs), 5000):
        enqueue_many(conn, jobs[start : start + 5000], notify=False)
    conn.execute("VACUUM ANALYZE pgq.jobs")


def _reset(conn: psycopg.Connection[Any]) -> None:
    conn.execute("TRUNCATE pgq.jobs")


def queues_shape(
    conn: psycopg.Connection[Any],
    jobs: int,
    rounds: int,
    baseline: Baseline | None = None,
) -> dict[str, Any]:
    """``baseline``: also the one-statement claim of another sql/claim.sql ("main")."""
    rates: dict[str, list[float]] = {}
    lanes = ["one_statement", "previous", *(["main"] if baseline else [])]
    for _ in range(rounds):
        for count in (1, 10, 100, 1000):
            pool = ["busy", *(f"idle-{n:04d}" for n in range(count - 1))]
            for lane in lanes:
                old = lane == "previous"
                if old and count == 1000:
                    continue  # a thousand statements per claim: minutes for one round
                n = jobs if not old or count <= 10 else jobs // 20
                _reset(conn)
                _fill(conn, [NewJob("k", queue="busy") for _ in range(n)])
                drain = Drain(conn, pool, old=old, baseline=baseline if lane == "main" else None)
                rates.setdefault(f"{count}:{lane}", []).append(drain.run(10, n))
    alone = statistics.median(rates["1:one_statement"])
    return {
        key: {
            "jobs_per_s": round(statistics.median(v)),
            "ratio": round(statistics.median(v) / alone, 3),
        }
        for key, v in rates.items()
    }


def tenants_shape(conn: psycopg.Connection[Any], jobs: int, rounds: int) -> dict[str, Any]:
    rates: dict[int, list[float]] = {}
    for _ in range(rounds):
        for count in (1, 100, 10_000):
            _reset(conn)
            _fill(conn, [NewJob("k", queue="q", tenant=f"t{i % count}") for i in range(jobs)])
            rates.setdefault(count, []).append(Drain(conn, ["q"], old=False).run(10, jobs))
    one = statistics.median(rates[1])
    return {
        str(count): {
            "jobs_per_s": round(statistics.median(v)),
            "ratio": round(statistics.median(v) / one, 3),
        }
        for count, v in rates.items()
    }


def fairness_cost(
    conn: psycopg.Connection[Any],
    jobs: int,
    rounds: int,
    baseline: Baseline | None = None,
) -> dict[str, Any]:
    """``baseline``: also the claim of another sql/claim.sql ("main"), fairness on."""
    out: dict[str, Any] = {}
    names = ["off", "on", *(["main"] if baseline else [])]
    for batch in (1, 10, 100):
        n = jobs // 4 if batch == 1 else jobs
        rates: dict[str, list[float]] = {name: [] for name in names}
        cpu: dict[str, list[float]] = {name: [] for name in names}  # µs a job, server + client
        for _ in range(rounds):
            for name in names:
                _reset(conn)
                _fill(conn, [NewJob("k", queue="q") for _ in range(n)])
                drain = Drain(
                    conn,
                    ["q"],
                    old=name == "off",
                    baseline=baseline if name == "main" else None,
                )
                rates[name].append(drain.run(batch, n))
                if drain.server_cpu is not None:
                    cpu[name].append((drain.server_cpu + drain.client_cpu) / n * 1e6)
        on, off = statistics.median(rates["on"]), statistics.median(rates["off"])
        row: dict[str, Any] = {
            "on_jobs_per_s": round(on),
            "off_jobs_per_s": round(off),
            "cost_ratio": round(off / on, 3),  # claim cost on / off, by the drain's rate
        }
        if cpu["on"] and cpu["off"]:
            cpu_on, cpu_off = statistics.median(cpu["on"]), statistics.median(cpu["off"])
            row |= {
                "on_cpu_us_per_job": round(cpu_on, 1),
                "off_cpu_us_per_job": round(cpu_off, 1),
                "cpu_cost_ratio": round(cpu_on / cpu_off, 3),  # by CPU a job
            }
        if baseline:
            main = statistics.median(rates["main"])
            row["main_jobs_per_s"] = round(main)
            row["main_cost_ratio"] = round(off / main, 3)
            if cpu["main"] and cpu["off"]:
                row["main_cpu_cost_ratio"] = round(
                    statistics.median(cpu["main"]) / statistics.median(cpu["off"]), 3
                )
        out[str(batch)] = row
    return out


def _flood_run(
    dsn: str, flood: int, quiet: int, *, tenants: bool, with_flood: bool, old: bool
) -> dict[str, float]:
    """Drain a flood (if any) while quiet tenants enqueue 3 jobs each 0.3 s in."""
    with psycopg.connect(dsn, autocommit=True, options="-c synchronous_commit=off") as conn:
        _reset(conn)
        if with_flood:
            _fill(
                conn,
                [
                    NewJob("flood", queue="q", tenant="flood" if tenants else None)
                    for _ in range(flood)
                ],
            )
        waits: list[float] = []
        flood_done: list[float] = []
        t0 = time.perf_counter()

        def record(jobs: list[Job]) -> None:
            for job in jobs:
                if job.kind == "quiet":
                    claimed_at = job.lease_until.timestamp() - LEASE
                    waits.append(claimed_at - job.created_at.timestamp())
                else:
                    flood_done.append(time.perf_counter())

        def quiet_producer() -> None:
            time.sleep(0.3)
            with psycopg.connect(dsn, autocommit=True) as producer:
                enqueue_many(
                    producer,
                    [
                        NewJob("quiet", queue="q", tenant=f"quiet-{n}")
                        for n in range(quiet)
                        for _ in range(3)
                    ],
                    notify=False,
                )

        thread = threading.Thread(target=quiet_producer)
        thread.start()
        total = (flood if with_flood else 0) + 3 * quiet
        if not with_flood:
            thread.join()
        Drain(conn, ["q"], old=old).run(10, total, record)
        thread.join()
        waits.sort()
        result = {"quiet_p99_ms": 1000 * waits[int(0.99 * (len(waits) - 1))]}
        if flood_done:
            result["flood_jobs_per_s"] = len(flood_done) / (flood_done[-1] - t0)
        return result


def flood_shape(dsn: str, flood: int, quiet: int, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {}
    variants = {
        "quiet_alone": {"tenants": True, "with_flood": False, "old": False},
        "flood_fair": {"tenants": True, "with_flood": True, "old": False},
        "flood_no_tenants": {"tenants": False, "with_flood": True, "old": False},
        "flood_previous_claim": {"tenants": True, "with_flood": True, "old": True},
    }
    for _ in range(rounds):
        for name, kw in variants.items():
            runs.setdefault(name, []).append(_flood_run(dsn, flood, quiet, **kw))

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    alone = med("quiet_alone", "quiet_p99_ms")
    return {
        "quiet_p99_ms": {n: round(med(n, "quiet_p99_ms"), 1) for n in variants},
        "quiet_p99_vs_alone": {
            n: round(med(n, "quiet_p99_ms") / alone, 2) for n in variants if n != "quiet_alone"
        },
        "flood_jobs_per_s": {
            n: round(med(n, "flood_jobs_per_s")) for n in variants if n != "quiet_alone"
        },
        "flood_rate_vs_no_tenants": round(
            med("flood_fair", "flood_jobs_per_s") / med("flood_no_tenants", "flood_jobs_per_s"), 3
        ),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--flood", type=int, default=30_000)
    parser.add_argument("--quiet", type=int, default=200)
    parser.add_argument("--only", choices=("queues", "tenants", "fairness", "flood"))
    parser.add_argument(
        "--baseline",
        help="another sql/claim.sql: its claim is the queues' and fairness' main lane",
    )
    parser.add_argument(
        "--baseline-generic",
        action="store_true",
        help="plan the baseline's claim once, as this build's child does (a baseline from "
        "6ba3471 or later); otherwise it is planned at every run, as earlier children did",
    )
    parser.add_argument(
        "--baseline-native",
        action="store_true",
        help="send the baseline's claim with its own $n placeholders, as this build's child "
        "does (a baseline from 7cbb2d1 or later); otherwise through psycopg's",
    )
    parser.add_argument(
        "--baseline-cursors",
        action="store_true",
        help="send the child's cursors to the baseline's claim too (a baseline from 8037970 "
        "or later); otherwise it claims from the head every time",
    )
    args = parser.parse_args()
    baseline = (
        Baseline(
            claim_from(args.baseline),
            args.baseline_generic,
            args.baseline_native,
            args.baseline_cursors,
        )
        if args.baseline
        else None
    )
    figures: dict[str, Any] = {"jobs": args.jobs, "rounds": args.rounds}
    with fresh_database(args.dsn, "claim_shapes") as db:
        migrate(db)
        # Every claim commits: with the WAL flushed at each commit, the disk's flush time would
        # be most of what is measured, for every variant alike.
        with psycopg.connect(db, autocommit=True, options="-c synchronous_commit=off") as conn:
            if args.only in (None, "queues"):
                figures["queues"] = queues_shape(conn, args.jobs, args.rounds, baseline)
            if args.only in (None, "tenants"):
                figures["tenants"] = tenants_shape(conn, args.jobs, args.rounds)
            if args.only in (None, "fairness"):
                figures["fairness"] = fairness_cost(conn, args.jobs, args.rounds, baseline)
        if args.only in (None, "flood"):
            figures["flood"] = flood_shape(db, args.flood, args.quiet, args.rounds)
    for section, table in figures.items():
        if isinstance(table, dict):
            print(f"{section}:")
            for key, value in table.items():
                print(f"  {key:24} {value}")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
