"""Idle pickup latency of several source trees side by side, in alternating rounds.

    python scripts/benchmarks/pickup_trees.py TREE [TREE ...] [--rounds 3] [--jobs 200]
                                              [--processes 2] [--dsn DSN]

Each TREE is a checkout of the repository (``git worktree add /tmp/fbdc53d fbdc53d``; ``.`` for
this one). Every round runs each tree's own supervisor once, in a subprocess whose PYTHONPATH
is that tree, so its supervisor, its children and its SQL are that tree's: idle children (2 by
default), one job every 20 ms, enqueue commit to the handler's first statement by the database
clock (split at the claim's start: the job's started_at), and the CPU a job of the master, its
children and the database's backends (psutil: the server must be on this machine). Rounds
alternate the trees (A B A B ...) so that the shared machine's load falls on all of them.
Prints each run, then per tree the median over rounds and the median of the rounds' ratios to
the first tree's run in the same round, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# ours.pickup's run with history on, so that each job's claim start (its started_at: the
# claim transaction's now()) splits its latency in two: enqueue to claim (the NOTIFY, the
# master, the wake-up, the child up to its claim) and claim to handler (the claim statement,
# the child after it, the handler's start). Every name it uses exists in fbdc53d's benchlib.
RUN = """
import json, sys
from pathlib import Path
import psutil, psycopg
from benchlib import ours
from benchlib.common import (create_side_tables, fresh_database, install_enqueue_marker,
                             latency_summary_ms, measure_pickup, paced)
from supervisor import enqueue, migrate
dsn, jobs, processes, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
with fresh_database(dsn, "trees_pickup") as db:
    migrate(db)
    create_side_tables(db)
    install_enqueue_marker(db, "pgq", "jobs")
    config = ours.config_text(processes, 10, kind="record_start",
                              handler="benchlib.ours_handlers:record_start", history=True)
    with psycopg.connect(db, autocommit=True) as conn, ours.Supervisor(
        db, config, log, "pickup"
    ) as sup:
        ours.wait_idle_children(conn, sup, processes, 120.0)
        def cpu():
            # CPU seconds of the master, of its children, and of the server's backends of this
            # database (one of them the producer's).
            master = psutil.Process(sup.proc.pid)
            pids = [pid for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")]
            backends = []
            for pid in pids:
                try:
                    backends.append(psutil.Process(pid))
                except psutil.Error:
                    pass
            totals = []
            for group in ([master], master.children(recursive=True), backends):
                total = 0.0
                for p in group:
                    try:
                        t = p.cpu_times()
                        total += t.user + t.system
                    except psutil.Error:
                        pass
                totals.append(total)
            return totals
        before = cpu()
        warm, _ = measure_pickup(
            conn,
            lambda n: [enqueue(conn, "record_start") for _ in paced(n, 0.020)],
            warmup=20, jobs=jobs, wait=lambda ok, what: ours._wait(ok, sup, 120.0, what))
        spent = [a - b for a, b in zip(cpu(), before)]
        ours.wait_until(lambda: conn.execute(
            "SELECT count(*) FROM pgq.job_history").fetchone()[0] >= jobs + 20,
            timeout=60, what="history rows")
        rows = conn.execute(
            "SELECT extract(epoch FROM h.started_at - e.at), extract(epoch FROM s.at - e.at),"
            " extract(epoch FROM s.at - h.started_at)"
            " FROM bench_enqueued AS e JOIN bench_started AS s USING (job_id)"
            " JOIN pgq.job_history AS h ON h.id = e.job_id WHERE NOT e.job_id = ANY(%s)",
            (warm,)).fetchall()
print(json.dumps({
    **latency_summary_ms([float(r[1]) for r in rows]),
    "cpu_ms_per_job": round(sum(spent) / (jobs + 20) * 1000, 3),
    "cpu_ms_per_job_master_children_server": [round(x / (jobs + 20) * 1000, 3) for x in spent],
    "to_claim": latency_summary_ms([float(r[0]) for r in rows]),
    "claim_to_handler": latency_summary_ms([float(r[2]) for r in rows]),
}))
"""


def run_once(tree: Path, dsn: str, jobs: int, processes: int) -> dict[str, Any]:
    # benchlib sits in scripts/ before the scripts were sorted by kind, in scripts/benchmarks/
    # after.
    paths = [tree / "scripts" / "benchmarks", tree / "scripts", tree]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths if p.is_dir())}
    with tempfile.TemporaryDirectory(prefix="pickup-") as log:
        done = subprocess.run(
            [sys.executable, "-c", RUN, dsn, str(jobs), str(processes), log],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    if done.returncode != 0:
        raise SystemExit(f"pickup in {tree} failed (exit {done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument(
        "--dsn", default=os.environ.get("PGQ_TEST_DSN", "postgresql://postgres@127.0.0.1/test")
    )
    args = parser.parse_args()
    trees = [t.resolve() for t in args.trees]
    runs: dict[str, list[dict[str, Any]]] = {str(t): [] for t in trees}
    for round_no in range(args.rounds):
        for tree in trees if round_no % 2 == 0 else reversed(trees):
            result = run_once(tree, args.dsn, args.jobs, args.processes)
            runs[str(tree)].append(result)
            print(
                f"round {round_no + 1} {tree.name:24s} p50 {result['p50_ms']:.2f} ms"
                f"  p99 {result['p99_ms']:.2f} ms  (p50 enqueue->claim"
                f" {result['to_claim']['p50_ms']:.2f}, claim->handler"
                f" {result['claim_to_handler']['p50_ms']:.2f}; CPU a job"
                f" {result['cpu_ms_per_job']:.2f} ms: master, children, server"
                f" {result['cpu_ms_per_job_master_children_server']})",
                flush=True,
            )
    summary = {}
    first = str(trees[0])
    for tree, results in runs.items():
        summary[tree] = {
            "p50_ms": statistics.median(r["p50_ms"] for r in results),
            "p99_ms": statistics.median(r["p99_ms"] for r in results),
            "p50s": [r["p50_ms"] for r in results],
            "cpu_ms_per_job": statistics.median(r["cpu_ms_per_job"] for r in results),
            "to_claim_p50_ms": statistics.median(r["to_claim"]["p50_ms"] for r in results),
            "claim_to_handler_p50_ms": statistics.median(
                r["claim_to_handler"]["p50_ms"] for r in results
            ),
            "p99s": [r["p99_ms"] for r in results],
        }
    for tree, s in summary.items():
        # Each round's ratio to the first tree's run of the same round (run next to it), then
        # their median: the load moves between rounds far more than between neighbours.
        pairs = zip(runs[tree], runs[first], strict=True)
        s["p50_ratio"] = round(statistics.median(a["p50_ms"] / b["p50_ms"] for a, b in pairs), 3)
        pairs = zip(runs[tree], runs[first], strict=True)
        s["p99_ratio"] = round(statistics.median(a["p99_ms"] / b["p99_ms"] for a, b in pairs), 3)
        print(
            f"{Path(tree).name:24s} median p50 {s['p50_ms']:.2f} ms (x{s['p50_ratio']:.2f})"
            f"  p99 {s['p99_ms']:.2f} ms (x{s['p99_ratio']:.2f})  enqueue->claim p50"
            f" {s['to_claim_p50_ms']:.2f}  claim->handler p50 {s['claim_to_handler_p50_ms']:.2f}"
            f"  CPU a job {s['cpu_ms_per_job']:.2f} ms"
        )
    print(json.dumps({"scenario": "pickup_trees", "rounds": args.rounds, "trees": summary}))


if __name__ == "__main__":
    main()
