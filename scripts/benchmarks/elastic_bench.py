"""Elastic pools under a burst, a steady load and two hosts (issue 34, docs/elastic-pools.md).

    python scripts/benchmarks/elastic_bench.py [--dsn DSN] [--scenarios burst,budget,steady,hosts]
                                    [--burst 40] [--job 2] [--quiet 5] [--steady-for 60]

Each scenario starts real supervisors (subprocesses, `pgq-supervisor -c FILE`) with an elastic
pool `processes: {min: 1, max: 6}` on the database (its pgq schema is migrated, the queue
emptied), enqueues jobs of --job seconds, and samples four times a second each supervisor's
live children and its USS (master and children, subprocesses included, as the budget counts).

- burst: --burst jobs at once. How long until the pool grew (first fork past 1) and reached
  its peak, when the last job finished, and when it was back at 1 (after the quiet period).
- budget: the same burst under `host: {memory: ...}` set to the master plus about three
  children: the peak USS against the budget, and the peak size it allowed.
- steady: jobs arriving at 1.5 a second for --steady-for seconds (3 busy children on average):
  the size changes once it settled (after the first quarter), which should be none or few.
- hosts: two supervisors as two hosts (PGQ_HOST) on the database, each {min: 1, max: 6}, and a
  burst that needs about 6 children in all: the peak of each and of both together.

The last line on stdout is one JSON object; the exit status is 0 only if every check held.
The machine is shared: times are wall-clock seconds, noisy by a fraction of a second.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from supervisor import NewJob, enqueue_many, migrate  # noqa: E402
from supervisor.shared.memory import group_uss  # noqa: E402

MiB = 2**20


def config(quiet: float, *, host: str = "", memory: int | None = None) -> str:
    entries = [f"name: {host}"] * bool(host) + [f"memory: {memory}"] * bool(memory)
    budget = f"host: {{{', '.join(entries)}}}\n" if entries else ""
    return budget + textwrap.dedent(
        f"""\
        handlers: {{nap: "elastic_jobs:nap"}}
        shutdown_timeout: 10s
        pools:
          work:
            queues: {{elastic: 1}}
            processes: {{min: 1, max: 6, target_wait: 4s, quiet: {quiet}s}}
        """
    )


class Host:
    """One supervisor process and its samples."""

    def __init__(self, workdir: Path, dsn: str, text: str, name: str) -> None:
        path = workdir / f"{name}.yaml"
        path.write_text(text)
        self.log_path = workdir / f"{name}.log"
        env = {
            **os.environ,
            "PGQ_DSN": dsn,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'scripts' / 'benchmarks'}",
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor.cli", "-c", str(path)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.samples: list[tuple[float, int, int]] = []  # (time, children, uss)

    def children(self) -> int:
        try:
            found = psutil.Process(self.proc.pid).children()
        except psutil.NoSuchProcess:
            return 0
        live = 0
        for child in found:
            with contextlib.suppress(psutil.Error):
                if child.status() != psutil.STATUS_ZOMBIE:
                    live += 1
        return live

    def sample(self, at: float) -> None:
        self.samples.append((at, self.children(), group_uss(self.proc.pid)))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def decisions(self) -> list[str]:
        return [
            line.split("pgq.master", 1)[-1].strip()
            for line in self.log_path.read_text(errors="replace").splitlines()
            if ": growing from " in line or ": shrinking from " in line
        ]


def pending(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pgq.jobs WHERE queue = 'elastic'").fetchone()
    return int(row[0]) if row else 0


def enqueue(dsn: str, n: int, seconds: float, megabytes: int = 0) -> None:
    jobs = [NewJob("nap", {"seconds": seconds, "megabytes": megabytes}, queue="elastic")] * n
    with psycopg.connect(dsn) as conn:
        enqueue_many(conn, jobs)


def wait_until(hosts: list[Host], condition: Any, timeout: float, started: float) -> float | None:
    """Sample every host until condition() holds; the time it did (from ``started``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.monotonic() - started
        for host in hosts:
            host.sample(now)
        if condition():
            return now
        time.sleep(0.25)
    return None


def settle(hosts: list[Host], n: int = 1, timeout: float = 30.0) -> None:
    if wait_until(hosts, lambda: all(h.children() == n for h in hosts), timeout, 0.0) is None:
        raise SystemExit(f"the supervisors did not start {n} child each in {timeout}s")


def burst(dsn: str, workdir: Path, args: argparse.Namespace, memory: int | None = None) -> dict:
    name = "budget" if memory else "burst"
    host = Host(workdir, dsn, config(args.quiet, memory=memory), name)
    try:
        settle([host])
        host.samples.clear()
        started = time.monotonic()
        enqueue(dsn, args.burst, args.job, args.megabytes)
        grew = wait_until([host], lambda: host.children() > 1, 30, started)
        done = wait_until([host], lambda: pending(args.dsn) == 0, 120, started)
        back = wait_until([host], lambda: host.children() == 1, args.quiet + 30, started)
        peak = max(c for _, c, _ in host.samples)
        peak_at = next(t for t, c, _ in host.samples if c == peak)
        result = {
            "jobs": args.burst,
            "job_seconds": args.job,
            "quiet_seconds": args.quiet,
            "grew_after_seconds": grew,
            "peak_children": peak,
            "peak_after_seconds": round(peak_at, 2),
            "all_done_after_seconds": done,
            "back_at_1_after_seconds": back,
            "peak_uss_mib": round(max(u for _, _, u in host.samples) / MiB, 1),
            "decisions": host.decisions(),
        }
        if memory is not None:
            result["memory_budget_mib"] = round(memory / MiB, 1)
        return result
    finally:
        host.stop()


def budget(dsn: str, workdir: Path, args: argparse.Namespace) -> dict:
    # Measure one child and the master first, then allow about three children.
    probe = Host(workdir, dsn, config(args.quiet), "probe")
    try:
        settle([probe])
        time.sleep(1.0)
        total = group_uss(probe.proc.pid)
        child = psutil.Process(probe.proc.pid).children()[0].pid
        per_child = group_uss(child) + (args.megabytes << 20)
    finally:
        probe.stop()
    memory = total + int(2.5 * per_child)
    result = burst(dsn, workdir, args, memory=memory)
    result["child_uss_mib"] = round(per_child / MiB, 1)
    return result


def steady(dsn: str, workdir: Path, args: argparse.Namespace) -> dict:
    host = Host(workdir, dsn, config(max(args.quiet, 20.0)), "steady")
    rng = random.Random(1)
    try:
        settle([host])
        host.samples.clear()
        started = time.monotonic()
        next_at = 0.0
        while (now := time.monotonic() - started) < args.steady_for:
            if now >= next_at:
                enqueue(dsn, 1, args.job)
                next_at += rng.expovariate(1.5)
            host.sample(now)
            time.sleep(min(0.05, max(0.0, next_at - now)))
        settled = [c for t, c, _ in host.samples if t >= args.steady_for / 4]
        changes = sum(1 for a, b in itertools.pairwise(settled) if a != b)
        return {
            "arrivals_per_second": 1.5,
            "job_seconds": args.job,
            "seconds": args.steady_for,
            "sizes_after_warmup": sorted(set(settled)),
            "size_changes_after_warmup": changes,
            "decisions": host.decisions(),
        }
    finally:
        host.stop()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgq.jobs WHERE queue = 'elastic'")


def hosts(dsn: str, workdir: Path, args: argparse.Namespace) -> dict:
    pair = [
        Host(workdir, dsn, config(args.quiet, host=name), name) for name in ("host-a", "host-b")
    ]
    try:
        settle(pair)
        time.sleep(6.0)  # a heartbeat each: both see the other's max
        for h in pair:
            h.samples.clear()
        started = time.monotonic()
        # About 6 children's worth in all: 6 x 4 s of target wait x 1 job / 2 s = 12 jobs.
        jobs = 12
        enqueue(dsn, jobs, args.job)
        wait_until(pair, lambda: pending(args.dsn) == 0, 120, started)
        peaks = [max(c for _, c, _ in h.samples) for h in pair]
        together = max(
            sum(c for _, c, _ in samples)
            for samples in zip(*(h.samples for h in pair), strict=False)
        )
        return {
            "jobs": jobs,
            "job_seconds": args.job,
            "peak_children_each": peaks,
            "peak_children_together": together,
            "decisions": {f"host-{i}": h.decisions() for i, h in zip("ab", pair, strict=True)},
        }
    finally:
        for h in pair:
            h.stop()


def verdict(results: dict[str, dict], args: argparse.Namespace) -> dict[str, bool]:
    checks: dict[str, bool] = {}
    if "burst" in results:
        b = results["burst"]
        checks["burst grows within 5 s"] = b["grew_after_seconds"] is not None and (
            b["grew_after_seconds"] <= 5.0
        )
        checks["burst reaches max 6"] = b["peak_children"] == 6
        checks["burst back at 1 after the quiet period"] = b["back_at_1_after_seconds"] is not None
    if "budget" in results:
        b = results["budget"]
        checks["budget: peak USS within the memory budget"] = (
            b["peak_uss_mib"] <= b["memory_budget_mib"]
        )
        checks["budget: held below max"] = b["peak_children"] < 6
    if "steady" in results:
        checks["steady: at most 2 size changes after warm-up"] = (
            results["steady"]["size_changes_after_warmup"] <= 2
        )
    if "hosts" in results:
        h = results["hosts"]
        checks["hosts: neither grows to max"] = max(h["peak_children_each"]) < 6
        checks["hosts: both grow"] = min(h["peak_children_each"]) > 1
    return checks


SCENARIOS = {"burst": burst, "budget": budget, "steady": steady, "hosts": hosts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQ_DSN"))
    parser.add_argument("--scenarios", default="burst,budget,steady,hosts")
    parser.add_argument("--burst", type=int, default=40)
    parser.add_argument("--job", type=float, default=2.0)
    parser.add_argument("--megabytes", type=int, default=8, help="held by each job")
    parser.add_argument("--quiet", type=float, default=5.0)
    parser.add_argument("--steady-for", type=float, default=60.0)
    parser.add_argument("--keep", action="store_true", help="keep the logs (printed path)")
    args = parser.parse_args(argv)
    if not args.dsn:
        parser.error("give --dsn or PGQ_DSN")
    migrate(args.dsn)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.jobs WHERE queue = 'elastic'")
    results: dict[str, dict] = {}
    tmp = tempfile.mkdtemp(prefix="pgq-elastic-")
    try:
        for name in args.scenarios.split(","):
            results[name] = SCENARIOS[name](args.dsn, Path(tmp), args)
            print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
    finally:
        if args.keep:
            print(f"logs in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    checks = verdict(results, args)
    print(json.dumps({"results": results, "checks": checks, "ok": all(checks.values())}))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
