"""The master's lease work through a held xmin horizon (issue 30, item 5), with a real supervisor.

For each lane (a source tree: this one, and the code before the change), on a fresh database: a
supervisor runs a stream of no-op jobs offered at --rate per second (pool `fast`) beside jobs
that run --long-seconds, longer than their --lease (pool `slow`, one enqueued every
--long-every seconds). After --warm seconds a REPEATABLE READ reader takes a snapshot and holds
it for --hold seconds; at the hold's middle one running long job is cancelled. Meanwhile the
script samples pg_stat_activity every 50 ms for the master's statements (renewal, rescue, cancel
watch, vacuum) and reads the master's log (failures, vacuums, the debug line of each turn over
50 ms with the service that took longest).

    .venv/bin/python scripts/benchmarks/lease_horizon_run.py --before-tree /tmp/old16bc6bb \\
        [--rate 3000] [--hold 600] [--lanes current,before]

(`git worktree add /tmp/old16bc6bb 16bc6bb` makes the tree to compare with.) Prints one line per
--bucket seconds per lane and ends with one JSON line: per lane, the per-bucket series and the
summary (long jobs run twice, leases lost, rescued, failures per service, the cancel's delay,
completions per second during the hold against the rate, the machine's load).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# How each service's statement is told apart in pg_stat_activity (this release's and earlier
# ones'); the first that matches names it.
SERVICES = {
    "renewal": r"SET lease_until = now\(\) \+",
    "rescue": r"stopped renewing it",
    "cancel": r"SELECT (j\.)?id, (j\.)?locked_by, (j\.)?kind, (j\.)?queue",
    "vacuum": r"^VACUUM",
}
FAILURES = {
    "renewal": "lease renewal failed",
    "rescue": "rescuer failed",
    "cancel": "cancel watch failed",
    "vacuum": "(vacuum)|vacuum: could not start|vacuum of pgq.jobs failed",
}
CONFIG = """
handlers:
  noop: lease_horizon_jobs:noop
  long: lease_horizon_jobs:long
pools:
  fast: {{processes: {fast}, batch: {batch}, queues: {{fast: 1}}}}
  slow: {{processes: 3, queues: {{slow: 1}}}}
lease: {{duration: {lease}s, renew_every: {renew}s}}
rescue: {{interval: 10s}}
log: {{level: debug}}
"""


def lane_dsn(admin: str, name: str) -> str:
    return conninfo.make_conninfo(admin, dbname=name)


def fresh(admin: str, name: str, tree: Path) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = lane_dsn(admin, name)
    subprocess.run(
        [sys.executable, "-c", f"from supervisor import migrate; migrate({dsn!r})"],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        check=True,
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE bench_long_runs (job_id bigint, attempt int, pid int, event text,"
            " at timestamptz DEFAULT clock_timestamp())"
        )
    return dsn


class Lane:
    def __init__(self, args: argparse.Namespace, name: str, tree: Path, dsn: str) -> None:
        self.args, self.name, self.tree, self.dsn = args, name, tree, dsn
        self.stop = threading.Event()
        self.started = time.time()
        self.offered = 0
        self.samples: dict[int, dict[str, float]] = defaultdict(dict)  # bucket -> max seconds
        self.per_second: dict[int, tuple[int, int]] = {}  # second -> (offered, in system)
        self.load: dict[int, float] = {}
        self.cancel: dict[str, Any] = {}

    def bucket(self, at: float) -> int:
        return int((at - self.started) // self.args.bucket)

    def produce(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            tick, next_long = 0.02, time.monotonic()
            while not self.stop.is_set():
                due = int(self.args.rate * (time.time() - self.started)) - self.offered
                if due > 0:
                    conn.execute(
                        "INSERT INTO pgq.jobs (queue, kind) SELECT 'fast', 'noop'"
                        " FROM generate_series(1, %s)",
                        (due,),
                    )
                    self.offered += due
                if time.monotonic() >= next_long:
                    conn.execute(
                        "INSERT INTO pgq.jobs (queue, kind, args) VALUES ('slow', 'long', %s)",
                        (json.dumps({"seconds": self.args.long_seconds}),),
                    )
                    next_long += self.args.long_every
                time.sleep(tick)

    def hold(self) -> None:
        if self.stop.wait(self.args.warm):
            return
        with psycopg.connect(self.dsn) as reader:
            reader.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT count(*) FROM pgq.jobs").fetchone()
            if self.stop.wait(self.args.hold / 2):
                return
            self.cancel_one()
            self.stop.wait(self.args.hold / 2)

    def cancel_one(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "UPDATE pgq.jobs SET cancel_requested_at = now() WHERE id = (SELECT id FROM"
                " pgq.jobs WHERE queue = 'slow' AND state = 'running' LIMIT 1) RETURNING id"
            ).fetchone()
            if row is None:
                return
            asked = time.monotonic()
            self.cancel = {"job": row[0], "seen_after_s": None}
            while time.monotonic() - asked < 120 and not self.stop.is_set():
                state = conn.execute(
                    "SELECT state FROM pgq.jobs WHERE id = %s", (row[0],)
                ).fetchone()
                if state is None or state[0] != "running":
                    self.cancel["seen_after_s"] = round(time.monotonic() - asked, 2)
                    return
                time.sleep(0.1)

    def sample(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            last_second = -1
            while not self.stop.is_set():
                rows = conn.execute(
                    "SELECT extract(epoch FROM clock_timestamp() - query_start)::float8, query"
                    " FROM pg_stat_activity WHERE datname = current_database()"
                    " AND application_name IN ('pgq-supervisor master',"
                    " 'pgq-supervisor vacuum') AND state = 'active'"
                ).fetchall()
                b = self.bucket(time.time())
                for took, text in rows:
                    for service, marker in SERVICES.items():
                        if re.search(marker, (text or "").lstrip(), re.MULTILINE):
                            self.samples[b][service] = max(self.samples[b].get(service, 0), took)
                            break
                second = int(time.time() - self.started)
                if second != last_second:
                    last_second = second
                    (in_system,) = conn.execute(
                        "SELECT count(*) FROM pgq.jobs WHERE queue = 'fast'"
                    ).fetchone()
                    self.per_second[second] = (self.offered, int(in_system))
                    self.load[b] = os.getloadavg()[0]
                time.sleep(0.05)

    def run(self) -> dict[str, Any]:
        config = Path(tempfile.gettempdir()) / f"lease_horizon_{self.name}.yaml"
        config.write_text(
            CONFIG.format(
                fast=self.args.fast,
                batch=self.args.batch,
                lease=self.args.lease,
                renew=self.args.lease / 3,
            )
        )
        log_path = Path(tempfile.gettempdir()) / f"lease_horizon_{self.name}.log"
        env = {**os.environ, "PGQ_DSN": self.dsn, "PYTHONPATH": f"{self.tree}:{HERE}"}
        with open(log_path, "wb") as log:
            sup = subprocess.Popen(
                [sys.executable, "-m", "supervisor.cli", "-c", str(config)],
                cwd=self.tree,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            threads = [
                threading.Thread(target=t, daemon=True)
                for t in (self.produce, self.hold, self.sample)
            ]
            self.started = time.time()
            for t in threads:
                t.start()
            total = self.args.warm + self.args.hold + self.args.after
            shown = 0
            while time.time() - self.started < total:
                time.sleep(1)
                b = self.bucket(time.time()) - 1
                if b >= shown:
                    self.show(shown)
                    shown = b + 1
            self.stop.set()
            for t in threads:
                t.join(timeout=30)
            sup.send_signal(signal.SIGTERM)
            try:
                sup.wait(timeout=120)
            except subprocess.TimeoutExpired:
                sup.kill()
        return self.summary(log_path.read_text(errors="replace"))

    def show(self, b: int) -> None:
        s = self.samples.get(b, {})
        print(
            f"{self.name} t={b * self.args.bucket:>4}s load={self.load.get(b, 0):.1f} "
            + " ".join(f"{k}={s.get(k, 0) * 1000:.0f}ms" for k in SERVICES),
            flush=True,
        )

    def summary(self, log: str) -> dict[str, Any]:
        a = self.args
        by_bucket: dict[int, dict[str, Any]] = defaultdict(lambda: defaultdict(int))
        for line in log.splitlines():
            m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)", line)
            if not m:
                continue
            # The log's clock is this machine's local time, as time.time()'s is.
            at = time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S"))
            at += float("0." + m.group(1)[20:])
            b = self.bucket(at)
            for service, pattern in FAILURES.items():
                if re.search(pattern, line) and ("ERROR" in line or "WARNING" in line):
                    by_bucket[b][f"{service}_failed"] += 1
            if "vacuum: started on pgq.jobs" in line:
                by_bucket[b]["vacuums_started"] += 1
            t = re.search(r"a turn took ([\d.]+)s \(run_due_services ([a-z ]+): ([\d.]+)s\)", line)
            if t:
                key = f"slowest_turn_{t.group(2).strip()}"
                by_bucket[b][key] = max(by_bucket[b][key], float(t.group(3)))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            runs = conn.execute(
                "SELECT job_id, count(*) FROM bench_long_runs WHERE event = 'started'"
                " GROUP BY job_id"
            ).fetchall()
            rescued = conn.execute(
                "SELECT count(*) FROM pgq.jobs WHERE last_error LIKE '%%lease expired%%'"
            ).fetchone()[0]
        hold = range(a.warm + 5, a.warm + a.hold)
        rates = [
            (self.per_second[s][0] - self.per_second[s][1])
            - (self.per_second[s - 1][0] - self.per_second[s - 1][1])
            for s in hold
            if s in self.per_second and s - 1 in self.per_second
        ]
        series = []
        for b in range(int((a.warm + a.hold + a.after) // a.bucket) + 1):
            row: dict[str, Any] = {"t": b * a.bucket, "load": round(self.load.get(b, 0), 2)}
            row.update({f"{k}_max_ms": round(v * 1000) for k, v in self.samples.get(b, {}).items()})
            row.update(by_bucket.get(b, {}))
            series.append(row)
        totals: dict[str, int] = defaultdict(int)
        for row in by_bucket.values():
            for k, v in row.items():
                if k.endswith("_failed") or k == "vacuums_started":
                    totals[k] += int(v)
        return {
            "lane": self.name,
            "long_jobs": len(runs),
            "long_jobs_run_twice": sum(1 for _, n in runs if n > 1),
            "leases_lost_lines": log.count("lease lost"),
            "rescued_with_lease_expired": int(rescued),
            "cancel": self.cancel,
            "completed_per_s_hold": round(sum(rates) / len(rates), 1) if rates else None,
            "offered_per_s": a.rate,
            **totals,
            "series": series,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument("--lanes", default="current,before")
    parser.add_argument("--before-tree", default="/tmp/old16bc6bb")
    parser.add_argument("--rate", type=int, default=3000)
    parser.add_argument("--fast", type=int, default=4, help="processes of the stream's pool")
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--lease", type=float, default=15.0)
    parser.add_argument("--long-seconds", type=float, default=45.0)
    parser.add_argument("--long-every", type=float, default=20.0)
    parser.add_argument("--warm", type=int, default=30)
    parser.add_argument("--hold", type=int, default=600)
    parser.add_argument("--after", type=int, default=30)
    parser.add_argument("--bucket", type=int, default=30)
    args = parser.parse_args()
    trees = {"current": ROOT, "before": Path(args.before_tree)}
    results = []
    for name in args.lanes.split(","):
        dsn = fresh(args.dsn, f"lease_horizon_{name}", trees[name])
        results.append(Lane(args, name, trees[name], dsn).run())
        r = results[-1]
        print(json.dumps({k: v for k, v in r.items() if k != "series"}), flush=True)
    print(json.dumps({"lanes": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
