"""The claim of an idle child's wake-up, side by side: one job arrives, the child claims it (batch
10), then carries its completion in a claim that finds nothing. The part of the idle pickup
latency (scripts/benchmarks/pickup_trees.py) that the statement itself costs.

    python scripts/benchmarks/idle_claim_cost.py [--dsn DSN] [--jobs 400] [--old QUERIES_SQL ...]

Lanes, each on its own connection, rounds alternating between them (one job per lane per
round): each variant of the builder's claim (``claim_builder.VARIANTS``) in the child's session
settings (generic plans, enable_seqscan off, jit off), and for each ``--old FILE`` (a
sql/queries.sql, e.g. `git show fbdc53d:sql/queries.sql > /tmp/fbdc.sql`) that file's claim,
sent with the parameters it names; with ``--old-settings`` in the child's session settings too
(without: the server's defaults, as a child before 7a56484 ran). Prints the median and p90 of
both statements per lane in microseconds (client wall clock), and the server backend's CPU for
both (read with psutil: the server must be on this machine), with the ratio to the first lane,
then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib.common import fresh_database

from supervisor import enqueue, migrate
from supervisor.queue import claim_builder
from supervisor.queue.jobs import claim_params, use_generic_plans
from supervisor.queue.queries import native_text, parse


class Lane:
    def __init__(self, name: str, sql: str, db: str, settings: bool) -> None:
        self.name = name
        self.text, self.names = native_text(sql)
        self.conn = psycopg.connect(db, autocommit=True)
        if settings:
            use_generic_plans(self.conn)
        self.pick: list[float] = []
        self.empty: list[float] = []
        # The server backend's CPU (the server is on this machine): the load of a shared
        # machine moves the wall clock far more than it.
        self.backend = psutil.Process(self.conn.info.backend_pid)
        self.cpu = 0.0

    def backend_cpu(self) -> float:
        times = self.backend.cpu_times()
        return times.user + times.system

    def run(self, done: list[tuple[int, int]]) -> tuple[float, list[tuple[int, int]]]:
        params: dict[str, Any] = claim_params("default", worker="w", limit=10)
        params.update(
            queue="default",
            done_ids="{" + ",".join(str(i) for i, _ in done) + "}",
            done_lease_ids="{" + ",".join(str(lease) for _, lease in done) + "}",
        )
        started = time.perf_counter()
        rows = (
            psycopg.RawCursor(self.conn)
            .execute(self.text, [params[n] for n in self.names])
            .fetchall()
        )
        took = time.perf_counter() - started
        return took, [(r[0], r[8]) for r in rows[:-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("PGQ_TEST_DSN", "postgresql://postgres@127.0.0.1/test")
    )
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--old", type=Path, action="append", default=[])
    parser.add_argument("--old-settings", action="store_true")
    args = parser.parse_args()
    with fresh_database(args.dsn, "idle_claim") as db:
        migrate(db)
        lanes = [Lane(v, claim_builder.statement(v), db, True) for v in claim_builder.VARIANTS]
        for path in args.old:
            sql = parse(path.read_text(encoding="utf-8"))["claim"]
            lanes.append(Lane(path.stem, sql, db, args.old_settings))
        with psycopg.connect(db, autocommit=True) as producer:
            for round_no in range(args.jobs):
                for lane in lanes if round_no % 2 == 0 else reversed(lanes):
                    enqueue(producer, "k")
                    cpu = lane.backend_cpu()
                    took, got = lane.run([])
                    assert len(got) == 1, (lane.name, got)
                    empty, none = lane.run(got)
                    assert not none
                    lane.cpu += lane.backend_cpu() - cpu
                    lane.pick.append(took)
                    lane.empty.append(empty)
        report: dict[str, Any] = {}
        first = lanes[0]
        for lane in lanes:
            lane.conn.close()
            report[lane.name] = {
                "pick_us_p50": round(statistics.median(lane.pick) * 1e6, 1),
                "pick_us_p90": round(statistics.quantiles(lane.pick, n=10)[-1] * 1e6, 1),
                "empty_us_p50": round(statistics.median(lane.empty) * 1e6, 1),
                "empty_us_p90": round(statistics.quantiles(lane.empty, n=10)[-1] * 1e6, 1),
                "backend_cpu_us_per_pair": round(lane.cpu / args.jobs * 1e6, 1),
            }
        for lane in lanes:
            r, f = report[lane.name], report[first.name]
            print(
                f"{lane.name:16s} claim of 1 job p50 {r['pick_us_p50']:7.1f} us"
                f" (x{r['pick_us_p50'] / f['pick_us_p50']:.2f}) p90 {r['pick_us_p90']:7.1f}"
                f"   empty claim p50 {r['empty_us_p50']:7.1f} us"
                f" (x{r['empty_us_p50'] / f['empty_us_p50']:.2f}) p90 {r['empty_us_p90']:7.1f}"
                f"   server CPU a pair {r['backend_cpu_us_per_pair']:7.1f} us"
                f" (x{r['backend_cpu_us_per_pair'] / f['backend_cpu_us_per_pair']:.2f})"
            )
        print(json.dumps({"scenario": "idle_claim_cost", "jobs": args.jobs, "lanes": report}))


if __name__ == "__main__":
    main()
