"""The database's limit for two statement shapes, side by side: our claim and completion as two
statements (two transactions per batch, as the workers run them today) against one statement
(one transaction, one commit per batch). pgbench drives both with no Python in the way; the
shapes alternate within each repeat, and each ratio is taken within one repeat (the machine is
shared: only figures measured side by side are compared).

    .venv/bin/python scripts/benchmarks/limit_shapes.py --repeats 3

The database comes from --dsn, else PGQ_BENCH_DSN, else the machine's PostgreSQL. Prints a table
and, as the last line, JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from benchlib import limit as limit_mod


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 10, 100])
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs: dict[int, dict[str, list[float]]] = {}
    ratios: dict[int, list[float]] = {}
    for _ in range(args.repeats):
        for batch in args.batches:
            # Batch 1 is slow per job: fewer jobs keep the run short, the same for both shapes.
            jobs = args.jobs if batch > 1 else args.jobs // 4
            rates = {}
            for shape in limit_mod.SHAPES:
                result = limit_mod.limit(args.dsn, jobs, batch, args.clients, shape=shape)
                rates[shape] = result["jobs_per_s"]
                runs.setdefault(batch, {}).setdefault(shape, []).append(rates[shape])
            ratios.setdefault(batch, []).append(rates["one_statement"] / rates["two_statements"])
    summary: dict[str, Any] = {"clients": args.clients, "repeats": args.repeats, "batches": {}}
    print(f"{'batch':>5}  {'two statements':>15}  {'one statement':>14}  {'one / two':>9}")
    for batch in args.batches:
        two = statistics.median(runs[batch]["two_statements"])
        one = statistics.median(runs[batch]["one_statement"])
        ratio = statistics.median(ratios[batch])
        print(f"{batch:>5}  {two:>15,.0f}  {one:>14,.0f}  {ratio:>9.2f}")
        summary["batches"][batch] = {
            "two_statements_jobs_per_s": two,
            "one_statement_jobs_per_s": one,
            "ratio": round(ratio, 3),
            "runs": runs[batch],
        }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
