"""Time the dashboard's /jobs on 100,000 jobs, in-process and in Chromium, and what the optional
index on arguments costs the queue's writes.

    python scripts/benchmarks/web_jobs_bench.py [--jobs 100000] [--renders 30] [--dsn DSN] \
        [--no-browser]

Loads a fresh database with JOBS jobs over 10 queues (a twentieth scheduled, a fiftieth dead,
each with its own arguments), then:

- requests each /jobs page RENDERS times from the real application in-process (httpx's ASGI
  transport: routing, the bounded queries, the template): the unfiltered list, a state, a
  queue and kind, a search by arguments, the dry run of a bulk action;
- loads the same pages in headless Chromium from a real `pgq-supervisor web` process and reads
  each page's time from the browser's Navigation Timing (request start to load event);
- does it all without and with the optional GIN index (sql/optional/jobs_args_index.sql);
- and measures what that index costs the hot path: enqueue, claim and complete of 20,000 jobs
  without and with it, alternated three times.

Prints the figures side by side with their ratios and, last, one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from benchlib.common import connect, fresh_database, latency_summary_ms
from psycopg_pool import AsyncConnectionPool

from supervisor import NewJob, claim, complete, enqueue_many
from supervisor.queue.migrations import migrate
from supervisor.queue.queries import sql_text
from supervisor.web import create_app
from supervisor.web.security import Credentials

ROOT = Path(__file__).resolve().parents[2]
LOAD = """
INSERT INTO pgq.jobs (queue, kind, args, state, run_at, attempts, last_error, finished_at)
SELECT 'queue_' || (i %% 10), 'kind_' || (i %% 7),
       jsonb_build_object('invoice_id', i, 'customer', jsonb_build_object('id', i %% 1000)),
       s.state,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 day' ELSE now() END,
       CASE WHEN s.state = 'discarded' THEN 3 ELSE 0 END,
       CASE WHEN s.state = 'discarded' THEN 'RuntimeError: boom ' || i END,
       CASE WHEN s.state = 'discarded' THEN now() END
FROM generate_series(1, %(jobs)s) AS i
CROSS JOIN LATERAL (
    SELECT CASE WHEN i %% 20 = 1 THEN 'scheduled' WHEN i %% 50 = 2 THEN 'discarded'
                ELSE 'available' END AS state
) AS s
"""
PAGES = {
    "list": "/jobs",
    "state": "/jobs?state=scheduled",
    "queue_kind": "/jobs?queue=queue_3&kind=kind_2",
    "args_rare": '/jobs?args={"invoice_id": 54321}',
    "args_common": '/jobs?args={"customer": {"id": 7}}',
    "dry_run": "/jobs/bulk?action=cancel&queue=queue_1&state=scheduled",
}
INDEX = sql_text("optional/jobs_args_index.sql")
DROP = "DROP INDEX CONCURRENTLY IF EXISTS pgq.jobs_args"


async def in_process(dsn: str, renders: int) -> dict[str, dict[str, Any]]:
    async with AsyncConnectionPool(
        dsn, min_size=1, max_size=2, kwargs={"autocommit": True}
    ) as pool:
        app = create_app(pool=pool, credentials=Credentials())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            result = {}
            for name, url in PAGES.items():
                page = await client.get(url)  # templates compiled, plans cached
                assert page.status_code == 200, (url, page.text[:400])
                times = []
                for _ in range(renders):
                    started = time.perf_counter()
                    page = await client.get(url)
                    times.append(time.perf_counter() - started)
                result[name] = latency_summary_ms(times)
            return result


def in_chromium(dsn: str, loads: int) -> dict[str, dict[str, Any]] | str:
    """Each page's time in a real browser against a real `pgq-supervisor web`."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium or not shutil.which("chromedriver"):
        return "skipped: chromium or chromedriver is not installed"
    os.environ.setdefault("SE_AVOID_STATS", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    folder = Path(tempfile.mkdtemp(prefix="pgq-web-bench-"))
    config = folder / "queues.yaml"
    config.write_text("handlers: {invoice: json:dumps}\npools: {p: {queues: {billing: 1}}}\n")
    port = 19188 + os.getpid() % 500
    web = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "-c", str(config), "web", "--port", str(port)],
        env={**os.environ, "PGQ_DSN": dsn, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--window-size=1360,900",
        f"--user-data-dir={folder / 'chromium'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/static/style.css", timeout=2)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        result = {}
        for name, url in PAGES.items():
            driver.get(base + url)
            times = []
            for _ in range(loads):
                driver.get(base + url)
                timing = driver.execute_script(
                    "const t = performance.getEntriesByType('navigation')[0];"
                    "return [t.requestStart, t.responseStart, t.loadEventEnd];"
                )
                times.append((timing[2] - timing[0]) / 1000.0)
            result[name] = latency_summary_ms(times)
        return result
    finally:
        driver.quit()
        web.terminate()
        web.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)


def write_cost(dsn: str, jobs: int) -> float:
    """Seconds to enqueue, claim and complete ``jobs`` jobs with arguments like the load's."""
    with connect(dsn) as conn:
        started = time.perf_counter()
        for start in range(0, jobs, 1000):
            batch = [
                NewJob("bench", {"invoice_id": n, "customer": {"id": n % 1000}}, queue="w")
                for n in range(start, start + 1000)
            ]
            enqueue_many(conn, batch, notify=False)
        while True:
            claimed = claim(conn, "w", worker="bench:1:1", limit=100)
            if not claimed:
                break
            complete(conn, claimed)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--renders", type=int, default=30)
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--writes", type=int, default=20_000)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument(
        "--dsn",
        default=os.environ.get("PGQ_BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = parser.parse_args()
    result: dict[str, Any] = {"jobs": args.jobs, "renders": args.renders}
    with fresh_database(args.dsn, "web_jobs", prefix="bench_web_") as dsn:
        migrate(dsn)
        with connect(dsn) as conn:
            conn.execute(LOAD, {"jobs": args.jobs})
            conn.execute("VACUUM ANALYZE pgq.jobs")
        for phase in ("without the args index", "with the args index"):
            if phase == "with the args index":
                started = time.perf_counter()
                with connect(dsn) as conn:
                    conn.execute(INDEX)
                    conn.execute("ANALYZE pgq.jobs")
                result["index_build_s"] = round(time.perf_counter() - started, 2)
            pages = asyncio.run(in_process(dsn, args.renders))
            browser = "skipped" if args.no_browser else in_chromium(dsn, args.loads)
            result[phase] = {"in_process": pages, "chromium": browser}
            print(f"{phase}:")
            for name in PAGES:
                line = f"  {name:12} in-process p50 {pages[name]['p50_ms']:7.1f} ms"
                line += f"  p95 {pages[name]['p95_ms']:7.1f} ms"
                if isinstance(browser, dict):
                    line += f"  | Chromium p50 {browser[name]['p50_ms']:7.1f} ms"
                    line += f"  p95 {browser[name]['p95_ms']:7.1f} ms"
                print(line)
        print("ratios, with / without the index (in-process p50):")
        ratios = {}
        for name in PAGES:
            before = result["without the args index"]["in_process"][name]["p50_ms"]
            after = result["with the args index"]["in_process"][name]["p50_ms"]
            ratios[name] = round(after / before, 3) if before else None
            print(f"  {name:12} {ratios[name]}")
        result["page_ratio_with_index"] = ratios
        # The index's cost on the hot path: alternate without/with, three times each.
        costs: dict[str, list[float]] = {"without": [], "with": []}
        for _ in range(3):
            for which in ("without", "with"):
                with connect(dsn) as conn:
                    conn.execute(INDEX if which == "with" else DROP)
                costs[which].append(write_cost(dsn, args.writes))
        med = {k: sorted(v)[1] for k, v in costs.items()}
        result["write_cost_s"] = {k: [round(x, 3) for x in v] for k, v in costs.items()}
        result["write_cost_ratio_with_index"] = round(med["with"] / med["without"], 3)
        print(
            f"enqueue + claim + complete of {args.writes:,} jobs: median {med['without']:.2f} s "
            f"without the index, {med['with']:.2f} s with it: "
            f"{result['write_cost_ratio_with_index']} x"
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
