"""Time the dashboard's overview with a million rows in pgq.jobs.

    python scripts/benchmarks/web_overview.py [--rows 1000000] [--renders 50] [--dsn DSN]

Loads a fresh database with ROWS jobs spread over 12 queues the way a backlog looks (most
available at mixed priorities, some scheduled, dead, cancelled and a few hundred running) plus
100,000 history rows over the last hour, then requests `/` from the real application
(supervisor.web.create_app, in-process through httpx's ASGI transport: routing, the queries and
the template) RENDERS times, cold after the bulk load and again after VACUUM ANALYZE (what
autovacuum leaves). Beside it, the same table counted the way `status` counts it (one
count(*) ... GROUP BY queue over the whole table), to show what the bounded queries avoid.
Prints the figures and, last, one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import httpx
from benchlib.common import connect, fresh_database, latency_summary_ms
from psycopg_pool import AsyncConnectionPool

from supervisor.queue.migrations import migrate
from supervisor.queue.queries import query
from supervisor.web import create_app, reads
from supervisor.web.reads import dashboard_query
from supervisor.web.security import Credentials
from supervisor.web.throughput import Throughput

QUEUES = 12
HISTORY_ROWS = 100_000

# Shares of the rows by state; the rest are available.
LOAD = """
INSERT INTO pgq.jobs (queue, kind, args, priority, run_at, state, attempts, max_attempts,
                      lease_id, locked_by, lease_until, started_at, last_error, finished_at,
                      created_at)
SELECT 'queue_' || (i %% %(queues)s),
       'kind_' || (i %% 7),
       jsonb_build_object('n', i),
       (i %% 5) - 2,
       CASE s.state WHEN 'scheduled' THEN now() + make_interval(secs => i %% 86400)
                    ELSE now() - make_interval(secs => i %% 3600) END,
       s.state,
       CASE WHEN s.state IN ('running', 'discarded') THEN 1 ELSE 0 END,
       10,
       CASE WHEN s.state = 'running' THEN i END,
       CASE WHEN s.state = 'running' THEN 'bench:1:' || i END,
       CASE WHEN s.state = 'running' THEN now() + interval '1 minute' END,
       CASE WHEN s.state = 'running' THEN now() END,
       CASE WHEN s.state = 'discarded' THEN 'RuntimeError: boom ' || i END,
       CASE WHEN s.state IN ('discarded', 'cancelled')
            THEN now() - make_interval(secs => i %% 86400) END,
       now() - interval '1 hour'
FROM generate_series(1, %(rows)s) AS i
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN i %% 1000 = 0 THEN 'running'
        WHEN i %% 20 = 1 THEN 'scheduled'
        WHEN i %% 20 = 2 THEN 'discarded'
        WHEN i %% 100 = 3 THEN 'cancelled'
        ELSE 'available'
    END AS state
) AS s
"""

PARTITIONS = "SELECT pgq.ensure_history_partitions(now() - interval '1 day', 2)"
HISTORY = """
INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at, started_at,
                             finished_at)
SELECT i, 'queue_' || (i %% %(queues)s), 'kind_' || (i %% 7),
       CASE WHEN i %% 50 = 0 THEN 'discarded' ELSE 'completed' END, 1,
       now() - interval '2 hours', now() - interval '1 hour',
       now() - make_interval(secs => i %% 3600)
FROM generate_series(1, %(rows)s) AS i
"""


async def render_times(dsn: str, renders: int) -> tuple[float, list[float], list[float], int]:
    """Seconds for the first overview request, per later request, and per read alone (the
    queries, without the page)."""
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:
        app = create_app(pool=pool, credentials=Credentials())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            # The first render also counts the last hour of history once (later renders count
            # only the last minutes) and compiles the templates.
            started = time.perf_counter()
            page = await client.get("/")
            first = time.perf_counter() - started
            assert page.status_code == 200, page.text[:500]
            pages = []
            for _ in range(renders):
                started = time.perf_counter()
                page = await client.get("/")
                pages.append(time.perf_counter() - started)
                assert page.status_code == 200
        queries = []
        throughput = Throughput(dashboard_query("web_throughput_since"))
        await reads.overview(pool, None, "bench", throughput)
        for _ in range(renders):
            started = time.perf_counter()
            await reads.overview(pool, None, "bench", throughput)
            queries.append(time.perf_counter() - started)
        return first, pages, queries, len(page.content)


def status_count_ms(dsn: str, runs: int = 5) -> float:
    """What `status`'s queue_stats costs on the same table (a full count, for comparison)."""
    times = []
    with connect(dsn) as conn:
        for _ in range(runs):
            started = time.perf_counter()
            conn.execute(query("queue_stats")).fetchall()
            times.append(time.perf_counter() - started)
    return round(sorted(times)[len(times) // 2] * 1000, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--renders", type=int, default=50)
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = parser.parse_args()
    result: dict[str, Any] = {"rows": args.rows, "queues": QUEUES, "renders": args.renders}
    with fresh_database(args.dsn, "web_overview", prefix="bench_web_") as dsn:
        migrate(dsn)
        started = time.perf_counter()
        with connect(dsn) as conn:
            conn.execute(LOAD, {"rows": args.rows, "queues": QUEUES})
            conn.execute(PARTITIONS)
            conn.execute(HISTORY, {"rows": HISTORY_ROWS, "queues": QUEUES})
            counts = dict(conn.execute("SELECT state, count(*) FROM pgq.jobs GROUP BY 1"))
        result["load_s"] = round(time.perf_counter() - started, 1)
        result["states"] = counts
        print(f"loaded {args.rows:,} jobs {counts} and {HISTORY_ROWS:,} history rows")
        for phase in ("after bulk load", "after VACUUM ANALYZE"):
            if phase == "after VACUUM ANALYZE":
                with connect(dsn) as conn:
                    conn.execute("VACUUM ANALYZE pgq.jobs")
                    conn.execute("VACUUM ANALYZE pgq.job_history")
            first, pages, reads_only, size = asyncio.run(render_times(dsn, args.renders))
            page_ms = latency_summary_ms(pages)
            query_ms = latency_summary_ms(reads_only)
            full = status_count_ms(dsn)
            result[phase] = {
                "first_page_ms": round(first * 1000, 1),
                "page": page_ms,
                "queries": query_ms,
                "status_count_ms": full,
            }
            print(
                f"{phase}: first overview {first * 1000:.1f} ms; then "
                f"p50 {page_ms['p50_ms']} ms, p95 {page_ms['p95_ms']} ms, "
                f"max {page_ms['max_ms']} ms ({size:,} bytes); its queries alone p50 "
                f"{query_ms['p50_ms']} ms; status's full count {full} ms"
            )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
