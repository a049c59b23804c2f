"""Where a drain spends our CPU: the real supervisor emptying a queue of no-op jobs, sampled.

A fresh database is filled with no-op jobs, a real supervisor (`python -m supervisor.cli`) drains
it, and while it does:

- py-spy samples the master and every child (``--subprocesses``, non-blocking, so the processes
  measured are never stopped; ``--gil``, so only samples where Python runs count, not those where
  a process waits on the database), and the samples are folded into the functions that held it:
  self time (the frame on top) and inclusive time (anywhere on the stack), per role;
- psutil reads the CPU time of the master and of each child over the drain, which gives the CPU
  per job of each side, in microseconds.

Prints a table per role and, as the last line, the whole result as JSON. Anyone can rerun it:

    .venv/bin/pip install py-spy
    .venv/bin/python scripts/benchmarks/profile_drain.py --jobs 100000 --batch 10
    .venv/bin/python scripts/benchmarks/profile_drain.py --no-profile      # CPU per job only
    .venv/bin/python scripts/benchmarks/profile_drain.py --history   # history (and costs) kept

The database comes from --dsn, else PGQ_BENCH_DSN, else the machine's PostgreSQL.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import psycopg
from benchlib.common import fresh_database, rate
from benchlib.ours import Supervisor, _fill, config_text, time_drain

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
# py-spy's raw format: one folded stack per line, frames joined by ';', then the sample count.
# With --subprocesses one frame names the process: `process 1234:"python -m ..."`.
_PROCESS = re.compile(r"^process (\d+):")
# A frame is `function (path:line)`; the line is dropped so one function is one entry.
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<path>[^:()]*)(?::\d+)?\)$")


def short(frame: str) -> str:
    """`claim (supervisor/queue/jobs.py)` for a frame of our code or a library's."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["path"]
    for marker in ("site-packages/", "/lib/python3", "/work/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    for prefix in ("wt/", "main/"):
        if path.startswith(prefix):
            path = path.split("/", 2)[-1] if prefix == "wt/" else path[len(prefix) :]
    return f"{match['fn']} ({path})"


def fold(raw: Path, master_pid: int) -> dict[str, dict[str, Counter[str]]]:
    """{role: {"self": Counter, "inclusive": Counter, "samples": Counter}} from py-spy's file."""
    roles: dict[str, dict[str, Counter[str]]] = {}
    for line in raw.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        pids = [int(m[1]) for m in map(_PROCESS.match, frames) if m]
        frames = [f for f in frames if not _PROCESS.match(f)]
        # The process frames run from the master down to the process sampled.
        role = "master" if not pids or pids[-1] == master_pid else "child"
        # py-spy names the thread in a frame (`thread (0x...)`); it is not code.
        frames = [f for f in frames if not f.startswith("thread (")]
        # Every stack starts with the same frames (the entry point, and in a child the master's
        # frames it was forked from): keep what lies below the role's own loop.
        for i in range(len(frames) - 1, -1, -1):
            if frames[i].startswith(("Worker.run (", "Master.run (")):
                frames = frames[i + 1 :]
                break
        if not frames:
            continue
        named = [short(f) for f in frames]
        bucket = roles.setdefault(role, {"self": Counter(), "inclusive": Counter(), "n": Counter()})
        bucket["self"][named[-1]] += count
        for fn in set(named):
            bucket["inclusive"][fn] += count
        bucket["n"]["samples"] += count
    return roles


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system


def profile(args: argparse.Namespace) -> dict[str, Any]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not args.no_profile and not Path(spy).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    out_dir = Path(tempfile.mkdtemp(prefix="pgq-profile-"))
    with fresh_database(args.dsn, f"profile_b{args.batch}") as db:
        _fill(db, args.jobs)
        config = config_text(args.processes, args.batch, history=args.history)
        with (
            psycopg.connect(db, autocommit=True) as conn,
            Supervisor(db, config, out_dir, "profile") as sup,
        ):
            master = psutil.Process(sup.proc.pid)
            # The children are forked at start; wait for all of them before the first sample.
            deadline = time.monotonic() + 60
            while len(master.children()) < args.processes:
                sup.check_alive()
                if time.monotonic() > deadline:
                    raise TimeoutError("the children did not start within 60 s")
                time.sleep(0.02)
            children = master.children()
            before = {p.pid: cpu_seconds(p) for p in [master, *children]}
            raw = out_dir / "profile.raw"
            spy_proc = None
            if not args.no_profile:
                spy_proc = subprocess.Popen(
                    [
                        spy,
                        "record",
                        "--pid",
                        str(master.pid),
                        "--subprocesses",
                        "--nonblocking",
                        # Only samples that hold the GIL: Python running, not a process waiting
                        # on the database (psycopg releases the GIL while it waits).
                        "--gil",
                        "--rate",
                        str(args.rate),
                        "--format",
                        "raw",
                        "--output",
                        str(raw),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                )
            seconds = time_drain(
                conn,
                timeout=args.timeout,
                on_timeout=lambda: f"not drained after {args.timeout:.0f}s",
                each_poll=lambda _: sup.check_alive(),
            )
            after = {p.pid: cpu_seconds(p) for p in [master, *children]}
            if spy_proc is not None:
                spy_proc.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
                _, err = spy_proc.communicate(timeout=60)
            sup.stop()
    child_cpu = sum(after[p.pid] - before[p.pid] for p in children)
    master_cpu = after[master.pid] - before[master.pid]
    result: dict[str, Any] = {
        "jobs": args.jobs,
        "batch": args.batch,
        "processes": args.processes,
        "history": args.history,
        "jobs_per_s": rate(args.jobs, seconds),
        "cpu_us_per_job": {
            "children": round(child_cpu / args.jobs * 1e6, 1),
            "master": round(master_cpu / args.jobs * 1e6, 2),
        },
        "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, "
        f"Python {platform.python_version()}",
    }
    if spy_proc is not None:
        if not raw.exists():
            raise SystemExit(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        roles = fold(raw, master.pid)
        result["profile"] = {
            role: {
                "samples": data["n"]["samples"],
                "self": top(data["self"], data["n"]["samples"], args.top),
                "inclusive": top(data["inclusive"], data["n"]["samples"], args.top),
            }
            for role, data in sorted(roles.items())
        }
    shutil.rmtree(out_dir, ignore_errors=True)
    return result


def top(counter: Counter[str], total: int, n: int) -> list[list[Any]]:
    return [[fn, round(100.0 * count / total, 1)] for fn, count in counter.most_common(n)]


def report(result: dict[str, Any]) -> None:
    cpu = result["cpu_us_per_job"]
    print(
        f"{result['jobs']:,} no-op jobs, {result['processes']} children, batch {result['batch']}"
        f"{', history on' if result['history'] else ''}: "
        f"{result['jobs_per_s']:,.0f} jobs/s; CPU per job: children {cpu['children']} us, "
        f"master {cpu['master']} us"
    )
    for role, data in result.get("profile", {}).items():
        print(f"\n{role}: {data['samples']:,} samples")
        print(f"  {'self %':>7}  function")
        for fn, share in data["self"]:
            print(f"  {share:7.1f}  {fn}")
        print(f"  {'incl %':>7}  function")
        for fn, share in data["inclusive"]:
            print(f"  {share:7.1f}  {fn}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("PGQ_BENCH_DSN", DEFAULT_DSN))
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds the drain may take")
    parser.add_argument("--no-profile", action="store_true", help="CPU per job only")
    parser.add_argument(
        "--history", action="store_true", help="history on (each attempt's cost recorded)"
    )
    args = parser.parse_args()
    result = profile(args)
    report(result)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
