"""Run the peers and the database limit alone: a table, then one JSON line.

    python scripts/benchmarks/benchlib/peers_cli.py --dsn postgresql://postgres@127.0.0.1/test \\
        [--jobs 20000] [--batch 10 | --batch 1,10,100] [--processes 2] [--repeats 3] [--pickup]

Every repeat runs every system once per batch size, back to back, so the ratios compare
figures taken minutes apart at most; the table shows medians over the repeats, and each ratio
is the median of the per-repeat ratios. Each scenario gets a fresh database on the server the
DSN names (``bench_peers_*``), dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: make the benchlib package importable from its parent folder.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchlib import limit as limit_mod
from benchlib import peers_pgqueuer, peers_procrastinate
from benchlib.common import median

Run = dict[str, Any]


def _scenarios(args: argparse.Namespace, batch: int) -> list[tuple[str, Callable[[], Run]]]:
    dsn, procs = args.dsn, args.processes
    found: list[tuple[str, Callable[[], Run]]] = [
        ("pgqueuer", lambda: peers_pgqueuer.drain(dsn, args.jobs, procs, batch)),
        (
            "procrastinate",
            lambda: peers_procrastinate.drain(dsn, args.procrastinate_jobs, procs, batch),
        ),
    ]
    for protocol in args.limit_protocols:
        found.append(
            (
                f"limit ({protocol})",
                lambda protocol=protocol: limit_mod.limit(
                    dsn, args.limit_jobs, batch, args.clients, protocol=protocol
                ),
            )
        )
    return found


def run_all(args: argparse.Namespace) -> list[Run]:
    runs: list[Run] = []
    for repeat in range(args.repeats):
        for batch in args.batches:
            for label, scenario in _scenarios(args, batch):
                started = time.monotonic()
                result = scenario()
                result.update(
                    label=label, repeat=repeat, wall_s=round(time.monotonic() - started, 1)
                )
                runs.append(result)
                print(
                    f"[{repeat + 1}/{args.repeats}] batch {batch:>3} {label:<18} "
                    f"{result['jobs_per_s']:>10,.0f} jobs/s",
                    file=sys.stderr,
                    flush=True,
                )
        if args.pickup:
            for label, pickup in (
                ("pgqueuer", peers_pgqueuer.pickup),
                ("procrastinate", peers_procrastinate.pickup),
            ):
                result = pickup(args.dsn, processes=args.processes)
                result.update(label=label, repeat=repeat)
                runs.append(result)
                print(
                    f"[{repeat + 1}/{args.repeats}] pickup {label:<14} p50 {result['p50_ms']} ms "
                    f"p99 {result['p99_ms']} ms",
                    file=sys.stderr,
                    flush=True,
                )
    return runs


def summarize(runs: list[Run]) -> list[Run]:
    """Medians per (label, batch), with each drain's rate as a share of the limit's."""
    drains = [r for r in runs if r["scenario"] in ("drain", "limit")]
    by_repeat: dict[tuple[int, int], dict[str, float]] = {}
    for r in drains:
        by_repeat.setdefault((r["repeat"], r["batch"]), {})[r["label"]] = r["jobs_per_s"]
    rows: list[Run] = []
    for label, batch in dict.fromkeys((r["label"], r["batch"]) for r in drains):
        mine = [r for r in drains if r["label"] == label and r["batch"] == batch]
        row: Run = {
            "label": label,
            "scenario": mine[0]["scenario"],
            "batch": batch,
            "jobs": mine[0]["jobs"],
            "jobs_per_s": median([r["jobs_per_s"] for r in mine]),
            "runs": [r["jobs_per_s"] for r in mine],
        }
        for reference in ("limit (prepared)", "pgqueuer"):
            ratios = [
                rates[label] / rates[reference]
                for (_, b), rates in by_repeat.items()
                if b == batch and label in rates and reference in rates
            ]
            if ratios and label != reference:
                row[f"vs {reference}"] = round(median(ratios), 3)
        rows.append(row)
    for label in dict.fromkeys(r["label"] for r in runs if r["scenario"] == "pickup"):
        mine = [r for r in runs if r["scenario"] == "pickup" and r["label"] == label]
        rows.append(
            {
                "label": label,
                "scenario": "pickup",
                "batch": mine[0]["batch"],
                "jobs": mine[0]["jobs"],
                **{
                    k: round(median([r[k] for r in mine]), 3)
                    for k in ("p50_ms", "p95_ms", "p99_ms")
                },
                "runs_p50_ms": [r["p50_ms"] for r in mine],
            }
        )
    return rows


def print_table(rows: list[Run]) -> None:
    drains = [r for r in rows if r["scenario"] != "pickup"]
    if drains:
        print(
            f"{'system':<18} {'batch':>5} {'jobs':>7} {'jobs/s (median)':>16} "
            f"{'vs limit':>9} {'vs pgqueuer':>12}  runs"
        )
        for r in drains:
            ratio = r.get("vs limit (prepared)")
            versus = r.get("vs pgqueuer")
            print(
                f"{r['label']:<18} {r['batch']:>5} {r['jobs']:>7} {r['jobs_per_s']:>16,.0f} "
                f"{'' if ratio is None else f'{ratio:.2f}':>9} "
                f"{'' if versus is None else f'{versus:.2f}':>12}  "
                + ", ".join(f"{x:,.0f}" for x in r["runs"])
            )
    pickups = [r for r in rows if r["scenario"] == "pickup"]
    if pickups:
        print(f"\n{'pickup':<18} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8}  runs (p50)")
        for r in pickups:
            print(
                f"{r['label']:<18} {r['p50_ms']:>8.2f} {r['p95_ms']:>8.2f} {r['p99_ms']:>8.2f}  "
                + ", ".join(f"{x:.2f}" for x in r["runs_p50_ms"])
            )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True, help="any database on the server to use")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per PgQueuer drain")
    parser.add_argument(
        "--procrastinate-jobs",
        type=int,
        default=None,
        help="jobs per Procrastinate drain (default: jobs, at most 5000; it runs ~700 jobs/s)",
    )
    parser.add_argument(
        "--limit-jobs",
        type=int,
        default=None,
        help="jobs pre-filled for the limit (default: jobs; see limit.py on why it must match)",
    )
    parser.add_argument("--batch", default="10", help="batch size, or a comma-separated list")
    parser.add_argument("--processes", type=int, default=2, help="worker processes per peer")
    parser.add_argument("--clients", type=int, default=2, help="pgbench clients for the limit")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of every scenario")
    parser.add_argument(
        "--limit-protocol",
        default="prepared,simple",
        help="pgbench query modes for the limit: prepared (as psycopg runs it), simple",
    )
    parser.add_argument("--pickup", action="store_true", help="also measure idle pick-up")
    args = parser.parse_args(argv)
    args.batches = [int(b) for b in args.batch.split(",")]
    args.limit_protocols = [p.strip() for p in args.limit_protocol.split(",") if p.strip()]
    if args.limit_jobs is None:
        args.limit_jobs = args.jobs
    if args.procrastinate_jobs is None:
        args.procrastinate_jobs = min(args.jobs, 5000)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = run_all(args)
    rows = summarize(runs)
    print_table(rows)
    print(json.dumps({"summary": rows, "runs": runs}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
