"""A workflow's page in a real browser beside a real supervisor (issue 32): the SVG graph shows
each step in its state as it runs, and a box leads to its job's page."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, Workflow, enqueue_workflow
from tests.browser.conftest import Dashboard, screenshot
from tests.lifecycle.harness import Supervisor, scalar, wait_for

pytestmark = pytest.mark.usefixtures("browser")

YAML = """
    handlers:
      render_page: tests.handlers:sleep
      zip_pages: tests.handlers:sleep
      mail_zip: tests.handlers:sleep
      fail_first: tests.handlers:fail_first_run
    pools:
      main:
        processes: 1
        poll_interval: 200ms
        queues: {invoices: 1}
    jobs:
      fail_first: {max_attempts: 1}
"""


def states(browser: Any) -> dict[str, str]:
    script = (
        "return Array.from(document.querySelectorAll('#workflow-graph a.step'))"
        ".map(a => [a.dataset.job, a.dataset.state]);"
    )
    return dict(browser.execute_script(script))


def test_the_graph_shows_each_step_in_its_state_and_links_to_its_job(
    browser: Any,
    dashboard: Callable[..., Dashboard],
    supervisor: Callable[..., Supervisor],
    ledger: str,
) -> None:
    from selenium.webdriver.common.by import By

    wf = Workflow("invoice 2024-0042")
    pages = [wf.add(NewJob("render_page", queue="invoices")) for _ in range(6)]
    dud = wf.add(NewJob("fail_first", queue="invoices", max_attempts=1))
    wf.add(NewJob("mail_zip", queue="invoices"), after=[dud])
    archive = wf.add(NewJob("zip_pages", {"seconds": 60}, queue="invoices"), after=pages)
    mail = wf.add(NewJob("mail_zip", queue="invoices"), after=[archive])
    wf.add(NewJob("mail_zip", {}, queue="invoices"), after=[mail, dud], on_parent_failure="run")
    with psycopg.connect(ledger) as conn, conn.transaction():
        handle = enqueue_workflow(conn, wf)
    zip_id = handle.job_ids[8]
    sup = supervisor(YAML).start()
    wait_for(
        lambda: scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (zip_id,)) == "running",
        60,
        what=f"the zip step to start\n{sup.log()}",
    )
    web = dashboard(YAML).wait_up()
    browser.get(f"{web.url}/workflows/{handle.id}")
    wait_for(lambda: states(browser).get(str(zip_id)) == "running", 20, what="the graph")
    shown = states(browser)
    assert len(shown) == len(handle.job_ids)
    assert [shown[str(i)] for i in handle.job_ids[:6]] == ["completed"] * 6
    assert shown[str(handle.job_ids[6])] == "discarded"
    assert shown[str(handle.job_ids[7])] == "cancelled"
    assert shown[str(handle.job_ids[9])] == "waiting"
    assert shown[str(handle.job_ids[10])] == "waiting"
    screenshot(browser, "workflow")
    browser.find_element(By.CSS_SELECTOR, f'#workflow-graph a[data-job="{zip_id}"]').click()
    wait_for(lambda: browser.current_url.endswith(f"/jobs/{zip_id}"), 20, what="the job page")
    assert "zip_pages" in browser.find_element(By.TAG_NAME, "h1").text + browser.page_source
