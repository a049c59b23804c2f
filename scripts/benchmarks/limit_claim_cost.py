"""What queue limits cost a claim: the claim statement on a queue without limits, with
queue-wide limits and with per-tenant limits (set so high that they never hold a job back, so
every variant claims the same jobs), and, given --baseline (a sql/queries.sql from before the
limits, e.g. `git show claim:sql/queries.sql > /tmp/base.sql`), the statement without the limits'
hooks at all. One table (20,000 waiting jobs over 50 tenants, 100,000 dead letters), the
variants interleaved round by round so all see the same cache and vacuum state; the claimed jobs
go back to available after each claim. The session is set up as a child's (generic plans,
sequential scans priced out, no JIT: use_generic_plans) and sends each variant as the child
sends the claim (its own $n placeholders, a RawCursor); --planned-each-run measures without.
"limits: tenant, 0013's finish" is the per-tenant variant with the claim's end as 0013 wrote it
(one pgq.tenant_spend call per tenant claimed), put back for its turns: the cost 0031 took
away. Prints a table and, as the last line, JSON.

    .venv/bin/python scripts/benchmarks/limit_claim_cost.py [--baseline FILE] [--rounds 3] \
        [--claims 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.common import fresh_database, migration_at

from supervisor import migrate
from supervisor.queue.jobs import claim_params, execute_claim, read_claim, use_generic_plans
from supervisor.queue.limits import Limits, write_limits
from supervisor.queue.queries import native_text, parse, query

NEVER = 1_000_000  # a limit no run of this script comes near
LIMITS = {
    "none": None,
    "queue": Limits("pdf", concurrency=NEVER, rate=float(NEVER), burst=NEVER),
    "tenant": Limits("pdf", tenant_concurrency=NEVER, tenant_rate=float(NEVER), tenant_burst=NEVER),
}


ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = ROOT / "sql" / "functions"


def finish_of_0013() -> str:
    """0013's pgq.limit_finish, to put back."""
    text = migration_at("0013_limits.sql")
    found = re.search(r"CREATE FUNCTION pgq\.limit_finish\(.*?\n\$\$;", text, re.DOTALL)
    assert found is not None
    return found.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def latencies(conn: psycopg.Connection[Any], sql: str, claims: int, batch: int) -> list[float]:
    params = claim_params(["pdf"], worker="bench", limit=batch, lease_seconds=60)
    statement = native_text(sql)
    found = []
    for _ in range(claims):
        started = time.perf_counter()
        jobs = read_claim(execute_claim(conn, params, statement)).jobs
        found.append((time.perf_counter() - started) * 1000)
        assert len(jobs) == batch, len(jobs)
        conn.execute(
            "UPDATE pgq.jobs SET state = 'available', lease_id = NULL, locked_by = NULL,"
            " lease_until = NULL, attempts = 0 WHERE id = ANY(%s)",
            ([j.id for j in jobs],),
        )
    return found


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(values), 4),
        "mean_ms": round(statistics.fmean(values), 4),
        "p99_ms": round(statistics.quantiles(values, n=100)[98], 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--baseline", type=Path, help="a queries.sql without the limits' hooks")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--claims", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument(
        "--planned-each-run",
        action="store_true",
        help="the server's default planning (and JIT) instead of the child's session's",
    )
    args = parser.parse_args()
    current = (FUNCTIONS / "limit_finish.sql").read_text(encoding="utf-8")
    variants: dict[str, tuple[str, Limits | None, str]] = {
        f"limits: {name}": (query("claim"), limit, current) for name, limit in LIMITS.items()
    }
    variants["limits: tenant, 0013's finish"] = (query("claim"), LIMITS["tenant"], finish_of_0013())
    if args.baseline is not None:
        base = parse(args.baseline.read_text(encoding="utf-8"))["claim"]
        variants = {"before the limits": (base, None, current), **variants}
    figures: dict[str, list[float]] = {name: [] for name in variants}
    with fresh_database(args.dsn, "limit_claim_cost") as db:
        migrate(db)
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO pgq.jobs (queue, kind, state, attempts, finished_at)"
                " SELECT 'pdf', 'k', 'discarded', 1, now() FROM generate_series(1, 100000)"
            )
            conn.execute(
                "INSERT INTO pgq.jobs (queue, kind, tenant)"
                " SELECT 'pdf', 'k', 'tenant-' || (g % 50) FROM generate_series(1, 20000) AS g"
            )
            conn.execute("VACUUM ANALYZE pgq.jobs")
            if not args.planned_each_run:
                use_generic_plans(conn)
            for _ in range(args.rounds):
                for name, (sql, limit, functions) in variants.items():
                    conn.execute(functions)
                    write_limits(conn, [limit] if limit else [], ["pdf"], "bench")
                    figures[name] += latencies(conn, sql, args.claims, args.batch)
    result = {name: summary(values) for name, values in figures.items()}
    reference = result["limits: none"]["p50_ms"]
    for row in result.values():
        row["p50_vs_no_limits"] = round(row["p50_ms"] / reference, 3)
    print(f"claim of {args.batch} from one queue of 20,000 jobs over 50 tenants")
    print(f"{'variant':<30} {'p50 ms':>8} {'mean ms':>8} {'p99 ms':>8} {'p50 ratio':>10}")
    for name, row in result.items():
        print(
            f"{name:<30} {row['p50_ms']:8.3f} {row['mean_ms']:8.3f} {row['p99_ms']:8.3f}"
            f" {row['p50_vs_no_limits']:10.3f}"
        )
    print(json.dumps({"batch": args.batch, "claims_each": args.claims * args.rounds, **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
