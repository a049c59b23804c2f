"""The benchmark suite: our supervisor side by side with PgQueuer, Procrastinate, Graphile
Worker (Node.js; npm installs it into a temporary folder) and the database's own limit, on one
server, in one run. Figures as text, then one JSON line.

    python scripts/benchmarks/bench.py [--dsn DSN] [--jobs 20000] [--batches 1,10,100]
                            [--processes 2] [--repeats 3] [--only drain,pickup,...,long]
                            [--no-peers]
                            [--peers pgqueuer,procrastinate,graphile-worker]
                            [--long-jobs 300000] [--future-jobs 200000] [--tiny]

The DSN defaults to PGQ_BENCH_DSN, then the machine's PostgreSQL on 127.0.0.1:5432. Every
scenario gets a fresh database (dropped afterwards). Throughput is timed from the database
clock; each figure is the median over the repeats, and every ratio is the median of ratios
taken within one repeat (systems measured minutes apart at most, on a shared, noisy machine).
The peers need the bench extra: pip install -e '.[bench]'. ``--tiny`` shrinks every
scenario to a few seconds (tests/integration/test_bench_runs.py runs each so: figures
meaningless, the suite kept runnable).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import psycopg
from benchlib import limit as limit_mod
from benchlib import ours, scenarios, timing
from benchlib.common import default_log_dir, median

SCENARIOS = (
    "drain",
    "pickup",
    "history",
    "cpu",
    "enqueue",
    "footprint",
    "long",
    "future",
    "delayed",
)
PEERS = {"pgqueuer": "pgqueuer", "procrastinate": "procrastinate"}


# --tiny: the scenarios' own sizes shrunk so each runs in seconds (the sizes the command line
# sets, --jobs and the like, are the caller's).
TINY: dict[str, dict[str, Any]] = {
    "pickup": {"jobs": 20, "warmup": 5},
    "history": {"claims": 50},
    "cpu": {"jobs": 8, "batch": 2},
    "enqueue": {"single": 50, "bulk": 2_000, "chunk": 1_000},
    "footprint": {"jobs": 300},
    "future": {"claims": timing.BURST * 2},
    "delayed": {"jobs": 20},
}

LIMITS = {
    "two_statements": "limit (pgbench)",
    "one_statement": "limit, one commit per batch (pgbench)",
}


def peers_available() -> dict[str, Any]:
    found = {}
    for name, module in PEERS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = __import__(f"benchlib.peers_{name}", fromlist=["drain"])
    # Graphile Worker is a Node.js package: npm installs it into a temporary folder at its
    # first use (benchlib/peers_graphile.py), when node and npm are on the PATH.
    from benchlib import peers_graphile

    if peers_graphile.available():
        found["graphile-worker"] = peers_graphile
    return found


def run_drains(args: argparse.Namespace, peers: dict[str, Any], log: Path) -> dict[str, Any]:
    """Drain scenario: per batch size and repeat, every system back to back."""
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {}
    ratios: dict[str, dict[int, list[float]]] = {}

    def record(system: str, batch: int, result: dict[str, Any]) -> None:
        runs.setdefault(system, {}).setdefault(batch, []).append(result)
        say(f"  drain b{batch:<3} {system:24s} {result['jobs_per_s']:>10,.0f} jobs/s")

    for repeat in range(args.repeats):
        say(f"drain, repeat {repeat + 1} of {args.repeats}")
        for batch in args.batches:
            this: dict[str, float] = {}
            for history in (False, True):
                result = ours.drain(
                    args.dsn, args.jobs, args.processes, batch, history=history, log_dir=log
                )
                record(result["system"], batch, result)
                this[result["system"]] = result["jobs_per_s"]
            if "pgqueuer" in peers:
                result = peers["pgqueuer"].drain(
                    args.dsn, args.jobs, args.processes, batch, log_dir=log
                )
                record("pgqueuer", batch, result)
                this["pgqueuer"] = result["jobs_per_s"]
            if "graphile-worker" in peers:
                result = peers["graphile-worker"].drain(
                    args.dsn, args.jobs, args.processes, batch, log_dir=log
                )
                record("graphile-worker", batch, result)
                this["graphile-worker"] = result["jobs_per_s"]
            if "procrastinate" in peers:
                result = peers["procrastinate"].drain(
                    args.dsn, args.procrastinate_jobs, args.processes, batch, log_dir=log
                )
                record("procrastinate", batch, result)
                this["procrastinate"] = result["jobs_per_s"]
            # Our two statements as two transactions (the limit as measured until now), and as
            # one transaction per batch: what a child sends, since its pipeline carries the
            # outcomes and the next claim to one Sync and so to one commit.
            for shape, label in LIMITS.items():
                result = limit_mod.limit(args.dsn, args.jobs, batch, args.processes, shape=shape)
                record(label, batch, result)
                this[label] = result["jobs_per_s"]
            for other, value in this.items():
                if other != "pgq-supervisor" and value:
                    ratios.setdefault(other, {}).setdefault(batch, []).append(
                        this["pgq-supervisor"] / value
                    )
    return {
        "jobs_per_s": {
            system: {b: median([r["jobs_per_s"] for r in rs]) for b, rs in by_batch.items()}
            for system, by_batch in runs.items()
        },
        "ours_over": {
            other: {b: round(median(v), 3) for b, v in by_batch.items()}
            for other, by_batch in ratios.items()
        },
        "runs": runs,
    }


def run_pickups(args: argparse.Namespace, peers: dict[str, Any], log: Path) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {}
    for repeat in range(args.repeats):
        say(f"pickup, repeat {repeat + 1} of {args.repeats}")
        systems: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            (
                "pgq-supervisor",
                lambda: ours.pickup(
                    args.dsn, processes=args.processes, log_dir=log, **sizes(args, "pickup")
                ),
            )
        ]
        for name, module in peers.items():
            systems.append(
                (
                    name,
                    lambda m=module: m.pickup(
                        args.dsn, processes=args.processes, log_dir=log, **sizes(args, "pickup")
                    ),
                )
            )
        for name, run in systems:
            result = run()
            results.setdefault(name, []).append(result)
            say(
                f"  pickup {name:16s} p50 {result['p50_ms']:.2f} ms  p95 "
                f"{result['p95_ms']:.2f}  p99 {result['p99_ms']:.2f}"
            )
    return {
        name: {k: median([r[k] for r in rs]) for k in ("p50_ms", "p95_ms", "p99_ms")}
        for name, rs in results.items()
    } | {"runs": results}


def sizes(args: argparse.Namespace, scenario: str) -> dict[str, Any]:
    """The scenario's own sizes under --tiny; none (its defaults) otherwise."""
    return TINY[scenario] if args.tiny else {}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def machine(dsn: str) -> dict[str, Any]:
    with psycopg.connect(dsn) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('fsync', 'synchronous_commit', 'shared_buffers', 'max_connections')"
            ).fetchall()
        )
    versions = {}
    for package in ("psycopg", "pgqueuer", "procrastinate", "fpdf2"):
        try:
            from importlib.metadata import version

            versions[package] = version(package)
        except Exception:
            versions[package] = None
    return {
        "date": scenarios.stamp(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "postgresql": server,
        "settings": settings,
        "versions": versions,
        "load_average_at_start": os.getloadavg(),
    }


def print_tables(report: dict[str, Any]) -> None:
    m = report["machine"]
    print(
        f"pgq-supervisor benchmarks, {m['date']}: PostgreSQL {m['postgresql']}, Python "
        f"{m['python']}, {m['cpus']} CPUs, load {m['load_average_at_start'][0]:.2f} at start"
    )
    if "drain" in report:
        drain = report["drain"]
        batches = sorted({b for by in drain["jobs_per_s"].values() for b in by})
        print("\nDrain, no-op jobs, jobs/s (median):")
        print(f"  {'system':24s}" + "".join(f"{f'batch {b}':>14s}" for b in batches))
        for system, by in drain["jobs_per_s"].items():
            print(
                f"  {system:24s}" + "".join(f"{by.get(b, float('nan')):>14,.0f}" for b in batches)
            )
        print("  ours / other (median of per-repeat ratios):")
        for other, by in drain["ours_over"].items():
            print(
                f"    vs {other:21s}"
                + "".join(f"{by.get(b, float('nan')):>14.2f}" for b in batches)
            )
    if "pickup" in report:
        print("\nPickup latency, idle children, one job every 20 ms (ms, median of repeats):")
        for name, figures in report["pickup"].items():
            if name != "runs":
                print(
                    f"  {name:24s} p50 {figures['p50_ms']:6.2f}  p95 {figures['p95_ms']:6.2f}"
                    f"  p99 {figures['p99_ms']:6.2f}"
                )
    if "history" in report:
        h = report["history"]
        print(
            f"\nClaim latency (batch 10), p50: empty {h['empty']['p50_ms']:.3f} ms, with "
            f"{h['history_rows']:,} finished rows {h['with_history']['p50_ms']:.3f} ms, "
            f"ratio {h['p50_ratio']:.2f}"
        )
    if "cpu" in report:
        c = report["cpu"]
        print(
            f"\nCPU-heavy invoices ({c['jobs']} PDFs, batch {c['batch']}): 1 child "
            f"{c['p1']['jobs_per_s']:.1f}/s, 2 children {c['p2']['jobs_per_s']:.1f}/s, "
            f"speed-up {c['speedup']:.2f}; overhead per job {c['p1']['overhead_share']:.2%} "
            f"(1 child), {c['p2']['overhead_share']:.2%} (2) of "
            f"{c['p1']['handler_ms_per_job']:.1f} ms handler time"
        )
    if "enqueue" in report:
        e = report["enqueue"]
        print(
            f"\nEnqueue: one job in the caller's transaction {e['single']['call']['p50_ms']:.3f}"
            f" ms p50 (whole transaction {e['single']['transaction']['p50_ms']:.3f} ms); "
            f"bulk {e['bulk']['jobs_per_s']:,.0f} jobs/s"
        )
    if "footprint" in report:
        f = report["footprint"]
        idle, busy = f["idle"], f["after_jobs"]
        print(
            f"\nFootprint ({f['processes']} children): master USS "
            f"{idle['master']['uss_kib'] / 1024:.1f} MiB idle, "
            f"{busy['master']['uss_kib'] / 1024:.1f} MiB after {f['jobs']:,} jobs; child USS "
            f"{median([c['uss_kib'] for c in idle['children']]) / 1024:.1f} -> "
            f"{f['child_uss_kib_median_after'] / 1024:.1f} MiB (PSS "
            f"{median([c['pss_kib'] for c in busy['children']]) / 1024:.1f} MiB); "
            f"{f['connections_total']} database connections"
        )
    if "long" in report:
        lg = report["long"]
        on, off = lg["vacuum"], lg["no_vacuum"]
        print(
            f"\nLong drain ({lg['jobs']:,} jobs, batch {lg['batch']}): vacuum service on "
            f"{on['jobs_per_s']:,.0f} jobs/s ({on['vacuums']} vacuums, {on['autovacuums']} by "
            f"autovacuum), off {off['jobs_per_s']:,.0f} jobs/s ({off['autovacuums']} by "
            f"autovacuum); ratio {lg['ratio']:.2f}"
        )
    if "future" in report:
        fu = report["future"]
        rates = fu["jobs_per_s"]
        print(
            f"\nClaim rate (batch 10, claim + complete), jobs/s: alone {rates['none']:,}, beside "
            f"{fu['future_jobs']:,} future jobs of higher priority {rates['scheduled']:,} "
            f"(ratio {fu['ratio']:.2f}); the same jobs kept available as before the scheduled "
            f"state {rates['old_available']:,} (ratio {fu['ratio_old_layout']:.2f})"
        )
    if "delayed" in report:
        d = report["delayed"]
        print(
            f"\nDelayed-start lateness ({d['jobs']} jobs, delay {d['delay_s']:g}s, poll interval "
            f"{d['poll_interval_s']:g}s): p50 {d['p50_ms']:.2f} ms, p95 {d['p95_ms']:.2f}, "
            f"p99 {d['p99_ms']:.2f}; {d['early']} started early"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--procrastinate-jobs", type=int, default=5_000)
    parser.add_argument("--batches", default="1,10,100")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument(
        "--peers", default=None, help="only these peers (comma-separated), of those installed"
    )
    parser.add_argument("--history-rows", type=int, default=1_000_000)
    parser.add_argument("--long-jobs", type=int, default=300_000)
    parser.add_argument("--future-jobs", type=int, default=200_000)
    parser.add_argument(
        "--tiny", action="store_true", help="every scenario in seconds (a smoke run, no figures)"
    )
    args = parser.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    only = set(args.only.split(","))
    unknown = only - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    peers = {} if args.no_peers else peers_available()
    if args.peers is not None:
        wanted = set(args.peers.split(","))
        peers = {name: module for name, module in peers.items() if name in wanted}
    if not args.no_peers and args.peers is None and len(set(PEERS) & set(peers)) < len(PEERS):
        say(
            f"peers not installed: {sorted(set(PEERS) - set(peers))} "
            "(pip install -e '.[bench]'); measuring without them"
        )
    log = default_log_dir()
    report: dict[str, Any] = {
        "machine": machine(args.dsn),
        "settings": {
            "jobs": args.jobs,
            "processes": args.processes,
            "batches": args.batches,
            "repeats": args.repeats,
            "peers": sorted(peers),
        },
    }
    started = time.monotonic()
    if "drain" in only:
        report["drain"] = run_drains(args, peers, log)
    if "pickup" in only:
        report["pickup"] = run_pickups(args, peers, log)
    if "history" in only:
        say("claim cost against history")
        report["history"] = scenarios.claim_vs_history(
            args.dsn, args.history_rows, **sizes(args, "history")
        )
    if "cpu" in only:
        say("CPU-heavy scaling")
        report["cpu"] = scenarios.cpu_scaling(args.dsn, log_dir=log, **sizes(args, "cpu"))
    if "enqueue" in only:
        say("enqueue")
        report["enqueue"] = scenarios.enqueue_rates(args.dsn, **sizes(args, "enqueue"))
    if "footprint" in only:
        say("footprint")
        report["footprint"] = scenarios.footprint(args.dsn, log_dir=log, **sizes(args, "footprint"))
    if "long" in only:
        say(f"long drain, {args.long_jobs:,} jobs at batch 10, vacuum service on and off")
        report["long"] = ours.long_drain(args.dsn, args.long_jobs, args.processes, 10, log_dir=log)
    if "future" in only:
        say(f"claim rate beside {args.future_jobs:,} future higher-priority jobs")
        report["future"] = timing.claim_rate_with_future(
            args.dsn, args.future_jobs, repeats=args.repeats, **sizes(args, "future")
        )
    if "delayed" in only:
        runs = []
        for repeat in range(args.repeats):
            say(f"delayed-start lateness, repeat {repeat + 1} of {args.repeats}")
            runs.append(
                timing.delayed_lateness(
                    args.dsn, processes=args.processes, log_dir=log, **sizes(args, "delayed")
                )
            )
            say(f"  lateness p50 {runs[-1]['p50_ms']:.2f} ms  p99 {runs[-1]['p99_ms']:.2f}")
        report["delayed"] = {
            **runs[0],
            **{k: median([r[k] for r in runs]) for k in ("p50_ms", "p95_ms", "p99_ms")},
            "early": sum(r["early"] for r in runs),
            "runs": runs,
        }
    report["seconds"] = round(time.monotonic() - started, 1)
    print_tables(report)
    print(json.dumps(report, default=str, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
