"""The claim's cost with priority aging on and off, side by side (issue 33).

    python scripts/benchmarks/aging_claim_cost.py [--dsn DSN] [--backlog 20000] [--rounds 300]
        [--levels 5,50]

For each number of distinct priority levels, one queue holds a backlog of due jobs spread over
that many priorities (older jobs at lower ones, so aging has work to do). Two lanes, each on its
own connection in the child's session settings (generic plans), claim batches of ten in
alternating rounds: the claim with aging off (the queue's %(aging)s is 0) and on (every: 10s).
Each claimed batch is given back at once (same rows, so both lanes see the same backlog). Prints
the median wall time of a claim and the server backend's CPU per claim (psutil: the server must
be on this machine) with the ratio on/off, then one JSON line.
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

from supervisor import migrate
from supervisor.queue.jobs import claim_params, execute_claim, read_claim, use_generic_plans

GIVE_BACK = (
    "UPDATE pgq.jobs SET state = 'available', lease_id = NULL, locked_by = NULL, "
    "lease_until = NULL, attempts = 0 WHERE id = ANY(%s)"
)


class Lane:
    def __init__(self, name: str, db: str, aging: dict[str, float]) -> None:
        self.name = name
        self.aging = aging
        self.conn = psycopg.connect(db, autocommit=True)
        use_generic_plans(self.conn)
        self.backend = psutil.Process(self.conn.info.backend_pid)
        self.walls: list[float] = []
        self.cpu = 0.0

    def run(self) -> list[int]:
        params = claim_params("default", worker="w", limit=10, aging=self.aging)
        times = self.backend.cpu_times()
        before = times.user + times.system
        started = time.perf_counter()
        jobs = read_claim(execute_claim(self.conn, params)).jobs
        self.walls.append(time.perf_counter() - started)
        times = self.backend.cpu_times()
        self.cpu += times.user + times.system - before
        return [j.id for j in jobs]


def scenario(db: str, backlog: int, levels: int, rounds: int) -> dict[str, Any]:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("DELETE FROM pgq.jobs")
        conn.execute(
            """
            INSERT INTO pgq.jobs (kind, priority, run_at)
            SELECT 'k', (g %% %(levels)s)::smallint,
                   now() - make_interval(secs => (%(levels)s - g %% %(levels)s) * 7 + g / 1000.0)
            FROM generate_series(1, %(backlog)s) AS g
            """,
            {"levels": levels, "backlog": backlog},
        )
        conn.execute("VACUUM ANALYZE pgq.jobs")
        lanes = [Lane("aging_off", db, {}), Lane("aging_on", db, {"default": 10.0})]
        for n in range(rounds):
            for lane in lanes if n % 2 == 0 else reversed(lanes):
                got = lane.run()
                assert len(got) == 10, (lane.name, got)
                conn.execute(GIVE_BACK, (got,))
        out = {}
        for lane in lanes:
            lane.conn.close()
            out[lane.name] = {
                "claim_us_p50": round(statistics.median(lane.walls) * 1e6, 1),
                "backend_cpu_us_per_claim": round(lane.cpu / rounds * 1e6, 1),
            }
        off, on = out["aging_off"], out["aging_on"]
        out["ratio_on_off_wall"] = round(on["claim_us_p50"] / off["claim_us_p50"], 2)
        out["ratio_on_off_cpu"] = round(
            on["backend_cpu_us_per_claim"] / max(off["backend_cpu_us_per_claim"], 1e-9), 2
        )
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--dsn", default=os.environ.get("PGQ_TEST_DSN", "postgresql://postgres@127.0.0.1/test")
    )
    parser.add_argument("--backlog", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--levels", default="5,50")
    args = parser.parse_args()
    report: dict[str, Any] = {}
    with fresh_database(args.dsn, "aging_claim") as db:
        migrate(db)
        for levels in [int(x) for x in args.levels.split(",")]:
            r = scenario(db, args.backlog, levels, args.rounds)
            report[f"levels_{levels}"] = r
            print(
                f"{levels:4d} priority levels, {args.backlog} waiting: claim of 10 p50 "
                f"off {r['aging_off']['claim_us_p50']:8.1f} us, on "
                f"{r['aging_on']['claim_us_p50']:8.1f} us (x{r['ratio_on_off_wall']:.2f}); "
                f"server CPU a claim off {r['aging_off']['backend_cpu_us_per_claim']:8.1f} us, "
                f"on {r['aging_on']['backend_cpu_us_per_claim']:8.1f} us "
                f"(x{r['ratio_on_off_cpu']:.2f})"
            )
    print(json.dumps({"scenario": "aging_claim_cost", "backlog": args.backlog, **report}))


if __name__ == "__main__":
    main()
