"""A queue's rate limit held by several real supervisors together, then lifted by a reload.

Starts --supervisors supervisors (each its own PGQ_HOST, --processes children, batch --batch) on
a fresh database, with `limits: {rated: {rate: R/s, burst: B}}` and a backlog far larger than
the run can take. Every start is stamped on the database's clock twice: when the claim takes
the job (a trigger on the claim's UPDATE, inside the limits' critical section, so on the clock
the token bucket reads) and when the handler runs (a ledger row). After a second's warm-up it
measures --seconds: the starts per second against R (the target: within 5%), the most claims in
any one-second window against R + B (never more; a token bucket allows at most B + R x T in any
T seconds), the same from the handler's stamps (which lag the claim by a varying amount, so a
window of them can hold one more), and
how many claims the children sent per start (the children sleep until the token promised to
them is due, so that ratio stays small: no busy poll). Then the limit is removed from the file
and every supervisor gets SIGHUP: the rate in the --lifted-seconds after it, against R, shows
the queue back at full speed.

    .venv/bin/python scripts/benchmarks/limit_rates.py [--rate 20] [--seconds 60] [--dsn DSN]
    .venv/bin/python scripts/benchmarks/limit_rates.py --tenants 3 --compare

The backlog is ANALYZEd before the supervisors start, as autovacuum would soon after a bulk load
(this repository's test server runs without autovacuum). Without statistics the claim's tenant
walk reads the queue through jobs_claim and sorts it at each step (25 ms a step with 24,000
jobs), under the queue's limits mutex: the claims of the queue then take turns at ~30 a second
and the tenants' buckets overflow between them (3 tenants at 20/s measured 0.88-0.97 of the
rate). --compare runs, side by side: that build's measurement (0013's limit functions, no
statistics), 0013's functions with statistics, and the current functions (0030: a token
promised to each waiting claim) with statistics; and the wasted claims (claims that started
nothing) per job started in each.

Prints a table and, as the last line, JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "benchmarks"))
from benchlib.common import fresh_database, migration_at  # noqa: E402

from supervisor import NewJob, enqueue_many, migrate  # noqa: E402
from supervisor.config.limits import default_burst  # noqa: E402
from tests.handlers import LEDGER  # noqa: E402

CONFIG = """
handlers: {{record: tests.handlers:record}}
pools:
  main: {{processes: {processes}, batch: {batch}, queues: {{rated: 1}}}}
metrics: {{port: {port}}}
shutdown_timeout: 10s
"""
LIMIT = "limits:\n  rated: {{rate: {rate:g}/s, burst: {burst}}}\n"
TENANT_LIMIT = "limits:\n  rated: {{per_tenant: {{rate: {rate:g}/s, burst: {burst}}}}}\n"


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def scrape(port: int) -> dict[str, float]:
    """The claim counters of one supervisor's /metrics, summed over its pools."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/metrics")
        body = conn.getresponse().read().decode()
    finally:
        conn.close()
    found = {"pgq_claims_total": 0.0, "pgq_claims_empty_total": 0.0}
    for line in body.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in found:
            found[name] += float(line.rsplit(" ", 1)[1])
    return found


# The claim's own moment: the UPDATE that makes a job running, after the limits took its room
# and under their mutex, and before the claim's end takes the tenants' tokens.
CLAIM_LEDGER = """
CREATE TABLE bench_claims (job_id bigint NOT NULL, at timestamptz NOT NULL);
CREATE FUNCTION bench_claimed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench_claims VALUES (NEW.id, clock_timestamp());
    RETURN NULL;
END $$;
CREATE TRIGGER bench_claimed AFTER UPDATE OF state ON pgq.jobs FOR EACH ROW
    WHEN (NEW.state = 'running' AND OLD.state <> 'running') EXECUTE FUNCTION bench_claimed();
"""


def starts_between(
    conn: psycopg.Connection[Any],
    start: datetime,
    end: datetime,
    tenant: str | None = None,
    ledger: str = "test_ledger",
) -> list[datetime]:
    """Starts in [start, end), of one tenant's jobs when ``tenant`` is given: as the handlers
    stamped them (test_ledger), or as the claims did (bench_claims)."""
    rows = conn.execute(
        f"SELECT l.at FROM {ledger} AS l LEFT JOIN bench_tenants AS t USING (job_id)"
        " WHERE l.at >= %s AND l.at < %s AND (%s::text IS NULL OR t.tenant = %s::text)"
        " ORDER BY l.at",
        (start, end, tenant, tenant),
    ).fetchall()
    return [row[0] for row in rows]


def most_in_a_second(starts: list[datetime]) -> int:
    most, first = 0, 0
    for last, at in enumerate(starts):
        while at - starts[first] >= timedelta(seconds=1):
            first += 1
        most = max(most, last - first + 1)
    return most


# The functions 0030 and 0031 replaced, as 0013 defined them: the "before" lanes of --compare.
REPLACED_SINCE_0013 = ("tenant_room", "tenant_wait", "limit_take_all", "limit_finish")
LANES = {
    "0013, no statistics": ("0013", False),
    "0013, with statistics": ("0013", True),
    "current, with statistics": ("current", True),
}


def functions_of_0013() -> str:
    """0013's definitions of the functions a later migration replaced, to put back."""
    text = migration_at("0013_limits.sql")
    found = []
    for match in re.finditer(r"CREATE FUNCTION pgq\.(\w+)\(.*?\n\$\$;", text, re.DOTALL):
        if match.group(1) in REPLACED_SINCE_0013:
            found.append(match.group(0).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    assert len(found) == len(REPLACED_SINCE_0013), "0013's functions not found"
    return "\n".join(found)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--rate", type=float, default=20.0, help="starts per second")
    parser.add_argument("--burst", type=int, default=None, help="default: as the YAML's")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--lifted-seconds", type=float, default=5.0)
    parser.add_argument("--supervisors", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument(
        "--tenants",
        type=int,
        default=0,
        help="spread the jobs over N tenants and limit each tenant to the rate (per_tenant)",
    )
    parser.add_argument(
        "--no-analyze", action="store_true", help="start on a backlog without statistics"
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run the lanes side by side: 0013's functions without and with statistics, and"
        " the current ones with statistics",
    )
    args = parser.parse_args()
    if args.seconds + args.lifted_seconds > 110:
        parser.error("keep a run under two minutes: --seconds plus --lifted-seconds <= 110")
    if not args.compare:
        figures = lane(args, "current", not args.no_analyze)
        print(json.dumps(figures))
        ok = figures["within_5_percent"] and figures["never_above_bound"]
        return 0 if ok and figures["limits_left_after_reload"] == 0 else 1
    lanes = {name: lane(args, functions, stats) for name, (functions, stats) in LANES.items()}
    print()
    print(f"{'lane':<26} {'ratio':>7} {'most/s':>7} {'claims/start':>13} {'wasted/start':>13}")
    for name, row in lanes.items():
        print(
            f"{name:<26} {row['ratio_to_limit']:7.4f} {row['most_claimed_in_any_second']:7d}"
            f" {row['claims_per_start']!s:>13} {row['empty_claims_per_start']!s:>13}"
        )
    print(json.dumps({"compare": True, "lanes": lanes}))
    return 0


def lane(args: argparse.Namespace, functions: str, analyze: bool) -> dict[str, Any]:
    """One measured run on a fresh database: the limit functions of ``functions`` ("0013" or
    "current"), the backlog ANALYZEd or not."""
    rate, seconds = args.rate, args.seconds
    burst = args.burst or default_burst(rate)
    with fresh_database(args.dsn, "limit_rates") as db, tempfile.TemporaryDirectory() as tmp:
        migrate(db)
        with psycopg.connect(db, autocommit=True) as conn:
            if functions == "0013":
                conn.execute(functions_of_0013())
            conn.execute(LEDGER)
            conn.execute(CLAIM_LEDGER)
            conn.execute("CREATE TABLE bench_tenants (job_id bigint PRIMARY KEY, tenant text)")
            tenants = [f"tenant-{n}" for n in range(args.tenants)] or [None]
            backlog = int(rate * len(tenants) * (seconds + 2) * 1.2) + 20_000
            for start in range(0, backlog, 5000):
                batch = [
                    NewJob("record", queue="rated", tenant=tenants[i % len(tenants)])
                    for i in range(start, min(start + 5000, backlog))
                ]
                ids = enqueue_many(conn, batch, notify=False)
                conn.execute(
                    "INSERT INTO bench_tenants SELECT * FROM unnest(%s::bigint[], %s::text[])",
                    (ids, [job.tenant for job in batch]),
                )
            if analyze:
                # As autovacuum would after the load; without it the claim's plans go by a
                # table they believe empty (see the docstring).
                conn.execute("ANALYZE pgq.jobs")
            sups = []
            try:
                for n in range(args.supervisors):
                    port = free_port()
                    path = Path(tmp) / f"sup{n}.yaml"
                    body = CONFIG.format(processes=args.processes, batch=args.batch, port=port)
                    limit = TENANT_LIMIT if args.tenants else LIMIT
                    path.write_text(body + limit.format(rate=rate, burst=burst))
                    log = open(Path(tmp) / f"sup{n}.log", "wb")  # noqa: SIM115 - closed below
                    env = {
                        **os.environ,
                        "PGQ_DSN": db,
                        "PGQ_HOST": f"host-{n}",
                        "PYTHONPATH": str(ROOT),
                    }
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "supervisor.cli", "-c", str(path)],
                        cwd=ROOT,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                    sups.append((proc, path, port, log, body))
                deadline = time.monotonic() + 30
                while not conn.execute("SELECT count(*) FROM test_ledger").fetchone()[0]:
                    if time.monotonic() > deadline:
                        raise SystemExit("no job started within 30 s")
                    time.sleep(0.05)
                first = conn.execute("SELECT min(at) FROM test_ledger").fetchone()[0]
                time.sleep(1.0 + seconds + 0.5)
                claims = [scrape(port) for _, _, port, _, _ in sups]
                window_start = first + timedelta(seconds=1)
                window_end = window_start + timedelta(seconds=seconds)
                # Per tenant when each tenant has the limit; else the queue as a whole.
                limited_by = {t: starts_between(conn, window_start, window_end, t) for t in tenants}
                everything_by = {t: starts_between(conn, first, window_end, t) for t in tenants}
                claimed_by = {
                    t: starts_between(conn, first, window_end, t, "bench_claims") for t in tenants
                }
                for proc, path, _, _, body in sups:
                    path.write_text(body)
                    proc.send_signal(signal.SIGHUP)
                lifted_at = conn.execute("SELECT clock_timestamp()").fetchone()[0]
                time.sleep(args.lifted_seconds + 0.5)
                # From half a second after the SIGHUP: the masters read the file and write.
                lifted_from = lifted_at + timedelta(seconds=0.5)
                lifted = starts_between(
                    conn, lifted_from, lifted_from + timedelta(seconds=args.lifted_seconds)
                )
                lifted_limits = conn.execute("SELECT count(*) FROM pgq.queue_limits").fetchone()[0]
            finally:
                for proc, *_ in sups:
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGTERM)
                for proc, _, _, log, _ in sups:
                    try:
                        proc.wait(30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait(10)
                    log.close()
    # The figures of the tenant farthest from the rate (the queue itself without --tenants).
    worst = max(tenants, key=lambda t: abs(len(limited_by[t]) / seconds - rate))
    limited = limited_by[worst]
    measured = len(limited) / seconds
    per_second = [0] * int(seconds)
    for at in limited:
        index = int((at - window_start).total_seconds())
        if 0 <= index < len(per_second):
            per_second[index] += 1
    total_claims = sum(c["pgq_claims_total"] for c in claims)
    empty_claims = sum(c["pgq_claims_empty_total"] for c in claims)
    started_total = sum(len(v) for v in everything_by.values())
    lifted_rate = len(lifted) / args.lifted_seconds / len(tenants)
    figures = {
        "limited": "per tenant" if args.tenants else "queue",
        "tenants": args.tenants,
        "worst_tenant": worst,
        "rate_limit_per_second": rate,
        "burst": burst,
        "supervisors": args.supervisors,
        "children": args.supervisors * args.processes,
        "batch": args.batch,
        "seconds": seconds,
        "starts": len(limited),
        "tenant_rates_per_second": {
            str(t): round(len(v) / seconds, 3) for t, v in limited_by.items()
        },
        "rate_measured_per_second": round(measured, 3),
        "ratio_to_limit": round(measured / rate, 4),
        "within_5_percent": abs(measured / rate - 1) <= 0.05,
        "most_claimed_in_any_second": max(most_in_a_second(v) for v in claimed_by.values()),
        "most_started_in_any_second": max(most_in_a_second(v) for v in everything_by.values()),
        "bound_rate_plus_burst": rate + burst,
        "never_above_bound": all(most_in_a_second(v) <= rate + burst for v in claimed_by.values()),
        "per_second": per_second,
        "claims": int(total_claims),
        "empty_claims": int(empty_claims),
        "claims_per_start": round(total_claims / started_total, 3) if started_total else None,
        "empty_claims_per_start": round(empty_claims / started_total, 3) if started_total else None,
        "limit_functions": functions,
        "analyzed": analyze,
        "lifted_rate_per_second": round(lifted_rate, 1),
        "lifted_ratio_to_limit": round(lifted_rate / rate, 2),
        "limits_left_after_reload": lifted_limits,
    }
    scope = f"each of {args.tenants} tenants" if args.tenants else "the queue"
    print(f"rate limit {rate:g}/s burst {burst} on {scope}, {figures['children']} children,")
    print(f"  limit functions {functions}, {'with' if analyze else 'without'} statistics")
    print(f"  measured      {measured:8.3f}/s   ratio {figures['ratio_to_limit']:.4f} ({worst})")
    print(
        f"  most in 1 s   {figures['most_claimed_in_any_second']:8d}     bound {rate + burst:g}"
        f" (claimed; {figures['most_started_in_any_second']} as the handlers stamped them)"
    )
    print(f"  claims/start  {figures['claims_per_start']}   ({int(empty_claims)} empty claims)")
    print(f"  after reload  {lifted_rate:8.1f}/s   x{figures['lifted_ratio_to_limit']} the limit")
    return figures


if __name__ == "__main__":
    raise SystemExit(main())
