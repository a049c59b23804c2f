"""The charts (uPlot) in a real browser: each chart's drawn values read back from its uPlot
instance and compared with the database, axes and legends present, live redraws; and every page
at 1400 px and 420 px, with data and empty (screenshots with PGQ_SCREENSHOTS=1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from supervisor import claim, enqueue
from tests.browser.conftest import Dashboard, screenshot
from tests.lifecycle.harness import query, wait_for

pytestmark = pytest.mark.usefixtures("browser")

YAML = """
    handlers:
      render: tests.handlers:noop
      mail: tests.handlers:noop
    pools:
      main:
        processes: 1
        queues: {work: 3, mail: 1}
    history: {enabled: true}
    schedules:
      nightly: {every: 1h, kind: render, queue: work}
"""

# (minutes ago, queue, kind, outcome, waited seconds)
HISTORY = [
    (3, "work", "render", "completed", 2),
    (3, "work", "render", "completed", 4),
    (3, "work", "render", "completed", 30),
    (7, "work", "render", "discarded", 1),
    (12, "mail", "mail", "completed", 8),
    (40, "work", "render", "completed", 3),
]


def _history(dsn: str, rows: list[tuple[int, str, str, str, int]]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for ago, queue, kind, outcome, waited in rows:
            conn.execute(
                "INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at,"
                " started_at, finished_at) VALUES (0, %s, %s, %s, 1,"
                " now() - make_interval(mins => %s) - make_interval(secs => %s + 1),"
                " now() - make_interval(mins => %s) - interval '1 second',"
                " now() - make_interval(mins => %s))",
                (queue, kind, outcome, ago, waited, ago, ago),
            )


def _running(dsn: str, n: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(n):
            enqueue(conn, "render", queue="work")
        claim(conn, "work", worker="chart-test", limit=n)


def _drawn(browser: Any, chart: str) -> list[list[Any]]:
    """What the chart draws: its uPlot instance's data (x, then each series)."""
    found = browser.execute_script(
        "const u = (window.pgqCharts || {})[arguments[0]]; return u ? u.data : null;", chart
    )
    assert found is not None, f"no chart {chart}"
    return [list(column) for column in found]


def _by_minute(dsn: str, sql: str, queue: str | None = None) -> dict[int, float]:
    rows = query(dsn, sql, (queue, queue))
    return {int(t): float(v) for t, v in rows}


PER_MINUTE = """
    SELECT (floor(extract(epoch FROM finished_at) / 60) * 60)::bigint, count(*)
    FROM pgq.job_history
    WHERE outcome {test} AND finished_at > now() - interval '1 hour'
      AND (%s::text IS NULL OR queue = %s::text)
    GROUP BY 1
"""
WAIT_P95 = """
    SELECT (floor(extract(epoch FROM started_at) / 60) * 60)::bigint,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - created_at))
    FROM (SELECT queue, created_at, started_at FROM pgq.job_history
          UNION ALL  -- the jobs running now started too
          SELECT queue, created_at, started_at FROM pgq.jobs WHERE state = 'running') AS s
    WHERE started_at > now() - interval '1 hour' AND (%s::text IS NULL OR queue = %s::text)
    GROUP BY 1
"""


def _nonzero(drawn: list[list[Any]], column: int) -> dict[int, float]:
    return {int(t): float(v) for t, v in zip(drawn[0], drawn[column], strict=True) if v}


def test_each_chart_draws_what_the_database_holds_and_redraws_live(
    browser: Any, dashboard: Callable[..., Dashboard], ledger: str
) -> None:
    _history(ledger, HISTORY)
    _running(ledger, 2)
    web = dashboard(YAML).wait_up()
    browser.set_window_size(1400, 1000)
    browser.get(web.url + "/charts")
    wait_for(lambda: browser.execute_script("return !!(window.pgqCharts||{})['chart-running']"))
    completed = _drawn(browser, "chart-completed")
    assert len(completed[0]) == 60  # the hour, by the minute
    assert _nonzero(completed, 1) == _by_minute(ledger, PER_MINUTE.format(test="= 'completed'"))
    failed = _drawn(browser, "chart-failed")
    assert _nonzero(failed, 1) == _by_minute(ledger, PER_MINUTE.format(test="<> 'completed'"))
    wait = _drawn(browser, "chart-wait")
    p95 = {int(t): round(float(v), 3) for t, v in zip(wait[0], wait[2], strict=True) if v}
    expected = {t: round(v, 3) for t, v in _by_minute(ledger, WAIT_P95).items()}
    assert p95 == expected
    running = _drawn(browser, "chart-running")
    now_running = query(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'running'")[0][0]
    assert running[1][-1] == now_running == 2
    # Axes and legends: uPlot's own, with the series' names.
    legend = browser.execute_script(
        "return [...document.querySelectorAll('#chart-wait .u-legend .u-label')]"
        ".map(e => e.textContent)"
    )
    assert "wait p50 (s)" in legend and "wait p95 (s)" in legend
    axes = browser.execute_script("return window.pgqCharts['chart-completed'].axes.length")
    assert axes == 2
    screenshot(browser, "charts-hour-1400")

    # Per queue: the mail queue's one job only.
    browser.get(web.url + "/charts?queue=mail")
    wait_for(lambda: browser.execute_script("return !!(window.pgqCharts||{})['chart-completed']"))
    mail = _drawn(browser, "chart-completed")
    assert _nonzero(mail, 1) == _by_minute(ledger, PER_MINUTE.format(test="= 'completed'"), "mail")
    assert sum(mail[1]) == 1

    # Live: a job finishing now is drawn without a reload.
    browser.get(web.url + "/charts")
    wait_for(lambda: browser.execute_script("return !!(window.pgqCharts||{})['chart-completed']"))
    browser.execute_script("window.pgqMarker = 'still here'")
    _history(ledger, [(0, "work", "render", "completed", 1)])
    wait_for(
        lambda: sum(_drawn(browser, "chart-completed")[1]) == 6,
        20,
        what="the live redraw",
    )
    assert browser.execute_script("return window.pgqMarker") == "still here"

    # The day, by the quarter hour.
    browser.get(web.url + "/charts?range=day")
    wait_for(lambda: browser.execute_script("return !!(window.pgqCharts||{})['chart-completed']"))
    day = _drawn(browser, "chart-completed")
    assert len(day[0]) == 96 and sum(day[1]) == 6
    browser.set_window_size(420, 1000)
    browser.get(web.url + "/charts")
    wait_for(lambda: browser.execute_script("return !!(window.pgqCharts||{})['chart-completed']"))
    width = browser.execute_script("return window.pgqCharts['chart-completed'].width")
    assert width <= 420
    screenshot(browser, "charts-hour-420")


def test_the_overview_sparklines_draw_each_queues_minutes(
    browser: Any, dashboard: Callable[..., Dashboard], ledger: str
) -> None:
    _history(ledger, HISTORY)
    web = dashboard(YAML).wait_up()
    browser.set_window_size(1400, 1000)
    browser.get(web.url + "/")
    spark = browser.execute_script(
        "const a = document.querySelector('tr[data-queue=\"work\"] a.spark'); return a && a.id"
    )
    wait_for(lambda: browser.execute_script("return !!(window.pgqCharts||{})[arguments[0]]", spark))
    drawn = _drawn(browser, spark)
    assert _nonzero(drawn, 1) == _by_minute(ledger, PER_MINUTE.format(test="= 'completed'"), "work")
    assert _nonzero(drawn, 2) == _by_minute(ledger, PER_MINUTE.format(test="= 'discarded'"), "work")


PAGES = [
    "/",
    "/jobs",
    "/charts",
    "/charts?range=day",
    "/dead",
    "/workers",
    "/doctor",
    "/queues/work",
    "/schedules",
]


@pytest.mark.parametrize("filled", [True, False], ids=["data", "empty"])
def test_every_page_fits_at_two_widths(
    browser: Any, dashboard: Callable[..., Dashboard], ledger: str, filled: bool
) -> None:
    if filled:
        _history(ledger, HISTORY)
        _running(ledger, 1)
        with psycopg.connect(ledger, autocommit=True) as conn:
            for _ in range(3):
                enqueue(conn, "render", {"invoice": 7}, queue="work")
    web = dashboard(YAML).wait_up()
    for width in (1400, 420):
        browser.set_window_size(width, 1000)
        for page in PAGES:
            browser.get(web.url + page)
            assert "Internal Server Error" not in browser.page_source, page
            # Nothing wider than the window: wide tables scroll inside themselves.
            overflow = browser.execute_script(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, (page, width, overflow)
            name = page.strip("/").replace("/", "-").replace("?range=", "-") or "overview"
            screenshot(browser, f"{name}-{'data' if filled else 'empty'}-{width}")
