"""The children's CPU per job and memory, this checkout against another (a commit before), side
by side.

Each measurement is a drain of no-op jobs by the real supervisor of one checkout (its own
``scripts/benchmarks/benchlib``, so its own code runs in the master and the children): a fresh
database, the jobs enqueued first, then psutil reads the CPU time (user + system) of every
child over the drain and each child's USS at its end, and the database clock times the drain.
Rounds alternate between the checkouts at each batch size and history setting, so both meet the
same load on a shared machine; the figures are medians over rounds, and each ratio is the median
of the ratios taken within a round.

    git worktree add /tmp/base 19df517        # the commit to compare with
    .venv/bin/python scripts/benchmarks/child_cpu_ab.py --baseline /tmp/base \\
        [--batches 1,10,100] [--history off,on] [--rounds 3] [--jobs 20000] [--processes 2] \\
        [--kind noop|parse]

``--kind parse``: each job parses a JSON document (benchlib.ours_handlers.parse_payload), so the
children's garbage collector works as under real handlers; the baseline must have that handler
(commits from 2026-12-08 on).

The baseline runs on this interpreter with its own tree first on the path (its supervisor
package, not this one's). Prints a table and, as the last line, JSON. The DSN comes from --dsn,
else PGQ_BENCH_DSN, else the machine's PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


# What the jobs do (--kind): nothing, or parse a JSON document, allocating as real handlers do.
KINDS = {"noop": "benchlib.ours_handlers:noop", "parse": "benchlib.ours_handlers:parse_payload"}


def measure(
    dsn: str, jobs: int, batch: int, processes: int, history: bool, kind: str = "noop"
) -> None:
    """One drain by the supervisor of the checkout first on the path (run in a subprocess
    whose path starts with it); prints its figures as JSON."""
    import psutil
    import psycopg
    from benchlib.common import fresh_database
    from benchlib.ours import Supervisor, _fill, config_text, time_drain

    def cpu(proc: psutil.Process) -> float:
        times = proc.cpu_times()
        return times.user + times.system

    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"pgq-child-cpu-{os.getpid()}"
    with fresh_database(dsn, f"childcpu_b{batch}") as db:
        # No-op jobs as the baseline's own benchlib fills them (an older _fill takes no kind).
        if kind == "noop":
            _fill(db, jobs)
            config = config_text(processes, batch, history=history)
        else:
            _fill(db, jobs, kind=kind)
            config = config_text(processes, batch, history=history, kind=kind, handler=KINDS[kind])
        with (
            psycopg.connect(db, autocommit=True) as conn,
            Supervisor(db, config, out, "child_cpu") as sup,
        ):
            master = psutil.Process(sup.proc.pid)
            deadline = time.monotonic() + 60
            while len(master.children()) < processes:
                sup.check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError("the children did not start within 60 s")
                time.sleep(0.02)
            children = master.children()
            before = [cpu(p) for p in children]
            seconds = time_drain(
                conn,
                timeout=600,
                on_timeout=lambda: "not drained after 600 s",
                each_poll=lambda _: sup.check_alive(),
            )
            after = [cpu(p) for p in children]
            # What each child holds of its own after the drain (pages it wrote, the master's
            # pages it copied): USS, what memory_limit measures.
            uss = [p.memory_full_info().uss for p in children]
            sup.stop()
    spent = sum(after) - sum(before)
    import supervisor

    print(
        json.dumps(
            {
                "child_us_per_job": spent / jobs * 1e6,
                "jobs_per_s": jobs / seconds,
                "child_uss_mib": statistics.median(uss) / 2**20,
                "supervisor": str(Path(supervisor.__file__).parent),
            }
        )
    )


def run_one(tree: Path, args: argparse.Namespace, batch: int, history: bool) -> dict[str, float]:
    scripts = tree / "scripts" / "benchmarks"
    # This file is loaded by its path: its folder on sys.path would put this checkout's
    # benchlib (and through it this supervisor) before the tree's.
    code = (
        "import sys, importlib.util as u; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
        "s = u.spec_from_file_location('child_cpu_ab', sys.argv[3]); m = u.module_from_spec(s); "
        "s.loader.exec_module(m); "
        "m.measure(sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), "
        "sys.argv[8] == 'on', sys.argv[9])"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(scripts),
            str(tree),
            str(HERE),
            args.dsn,
            str(args.jobs if batch > 1 else args.jobs_batch_1),
            str(batch),
            str(args.processes),
            "on" if history else "off",
            args.kind,
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(f"the drain of {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="the other checkout")
    parser.add_argument("--dsn", default=os.environ.get("PGQ_BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--jobs-batch-1", type=int, default=5_000, help="jobs at batch 1")
    parser.add_argument("--batches", default="1,10,100")
    parser.add_argument("--history", default="off,on", help="off, on or both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--kind", choices=sorted(KINDS), default="noop", help="what a job does")
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "this": HERE.parents[2]}
    batches = [int(b) for b in args.batches.split(",")]
    histories = [h == "on" for h in args.history.split(",")]
    runs: dict[str, dict[str, list[dict[str, float]]]] = {}
    for round_ in range(args.rounds):
        for history in histories:
            for batch in batches:
                cell = f"b{batch} history {'on' if history else 'off'}"
                # Alternate which goes first, so neither always meets the other's leftovers.
                order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
                for name in order:
                    result = run_one(trees[name], args, batch, history)
                    runs.setdefault(cell, {}).setdefault(name, []).append(result)
                    print(
                        f"round {round_ + 1} {cell:18s} {name:8s} "
                        f"{result['child_us_per_job']:7.1f} us/job "
                        f"{result['jobs_per_s']:9,.0f} jobs/s "
                        f"child USS {result['child_uss_mib']:5.1f} MiB",
                        file=sys.stderr,
                        flush=True,
                    )
    summary: dict[str, Any] = {}
    print(
        f"\n{'cell':20s}{'baseline us':>12s}{'this us':>10s}{'us ratio':>10s}{'rate ratio':>12s}"
        f"{'USS MiB (baseline, this)':>26s}"
    )
    for cell, by in runs.items():
        base, this = by["baseline"], by["this"]
        figures = {
            "baseline_us": statistics.median(r["child_us_per_job"] for r in base),
            "this_us": statistics.median(r["child_us_per_job"] for r in this),
            "us_ratio": statistics.median(
                t["child_us_per_job"] / b["child_us_per_job"]
                for b, t in zip(base, this, strict=True)
            ),
            "rate_ratio": statistics.median(
                t["jobs_per_s"] / b["jobs_per_s"] for b, t in zip(base, this, strict=True)
            ),
            "baseline_jobs_per_s": statistics.median(r["jobs_per_s"] for r in base),
            "this_jobs_per_s": statistics.median(r["jobs_per_s"] for r in this),
            "baseline_child_uss_mib": statistics.median(r["child_uss_mib"] for r in base),
            "this_child_uss_mib": statistics.median(r["child_uss_mib"] for r in this),
        }
        summary[cell] = {k: round(v, 3) for k, v in figures.items()} | {"runs": by}
        print(
            f"{cell:20s}{figures['baseline_us']:12.1f}{figures['this_us']:10.1f}"
            f"{figures['us_ratio']:10.2f}{figures['rate_ratio']:12.2f}"
            f"{figures['baseline_child_uss_mib']:16.1f}, {figures['this_child_uss_mib']:.1f}"
        )
    print(
        json.dumps(
            {"trees": {k: str(v) for k, v in trees.items()}, "kind": args.kind, "cells": summary}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
