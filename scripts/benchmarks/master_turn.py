"""How long one turn of the master's loop can keep it busy, with a big purge under way.

    python scripts/benchmarks/master_turn.py [--dsn DSN] [--rows 1000000] [--root CHECKOUT]

In a fresh database: ``--rows`` dead letters a month old (the nightly purge's work), a trickle
of jobs through two children, and the real ``pgq-supervisor`` with its nightly purge set for
the coming minute and /metrics and /livez scraped every second. It reports the master's turns
while the purge ran (from ``pgq_master_turn_seconds``: how many, and the longest bucket any
fell in), the longest turn since start (``pgq_master_longest_turn_seconds``), the slowest
/livez and /metrics answers, and the purge's rate. Figures, then the JSON on the last line.

``--root`` runs another checkout's supervisor (say, the code before a change): the /livez
figures compare; the turn metrics exist only where the master measures its turns.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

ROOT = Path(__file__).resolve().parents[2]
# The step that took longest, and for run_due_services the service that did.
SLOW_TURN = re.compile(r"master: a turn took (?P<took>[0-9.]+)s \((?P<step>\w+(?: [\w ]+)?): ")
SAMPLE = re.compile(r"^(?P<name>[a-z_]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


def get(port: int, path: str) -> tuple[float, str]:
    """Seconds to answer, and the body ('' when it did not answer within 30 s)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        body = conn.getresponse().read().decode()
    except OSError:
        body = ""
    finally:
        conn.close()
    return time.monotonic() - started, body


def samples(body: str) -> dict[str, float]:
    """name{labels} -> value, for the few series read here."""
    out = {}
    for line in body.splitlines():
        m = SAMPLE.match(line)
        if m:
            key = m["name"] + (f"{{{m['labels']}}}" if m["labels"] else "")
            out[key] = float(m["value"])
    return out


def turn_buckets(metrics: dict[str, float]) -> dict[str, float]:
    return {
        k[len("pgq_master_turn_seconds_bucket{le=") :].strip('"}'): v
        for k, v in metrics.items()
        if k.startswith("pgq_master_turn_seconds_bucket")
    }


def make_database(admin_dsn: str, rows: int) -> tuple[str, str]:
    name = f"bench_turn_{secrets.token_hex(4)}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = conninfo.make_conninfo(admin_dsn, dbname=name)
    from supervisor.queue.migrations import migrate

    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO pgq.jobs (queue, kind, args, state, attempts, finished_at, last_error)"
            " SELECT 'default', 'noop', '{}', 'discarded', 5,"
            "        now() - interval '30 days' - g * interval '1 second', 'gave up'"
            " FROM generate_series(1, %s) AS g",
            (rows,),
        )
        conn.execute("VACUUM ANALYZE pgq.jobs")
    return name, dsn


def drop_database(admin_dsn: str, name: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def trickle(dsn: str, stop: threading.Event, per_second: int = 20) -> None:
    """Jobs flowing through the children while the purge runs: leases to renew, claims."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.wait(1.0 / per_second):
            conn.execute(
                "INSERT INTO pgq.jobs (queue, kind, args) VALUES ('default', 'noop', '{}')"
            )


def purge_minute() -> str:
    """The coming minute, local time, at least 15 s away (the supervisor's start and the
    first scrapes come first)."""
    at = datetime.now().astimezone() + timedelta(seconds=75)
    return at.strftime("%H:%M")


def run(dsn: str, root: Path, port: int, workdir: Path, timeout: float) -> dict[str, Any]:
    at = purge_minute()
    config = workdir / "turn.yaml"
    config.write_text(
        "handlers: {noop: tests.handlers:noop}\n"
        "pools: {main: {processes: 2, queues: {default: 1}}}\n"
        f'purge: {{at: "{at}", discarded_after: 14d}}\n'
        "history: {enabled: true, keep: 7d}\n"
        f"metrics: {{port: {port}}}\n"
        # Debug: the master logs each turn past 50 ms with the step that took longest.
        "log: {level: debug}\n"
    )
    env = {**os.environ, "PGQ_DSN": dsn, "PYTHONPATH": str(root)}
    log_path = workdir / "supervisor.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.cli", "-c", str(config)],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    stop = threading.Event()
    feeder = threading.Thread(target=trickle, args=(dsn, stop), daemon=True)
    feeder.start()
    figures: dict[str, Any] = {"purge_at": at, "livez_max": 0.0, "metrics_max": 0.0}
    before: dict[str, float] | None = None
    last: dict[str, float] = {}
    purge_started = purge_done = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            tick = time.monotonic()
            livez, _ = get(port, "/livez")
            took, body = get(port, "/metrics")
            metrics = samples(body)
            if body:
                figures["livez_max"] = max(figures["livez_max"], livez)
                figures["metrics_max"] = max(figures["metrics_max"], took)
            purged = metrics.get("pgq_purged_jobs_total", 0.0)
            if purge_started is None and purged > 0:
                purge_started, before = tick, last
            if (
                purge_started is not None
                and purge_done is None
                and "purge: deleted" in (log_path.read_text(errors="replace"))
            ):
                purge_done = time.monotonic()
            if purge_done is not None and time.monotonic() - purge_done > 3:
                last = metrics or last
                break
            last = metrics or last
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    figures["purged"] = int(last.get("pgq_purged_jobs_total", 0))
    if purge_started is not None and purge_done is not None:
        figures["purge_seconds"] = round(purge_done - purge_started, 1)
        figures["purge_rows_per_second"] = round(figures["purged"] / (purge_done - purge_started))
    if "pgq_master_longest_turn_seconds" in last:
        figures["longest_turn_since_start"] = last["pgq_master_longest_turn_seconds"]
        after = turn_buckets(last)
        prior = turn_buckets(before or {})
        during = {le: after[le] - prior.get(le, 0.0) for le in after}
        figures["turns_during_purge"] = int(during.get("+Inf", 0))
        # Cumulative buckets: the longest turn is at most the first bound that holds them all.
        bounds = [le for le in after if le != "+Inf"]
        figures["longest_turn_during_purge_at_most"] = next(
            (float(le) for le in bounds if during[le] >= during.get("+Inf", 0)), None
        )
        figures["turn_buckets_during_purge"] = during
    log_text = log_path.read_text(errors="replace")
    slow: dict[str, int] = {}
    for m in SLOW_TURN.finditer(log_text):
        slow[m["step"]] = slow.get(m["step"], 0) + 1
    figures["turns_over_50ms_by_step"] = slow
    figures["log_tail"] = [
        line for line in log_text.splitlines() if "DEBUG" not in line and "pgq.master" in line
    ][-3:]
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose supervisor runs")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    started = time.monotonic()
    name, dsn = make_database(args.dsn, args.rows)
    print(f"{args.rows:,} dead letters in {time.monotonic() - started:.0f}s; database {name}")
    try:
        with tempfile.TemporaryDirectory(prefix="pgq-turn-") as tmp:
            figures = run(dsn, args.root.resolve(), free_port(), Path(tmp), args.timeout)
    finally:
        drop_database(args.dsn, name)
    figures["rows"] = args.rows
    figures["root"] = str(args.root.resolve())
    print(f"purge at {figures['purge_at']}: {figures['purged']:,} dead letters deleted", end="")
    if "purge_seconds" in figures:
        print(f" in {figures['purge_seconds']}s ({figures['purge_rows_per_second']:,}/s)")
    else:
        print(" (did not finish)")
    print(f"slowest /livez answer: {figures['livez_max'] * 1000:.1f} ms")
    print(f"slowest /metrics answer: {figures['metrics_max'] * 1000:.1f} ms")
    if "longest_turn_since_start" in figures:
        print(
            f"master turns during the purge: {figures['turns_during_purge']:,}, the longest "
            f"at most {figures['longest_turn_during_purge_at_most']} s"
        )
        print(f"longest turn since start: {figures['longest_turn_since_start'] * 1000:.1f} ms")
        print(
            f"turns over 50 ms, by the step that took longest: {figures['turns_over_50ms_by_step']}"
        )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
