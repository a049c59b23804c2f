"""The client CPU of one enqueue: process time per call of every Python enqueue path, on one
autocommitted connection, beside the plain INSERT of the same row (scripts/benchmarks/benchlib/
producers.sql, the producers benchmark's floor). Figures as text, then one JSON line.

    python scripts/benchmarks/enqueue_cpu_bench.py [--dsn DSN] [--calls 3000] [--rounds 3]
                                        [--baseline DIR] [--paths insert,enqueue,...]

Each round runs every path ``--calls`` times in a process of its own and reads
``time.process_time()`` around the calls: the Python and libpq time of the client, not the
server's (the server runs on other cores' time, or waits on the commit's flush, which wall time
would count). With ``--baseline DIR`` (a tree of another revision, for example
``git archive main | tar -x -C DIR``), every round runs that tree's ``supervisor`` package and
then this one's, alternated, on the same database: the ratios are this tree's CPU per call over
the baseline's, median of the rounds. ``enqueue_traced`` is ``enqueue`` inside a recording
OpenTelemetry span (the SDK's tracer), when the SDK is installed.
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

HERE = Path(__file__).resolve().parent
TREE = HERE.parents[1]
PATHS = (
    "insert",
    "enqueue",
    "enqueue_many",
    "enqueue_traced",
    "insert_async",
    "enqueue_async",
    "enqueue_many_async",
)
ARGS = {"order": 1234, "customer": "c-42"}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure(dsn: str, paths: list[str], calls: int) -> dict[str, dict[str, float]]:
    """In the child: microseconds of process and wall time per call of each path."""
    import asyncio

    import psycopg
    from psycopg.types.json import Jsonb

    import supervisor
    from supervisor.queue.queries import parse

    statements = parse((HERE / "benchlib" / "producers.sql").read_text(encoding="utf-8"))
    insert = statements["plain_insert"]
    params = {"queue": "default", "kind": "k", "args": Jsonb(ARGS)}
    results: dict[str, dict[str, float]] = {}

    def timed(path: str, run: Any) -> None:
        run(50)  # warm: prepared statements, caches, the names' memo
        cpu, wall = time.process_time(), time.perf_counter()
        run(calls)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        results[path] = {
            "cpu_us": round(cpu / calls * 1e6, 1),
            "wall_us": round(wall / calls * 1e6, 1),
        }

    with psycopg.connect(dsn, autocommit=True) as conn:
        sync = {
            "insert": lambda: conn.execute(insert, params),
            "enqueue": lambda: supervisor.enqueue(conn, "k", ARGS),
            "enqueue_many": lambda: supervisor.enqueue_many(conn, [supervisor.NewJob("k", ARGS)]),
        }
        for path, call in sync.items():
            if path in paths:
                timed(path, lambda n, c=call: [c() for _ in range(n)])
        if "enqueue_traced" in paths:
            tracer = _sdk_tracer()
            if tracer is not None:

                def traced(n: int) -> None:
                    with tracer.start_as_current_span("request"):
                        for _ in range(n):
                            supervisor.enqueue(conn, "k", ARGS)

                timed("enqueue_traced", traced)
        conn.execute("TRUNCATE pgq.jobs, bench_plain_jobs")

    async def run_async() -> None:
        aconn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        calls_of = {
            "insert_async": lambda: aconn.execute(insert, params),
            "enqueue_async": lambda: supervisor.enqueue_async(aconn, "k", ARGS),
            "enqueue_many_async": lambda: supervisor.enqueue_many_async(
                aconn, [supervisor.NewJob("k", ARGS)]
            ),
        }
        for path, call in calls_of.items():
            if path not in paths:
                continue

            async def many(n: int, c: Any = call) -> None:
                for _ in range(n):
                    await c()

            await many(50)  # warm, as timed() does for the sync paths
            cpu, wall = time.process_time(), time.perf_counter()
            await many(calls)
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            results[path] = {
                "cpu_us": round(cpu / calls * 1e6, 1),
                "wall_us": round(wall / calls * 1e6, 1),
            }
        await aconn.close()

    if any(p in paths for p in ("insert_async", "enqueue_async", "enqueue_many_async")):
        asyncio.run(run_async())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE pgq.jobs, bench_plain_jobs")
    return results


def _sdk_tracer() -> Any:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError:
        return None
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    return trace.get_tracer("enqueue_cpu_bench")


def child(tree: Path, dsn: str, paths: list[str], calls: int) -> dict[str, dict[str, float]]:
    """One round of one tree, in a process of its own (each tree's supervisor package)."""
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(tree),
            "--dsn",
            dsn,
            "--calls",
            str(calls),
            "--paths",
            ",".join(paths),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"round of {tree} failed:\n{done.stderr}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--baseline", type=Path, help="another revision's tree, alternated")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    if set(paths) - set(PATHS):
        parser.error(f"unknown paths {sorted(set(paths) - set(PATHS))}; choose from {PATHS}")
    if args.child is not None:
        sys.path.insert(0, str(args.child.resolve()))
        results = measure(args.dsn, paths, args.calls)
        import supervisor

        if not Path(supervisor.__file__).resolve().is_relative_to(args.child.resolve()):
            raise SystemExit(f"{supervisor.__file__} is not under {args.child}")
        print(json.dumps(results))
        return 0

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(TREE))
    from benchlib import producers
    from benchlib.common import fresh_database

    from supervisor import migrate

    trees = {"this": TREE}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), "this": TREE}
    rounds: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in trees}
    load = os.getloadavg()
    with fresh_database(args.dsn, "enqueue_cpu") as db:
        migrate(db)
        producers.prepare(db)
        for r in range(args.rounds):
            for name, tree in trees.items():
                got = child(tree, db, paths, args.calls)
                rounds[name].append(got)
                say(
                    f"  round {r + 1} {name:8s} "
                    + "  ".join(f"{p} {v['cpu_us']:.0f}" for p, v in got.items())
                )
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "calls": args.calls,
        "rounds": args.rounds,
        "load_average_at_start": load,
        "trees": {name: str(tree) for name, tree in trees.items()},
        "cpu_us_median": {},
        "wall_us_median": {},
    }
    for name in trees:
        for key, field in (("cpu_us_median", "cpu_us"), ("wall_us_median", "wall_us")):
            report[key][name] = {
                p: statistics.median(one[p][field] for one in rounds[name]) for p in rounds[name][0]
            }
    print(f"CPU per call, µs, median of {args.rounds} rounds of {args.calls} calls:")
    print(f"  {'path':20s}" + "".join(f"{name:>12s}" for name in trees) + "   ratio")
    cpu = report["cpu_us_median"]
    if "baseline" in trees:
        report["ratio_this_over_baseline"] = {}
    for p in cpu["this"]:
        cells = "".join(f"{cpu[name][p]:>12.1f}" for name in trees)
        ratio = ""
        if "baseline" in trees and cpu["baseline"].get(p):
            value = round(cpu["this"][p] / cpu["baseline"][p], 3)
            report["ratio_this_over_baseline"][p] = value
            ratio = f"   {value:.2f}"
        print(f"  {p:20s}{cells}{ratio}")
    print(json.dumps(report, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
