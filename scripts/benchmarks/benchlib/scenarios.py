"""Our scenarios that have no peer counterpart: claim cost against history, CPU-heavy scaling,
enqueue, and footprint. Each starts from a fresh database and returns one dict of figures."""

from __future__ import annotations

import socket
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import psycopg

from benchlib.common import fresh_database, latency_summary_ms, median, rate
from benchlib.ours import Supervisor, _fill, _wait, config_text, drain_with
from supervisor import NewJob, claim, complete, enqueue, enqueue_many, migrate

INVOICE_LINES = 20  # the example's default: about 45 ms of CPU per invoice on this machine


def claim_vs_history(dsn: str, history_rows: int = 1_000_000, claims: int = 2000) -> dict[str, Any]:
    """Claim latency (batch 10, claim + complete, one connection) with an empty table, then
    with `history_rows` finished rows beside the backlog: dead letters in pgq.jobs and the same
    number in pgq.job_history. The partial claim index should make the ratio ~1."""
    with fresh_database(dsn, "claim_history") as db:
        migrate(db)
        with psycopg.connect(db, autocommit=True) as conn:
            empty = _claim_latencies(conn, claims)
            conn.execute(
                """
                INSERT INTO pgq.jobs (queue, kind, args, state, attempts, last_error, finished_at)
                SELECT 'default', 'noop', '{}', 'discarded', 10, 'boom',
                       now() - make_interval(secs => g %% 86400)
                FROM generate_series(1, %(n)s) AS g
                """,
                {"n": history_rows},
            )
            conn.execute(
                """
                INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at,
                                             started_at, finished_at)
                SELECT g, 'default', 'noop', 'completed', 1, now(), now(), now()
                FROM generate_series(1, %(n)s) AS g
                """,
                {"n": history_rows},
            )
            conn.execute("VACUUM ANALYZE pgq.jobs")
            conn.execute("VACUUM ANALYZE pgq.job_history")
            full = _claim_latencies(conn, claims)
    ratio = full["p50_ms"] / empty["p50_ms"]
    return {
        "scenario": "claim_vs_history",
        "history_rows": history_rows,
        "claims": claims,
        "empty": empty,
        "with_history": full,
        "p50_ratio": round(ratio, 3),
    }


def _claim_latencies(conn: psycopg.Connection[Any], claims: int) -> dict[str, Any]:
    enqueue_many(conn, [NewJob("noop") for _ in range(claims * 10 + 1000)], notify=False)
    conn.execute("VACUUM ANALYZE pgq.jobs")
    seconds = []
    for i in range(claims + 50):
        started = time.perf_counter()
        jobs = claim(conn, "default", worker="bench", limit=10)
        if i >= 50:  # warm-up: plans, caches
            seconds.append(time.perf_counter() - started)
        complete(conn, jobs)
    return latency_summary_ms(seconds)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def cpu_scaling(dsn: str, jobs: int = 120, batch: int = 4, *, log_dir: Path) -> dict[str, Any]:
    """Real invoice PDFs (examples.pdf, fpdf2) with 1 and 2 children claiming `batch` at a time
    (the design card's PDF pool claims 4): the speed-up, and the supervisor's overhead per job
    as a share of the handler's own time (the handlers' summed duration, from the supervisor's
    metrics, against children x wall time). Timed from pgq.job_history, so the benchmark
    polls only every 50 ms and leaves the two cores to the renderers."""
    out = Path("/tmp/pgq-bench-invoices")
    results: dict[str, Any] = {
        "scenario": "cpu_scaling",
        "jobs": jobs,
        "batch": batch,
        "handler": "examples.pdf:render_invoice",
        "lines": INVOICE_LINES,
    }
    for processes in (1, 2):
        port = _free_port()
        with fresh_database(dsn, f"cpu_{processes}") as db:
            _fill(
                db,
                jobs,
                kind="render_pdf",
                args=lambda i: {
                    "invoice_id": i + 1,
                    "customer": f"Customer {i}",
                    "lines": INVOICE_LINES,
                    "out_dir": str(out),
                },
            )
            config = config_text(
                processes,
                batch,
                kind="render_pdf",
                history=True,
                handler="examples.pdf:render_invoice",
                metrics_port=port,
            )
            drained = drain_with(
                db,
                jobs,
                config,
                log_dir=log_dir,
                name=f"cpu-{processes}",
                history=True,
                poll=0.05,
                metrics_scrape=lambda port=port: _scrape(port, "pgq_job_duration_seconds_sum"),
            )
        handler_seconds = drained.pop("scraped")
        overhead = (processes * drained["seconds"] - handler_seconds) / handler_seconds
        results[f"p{processes}"] = {
            **drained,
            "handler_seconds": round(handler_seconds, 3),
            "handler_ms_per_job": round(handler_seconds / jobs * 1000, 2),
            "overhead_share": round(overhead, 4),
        }
    results["speedup"] = round(results["p2"]["jobs_per_s"] / results["p1"]["jobs_per_s"], 3)
    return results


def enqueue_rates(
    dsn: str, single: int = 2000, bulk: int = 100_000, chunk: int = 10_000
) -> dict[str, Any]:
    """One enqueue inside the caller's transaction (the call, and the whole transaction with
    its commit), and bulk enqueue in chunks of `chunk` jobs per statement."""
    with fresh_database(dsn, "enqueue") as db:
        migrate(db)
        with psycopg.connect(db) as conn:
            calls, transactions = [], []
            for i in range(single + 100):
                begun = time.perf_counter()
                with conn.transaction():
                    called = time.perf_counter()
                    enqueue(conn, "noop", {"i": i}, queue="single")
                    done = time.perf_counter()
                if i >= 100:
                    calls.append(done - called)
                    transactions.append(time.perf_counter() - begun)
            batches = [
                [NewJob("noop", {"i": i}, queue="bulk") for i in range(chunk)]
                for _ in range(bulk // chunk)
            ]
            started = time.perf_counter()
            for jobs in batches:
                with conn.transaction():
                    enqueue_many(conn, jobs)
            seconds = time.perf_counter() - started
    return {
        "scenario": "enqueue",
        "single": {
            "call": latency_summary_ms(calls),
            "transaction": latency_summary_ms(transactions),
        },
        "bulk": {
            "jobs": bulk,
            "chunk": chunk,
            "seconds": round(seconds, 3),
            "jobs_per_s": rate(bulk, seconds),
        },
    }


def _memory(pid: int) -> dict[str, int]:
    info = psutil.Process(pid).memory_full_info()
    return {
        "uss_kib": info.uss // 1024,
        "pss_kib": getattr(info, "pss", 0) // 1024,
        "rss_kib": info.rss // 1024,
    }


def footprint(dsn: str, jobs: int = 10_000, processes: int = 2, *, log_dir: Path) -> dict[str, Any]:
    """Master and child memory idle and after `jobs` jobs; database connections per host."""
    with fresh_database(dsn, "footprint") as db:
        migrate(db)
        config = config_text(processes, 10)
        with (
            psycopg.connect(db, autocommit=True) as conn,
            Supervisor(db, config, log_dir, "footprint") as sup,
        ):

            def children() -> list[int]:
                return [c.pid for c in psutil.Process(sup.proc.pid).children()]

            _wait(
                lambda: (
                    len(children()) == processes
                    and conn.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                        "'pgq-supervisor%%' AND datname = current_database()"
                    ).fetchone()[0]
                    >= processes + 2
                ),
                sup,
                60,
                "children up",
            )
            time.sleep(1.0)
            idle = {
                "master": _memory(sup.proc.pid),
                "children": [_memory(pid) for pid in children()],
            }
            connections = conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity WHERE "
                "application_name LIKE 'pgq-supervisor%%' AND datname = current_database() "
                "GROUP BY 1 ORDER BY 1"
            ).fetchall()
            enqueue_many(conn, [NewJob("noop") for _ in range(jobs)])
            _wait(
                lambda: conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0] == 0,
                sup,
                120,
                "jobs done",
            )
            busy = {
                "master": _memory(sup.proc.pid),
                "children": [_memory(pid) for pid in children()],
            }
    return {
        "scenario": "footprint",
        "processes": processes,
        "jobs": jobs,
        "idle": idle,
        "after_jobs": busy,
        "connections": {name: n for name, n in connections},
        "connections_total": sum(n for _, n in connections),
        "child_uss_kib_median_after": median([c["uss_kib"] for c in busy["children"]]),
    }


def stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
