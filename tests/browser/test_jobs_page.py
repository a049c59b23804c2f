"""/jobs in a real browser on 100,000 jobs: a search by arguments across queues and states, an
action on ticked jobs, and an action on everything a filter matches (its dry run, then its
slices with their progress, driven by the page itself). The page's time is measured by
scripts/benchmarks/web_jobs_bench.py; here, what the operator sees and what the database holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.browser.conftest import Dashboard, screenshot
from tests.browser.test_dashboard import count_of, text_of
from tests.lifecycle.harness import scalar, wait_for

pytestmark = pytest.mark.usefixtures("browser")

YAML = """
    handlers:
      invoice: tests.handlers:noop
    pools:
      main:
        processes: 1
        queues: {billing: 1}
    history: {enabled: true}
"""

JOBS = 100_000
# 100,000 jobs over 10 queues and 7 kinds, a twentieth scheduled and a fiftieth dead, each with
# its own arguments: {"invoice_id": i, "customer": {"id": i % 1000}}.
LOAD = """
INSERT INTO pgq.jobs (queue, kind, args, state, run_at, attempts, last_error, finished_at)
SELECT 'queue_' || (i %% 10), 'kind_' || (i %% 7),
       jsonb_build_object('invoice_id', i, 'customer', jsonb_build_object('id', i %% 1000)),
       s.state,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 day' ELSE now() END,
       CASE WHEN s.state = 'discarded' THEN 3 ELSE 0 END,
       CASE WHEN s.state = 'discarded'
            THEN 'Traceback (most recent call last):' || chr(10) || '  ...' || chr(10)
                 || 'RuntimeError: the payment provider answered 502 ' || repeat('and more ', 30)
       END,
       CASE WHEN s.state = 'discarded' THEN now() END
FROM generate_series(1, %(jobs)s) AS i
CROSS JOIN LATERAL (
    SELECT CASE WHEN i %% 20 = 1 THEN 'scheduled' WHEN i %% 50 = 2 THEN 'discarded'
                ELSE 'available' END AS state
) AS s
"""


def _load(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LOAD, {"jobs": JOBS})
        conn.execute("VACUUM ANALYZE pgq.jobs")


def test_search_and_act_on_100000_jobs(
    browser: Any, dashboard: Callable[..., Dashboard], ledger: str
) -> None:
    from selenium.webdriver.common.by import By

    _load(ledger)
    web = dashboard(YAML).wait_up()

    browser.get(web.url + "/jobs")
    assert count_of(browser, "#found tr[data-job]") == 50
    screenshot(browser, "jobs")

    # Arguments by containment, across every queue and state: customer 7 is 100 jobs.
    browser.find_element(By.ID, "f-args").send_keys('{"customer": {"id": 7}}')
    browser.find_element(By.ID, "search").click()
    # The page before the search had 50 rows too: wait for the search's own page, or its
    # navigation could land after the next get() and replace that page.
    wait_for(
        lambda: "args=" in browser.current_url and count_of(browser, "#found tr[data-job]") == 50,
        10,
        what="the search",
    )
    assert "Older →" in text_of(browser, ".pager")
    # A dead one among them shows its whole error line, wrapped.
    browser.get(web.url + '/jobs?state=discarded&args={"customer": {"id": 2}}')
    rows = count_of(browser, "#found tr[data-job]")
    assert rows == min(
        50,
        scalar(
            ledger,
            "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded'"
            """ AND args @> '{"customer": {"id": 2}}'""",
        ),
    )
    assert "and more and more" in text_of(browser, "#found td.error-line")
    screenshot(browser, "jobs-search")

    # Tick two scheduled jobs and run them now.
    browser.get(web.url + '/jobs?state=scheduled&args={"customer": {"id": 21}}')
    boxes = browser.find_elements(By.CSS_SELECTOR, '#found input[name="ids"]')
    chosen = [int(b.get_attribute("value")) for b in boxes[:2]]
    for box in boxes[:2]:
        box.click()
    # Ticked jobs stay ticked: the page's refresh waits while any is (a refresh would untick).
    refreshed = browser.execute_script(
        "return document.querySelector('#live').getAttribute('hx-trigger')"
    )
    assert "input:checked" in refreshed
    browser.find_element(By.ID, "selected-run-now").click()
    wait_for(lambda: "Run now 2 jobs" in text_of(browser, "h1"), 10, what="the confirmation")
    assert text_of(browser, "#keep") == "Go back"
    browser.find_element(By.ID, "confirm").click()
    flash = wait_for(lambda: text_of(browser, "#flash"), 10, what="the message")
    assert "made due now 2 of 2 jobs" in flash
    due = scalar(
        ledger,
        "SELECT count(*) FROM pgq.jobs WHERE id = ANY(%s) AND state = 'available'",
        (chosen,),
    )
    assert due == 2

    # Everything a filter matches: queue_1's scheduled jobs, counted first, then cancelled in
    # slices of 500 while the page shows its progress.
    expected = scalar(
        ledger, "SELECT count(*) FROM pgq.jobs WHERE queue = 'queue_1' AND state = 'scheduled'"
    )
    browser.get(web.url + "/jobs?queue=queue_1&state=scheduled")
    browser.find_element(By.ID, "bulk-cancel").click()
    assert text_of(browser, "#count").startswith(f"{expected:,} jobs match")
    screenshot(browser, "jobs-dry-run")
    browser.find_element(By.ID, "confirm").click()
    wait_for(
        lambda: (
            browser.execute_script(
                "const p = document.querySelector('#progress'); return p && p.dataset.finished"
            )
            == "yes"
        ),
        60,
        what="the bulk cancel to finish",
    )
    assert text_of(browser, "#progress").startswith(f"Done: {expected:,} cancelled or stopping")
    screenshot(browser, "jobs-bulk-done")
    left = scalar(
        ledger, "SELECT count(*) FROM pgq.jobs WHERE queue = 'queue_1' AND state = 'scheduled'"
    )
    assert left == 0
    assert scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'cancelled'") == expected

    browser.get(web.url + "/history")  # the old page: the day's charts now
    wait_for(lambda: browser.execute_script("return !!(window.pgqCharts||{})['chart-completed']"))
    assert count_of(browser, "#chart-completed canvas") == 1
