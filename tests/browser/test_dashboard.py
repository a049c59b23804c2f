"""The dashboard in a real browser, beside a real supervisor running real jobs."""

from __future__ import annotations

import base64
import textwrap
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from tests.browser.conftest import Dashboard, http_status, screenshot
from tests.commands import run_cli
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

pytestmark = pytest.mark.usefixtures("browser")

YAML = """
    handlers:
      sleep: tests.handlers:sleep
      fail_first: tests.handlers:fail_first_run
    pools:
      main:
        processes: 1
        poll_interval: 200ms
        queues: {work: 3, mail: 1}
    jobs:
      fail_first: {max_attempts: 1}
    history: {enabled: true}
"""

SCHEDULE = """
    schedules:
      nightly: {every: 1h, kind: sleep, queue: mail}
"""


def enqueue(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn) as conn, conn.transaction():
        return enqueue_many(conn, jobs)


def text_of(browser: Any, css: str) -> str:
    """The text of the first element matching ``css``, read in one step in the page: a live
    refresh may replace the element between a find and a read."""
    script = "const e = document.querySelector(arguments[0]); return e ? e.textContent : '';"
    return " ".join(str(browser.execute_script(script, css)).split())


def count_of(browser: Any, css: str) -> int:
    return int(browser.execute_script("return document.querySelectorAll(arguments[0]).length", css))


def figure(browser: Any, queue: str, name: str) -> str:
    return text_of(browser, f'tr[data-queue="{queue}"] td[data-figure="{name}"]')


def showing(browser: Any, expected: dict[tuple[str, str], str]) -> Callable[[], bool]:
    return lambda: all(figure(browser, q, f) == v for (q, f), v in expected.items())


def test_overview_shows_queues_and_counts_and_refreshes_live(
    browser: Any,
    dashboard: Callable[..., Dashboard],
    supervisor: Callable[..., Supervisor],
    ledger: str,
) -> None:

    sup = supervisor(YAML).start()
    sup.wait_children(1)
    # Some history for the chart: quick jobs done, and dead letters.
    enqueue(ledger, [NewJob("sleep", {}, queue=q) for q in ("work", "mail") * 10])
    enqueue(ledger, [NewJob("fail_first", {}, queue="work", max_attempts=1) for _ in range(2)])
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state <> 'discarded'") == 0,
        30,
        what=f"the quick jobs\n{sup.log()}",
    )
    # One long job keeps the only child busy; the rest wait: 3 due and 2 for later in work,
    # 1 due in mail, and one in a queue no pool serves.
    (running,) = enqueue(ledger, [NewJob("sleep", {"seconds": 60}, queue="work", priority=9)])
    wait_for(
        lambda: scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (running,)) == "running",
        what="the long job to start",
    )
    enqueue(
        ledger,
        [NewJob("sleep", {}, queue="work") for _ in range(3)]
        + [NewJob("sleep", {}, queue="work", delay=3600) for _ in range(2)]
        + [NewJob("sleep", {}, queue="mail"), NewJob("sleep", {}, queue="orphans")],
    )
    # The dashboard's own copy of the YAML also names a schedule (the supervisor's does not, so
    # no tick is enqueued into the counts below).
    web = dashboard(YAML + SCHEDULE).wait_up()
    browser.get(web.url + "/")
    expected = {
        ("work", "due"): "3",
        ("work", "scheduled"): "2",
        ("work", "running"): "1",
        ("mail", "due"): "1",
        ("orphans", "due"): "1",
        ("work", "dead"): "2",
        ("work", "completed"): "10",
        ("work", "failed"): "2",
    }
    wait_for(showing(browser, expected), 20, what=f"the overview's counts\n{browser.page_source}")
    attention = text_of(browser, "#attention")
    assert "queue orphans: 1 job is waiting, but no pool" in attention
    assert "75%" in text_of(browser, "#pools")
    nightly = text_of(browser, 'tr[data-schedule="nightly"]')
    assert "every 1h" in nightly and "never" in nightly
    screenshot(browser, "overview")

    # Live: new jobs show up without a reload (a reload would forget the marker).
    browser.execute_script("window.pgqMarker = 'still here'")
    enqueue(ledger, [NewJob("sleep", {}, queue="work") for _ in range(4)])
    wait_for(showing(browser, {("work", "due"): "7"}), 20, what="the live refresh")
    assert browser.execute_script("return window.pgqMarker") == "still here"

    browser.get(web.url + "/queues/work")
    assert count_of(browser, "#jobs tr[data-job]") == 7
    screenshot(browser, "queue")
    browser.get(web.url + "/queues/work?state=scheduled")
    assert count_of(browser, "#jobs tr[data-job]") == 2

    # The registry is written at the supervisor's heartbeat (every 5 s).
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.workers WHERE job_id = %s", (running,)),
        20,
        what="the supervisor's heartbeat",
    )
    browser.get(web.url + "/workers")
    worker = text_of(browser, "#supervisors tr[data-worker]")
    assert str(running) in worker and "sleep" in worker
    assert text_of(browser, '#supervisors td[data-figure="rss"]').endswith(" MiB")
    screenshot(browser, "workers")

    browser.get(web.url + f"/jobs/{running}")
    facts = text_of(browser, "dl.facts")
    assert "pool main slot 1" in facts
    screenshot(browser, "job-running")


def test_a_dead_letter_is_shown_replayed_with_one_click_and_runs(
    browser: Any,
    dashboard: Callable[..., Dashboard],
    supervisor: Callable[..., Supervisor],
    ledger: str,
) -> None:
    from selenium.webdriver.common.by import By

    sup = supervisor(YAML).start()
    ids = enqueue(
        ledger,
        [NewJob("fail_first", {"invoice": n}, queue="work", max_attempts=1) for n in range(3)],
    )
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded'") == 3,
        30,
        what=f"three dead letters\n{sup.log()}",
    )
    web = dashboard(YAML).wait_up()
    browser.get(web.url + "/dead")
    assert count_of(browser, "#dead tr[data-job]") == 3
    screenshot(browser, "dead-letters")

    job = ids[0]
    browser.get(web.url + f"/jobs/{job}")
    assert text_of(browser, "#state") == "discarded"
    assert f"planned failure: the first run of job {job}" in text_of(browser, "#error")
    assert '"invoice": 0' in text_of(browser, "#args")
    screenshot(browser, "job-dead")

    browser.find_element(By.ID, "replay").click()
    assert "Put dead letter" in browser.page_source
    screenshot(browser, "confirm")
    browser.find_element(By.ID, "confirm").click()
    flash = wait_for(lambda: text_of(browser, "#flash"), 10, what="the message")
    assert f"replayed 1 dead letter ({job}) into work" in flash
    # It runs again, succeeds this time, and is gone; the other two stay dead.
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = %s", (job,)) == 0,
        30,
        what=f"the replayed job to run\n{sup.log()}",
    )
    runs = query(ledger, "SELECT attempt FROM test_ledger WHERE job_id = %s ORDER BY at", (job,))
    assert runs == [(1,), (1,)]
    assert scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded'") == 2
    browser.get(web.url + f"/jobs/{job}")
    assert "not in pgq.jobs" in text_of(browser, "#message")

    # Purge, narrowed to the queue: the other two go for good.
    browser.get(web.url + "/dead?queue=work&older_than=0s")
    assert confirm(browser, "purge") == "purged 2 dead letters in queue work older than 0.0s"
    assert scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE state = 'discarded'") == 0


def test_a_post_without_the_forgery_token_is_refused(
    dashboard: Callable[..., Dashboard], supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (job,) = enqueue(ledger, [NewJob("fail_first", {}, queue="nowhere", max_attempts=1)])
    with psycopg.connect(ledger, autocommit=True) as conn:
        conn.execute(
            "UPDATE pgq.jobs SET state = 'discarded', finished_at = now(), last_error = 'x'"
        )
    web = dashboard(YAML).wait_up()
    url = f"{web.url}/jobs/{job}/replay"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    token = "t" * 43
    # No token at all; a token in the form that is not the cookie's; the right pair from another
    # site: all refused, and the dead letter stays dead.
    assert http_status(url, form, b"") == 403
    assert http_status(url, {**form, "Cookie": f"pgq_csrf={token}"}, b"csrf=" + b"u" * 43) == 403
    foreign = {**form, "Cookie": f"pgq_csrf={token}", "Origin": "http://evil.example"}
    assert http_status(url, foreign, f"csrf={token}".encode()) == 403
    assert scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (job,)) == "discarded"
    # The same POST with the token it was given works (so the refusals above were the token's).
    assert (
        http_status(url, {**form, "Cookie": f"pgq_csrf={token}"}, f"csrf={token}".encode()) == 200
    )
    assert scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (job,)) == "available"


def test_with_authentication_set_a_request_without_it_gets_401(
    dashboard: Callable[..., Dashboard], ledger: str, tmp_path: Any
) -> None:
    env = {"PGQ_WEB_USER": "ops", "PGQ_WEB_PASSWORD": "s3cret pass", "PGQ_WEB_TOKEN": "tok-123"}
    web = dashboard(YAML, extra_env=env).wait_up()

    def basic(user: str, password: str) -> dict[str, str]:
        return {
            "Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        }

    assert http_status(web.url + "/") == 401
    assert http_status(web.url + "/jobs/1") == 401
    assert http_status(web.url + "/", basic("ops", "wrong")) == 401
    assert http_status(web.url + "/", {"Authorization": "Bearer nope"}) == 401
    assert http_status(web.url + "/", basic("ops", "s3cret pass")) == 200
    assert http_status(web.url + "/", {"Authorization": "Bearer tok-123"}) == 200


def test_a_non_local_address_is_refused_without_authentication(tmp_path: Any, ledger: str) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(textwrap.dedent(YAML))
    env = {"PATH": "/usr/bin:/bin", "PGQ_DSN": ledger}
    done = run_cli(config, "web", "--host", "0.0.0.0", "--port", "1", env=env)
    assert done.returncode == 2
    assert "refusing to serve the dashboard on 0.0.0.0 without authentication" in done.stderr


def confirm(browser: Any, button_id: str) -> str:
    """Clicks an action's button, then the confirmation's; returns the message shown after."""
    from selenium.webdriver.common.by import By

    browser.find_element(By.ID, button_id).click()
    browser.find_element(By.ID, "confirm").click()
    return wait_for(lambda: text_of(browser, "#flash"), 10, what="the message")


def test_a_paused_queue_shows_as_paused_and_resumes(
    browser: Any,
    dashboard: Callable[..., Dashboard],
    supervisor: Callable[..., Supervisor],
    ledger: str,
) -> None:

    sup = supervisor(YAML).start()
    sup.wait_children(1)
    web = dashboard(YAML).wait_up()
    browser.get(web.url + "/queues/work")
    assert confirm(browser, "pause") == (
        "paused queue work: no host claims from it until it is resumed"
    )
    assert text_of(browser, "#paused") == "paused"
    held = enqueue(ledger, [NewJob("sleep", {}, queue="work") for _ in range(3)])
    # The same child serves mail: once a mail job enqueued after them has run, the child has
    # claimed since the work jobs were due, and left them alone.
    (probe,) = enqueue(ledger, [NewJob("sleep", {}, queue="mail")])
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = %s", (probe,)) == 0,
        20,
        what=f"the mail job\n{sup.log()}",
    )
    states = query(ledger, "SELECT state FROM pgq.jobs WHERE id = ANY(%s)", (held,))
    assert states == [("available",)] * 3
    browser.get(web.url + "/")
    wait_for(showing(browser, {("work", "due"): "3", ("work", "notes"): "paused"}), 20)
    assert "queue work is paused" in text_of(browser, "#attention")
    screenshot(browser, "overview-paused")

    browser.get(web.url + "/queues/work")
    assert confirm(browser, "resume") == "resumed queue work: its workers were woken"
    assert count_of(browser, "#paused") == 0
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = ANY(%s)", (held,)) == 0,
        20,
        what=f"the resumed jobs to run\n{sup.log()}",
    )


def test_cancel_and_run_now_from_a_job_page(
    browser: Any,
    dashboard: Callable[..., Dashboard],
    supervisor: Callable[..., Supervisor],
    ledger: str,
) -> None:

    sup = supervisor(YAML).start()
    later, running = enqueue(
        ledger,
        [
            NewJob("sleep", {"seconds": 2}, queue="work", delay=3600),
            NewJob("sleep", {"seconds": 120}, queue="work"),
        ],
    )
    wait_for(
        lambda: scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (running,)) == "running",
        20,
        what=f"the long job to start\n{sup.log()}",
    )
    web = dashboard(YAML).wait_up()

    # A running job: its supervisor stops it, and it ends cancelled.
    browser.get(web.url + f"/jobs/{running}")
    assert "asked the supervisor running job" in confirm(browser, "cancel")
    wait_for(
        lambda: (
            scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (running,)) == "cancelled"
        ),
        20,
        what=f"the running job to end cancelled\n{sup.log()}",
    )
    browser.refresh()
    assert text_of(browser, "#state") == "cancelled"

    # A job scheduled for an hour from now runs now.
    browser.get(web.url + f"/jobs/{later}")
    assert text_of(browser, "#state") == "scheduled"
    assert confirm(browser, "run-now").startswith(f"job {later} is due now in queue work")
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs WHERE id = %s", (later,)) == 0,
        20,
        what=f"the job to run\n{sup.log()}",
    )
    # The page, left open while the job ran for 2 s and completed, says by itself that it is
    # gone (a refresh answered 404 replaces the figures; one answered 5xx would keep them).
    wait_for(
        lambda: "not in pgq.jobs" in text_of(browser, "#message"),
        10,
        what="the open page to see the job gone",
    )


def test_a_job_page_shows_every_error_and_a_completed_job_its_history(
    browser: Any,
    dashboard: Callable[..., Dashboard],
    supervisor: Callable[..., Supervisor],
    ledger: str,
) -> None:
    yaml_text = YAML.replace(
        "fail_first: tests.handlers:fail_first_run",
        "fail_first: tests.handlers:fail_first_run\n      fail: tests.handlers:fail",
    ).replace(
        "fail_first: {max_attempts: 1}",
        "fail_first: {max_attempts: 1}\n      fail: {backoff: {base: 100ms, cap: 100ms}}",
    )
    sup = supervisor(yaml_text).start()
    # Each fails its first two attempts: one has no third and dies, the other completes on it.
    dead, done = enqueue(
        ledger,
        [
            NewJob("fail", {"times": 2}, queue="work", max_attempts=2),
            NewJob("fail", {"times": 2}, queue="work", max_attempts=3),
        ],
    )
    wait_for(
        lambda: query(ledger, "SELECT id, state FROM pgq.jobs") == [(dead, "discarded")],
        30,
        what=f"one dead letter, one completed job\n{sup.log()}",
    )
    web = dashboard(yaml_text).wait_up()

    browser.get(web.url + f"/jobs/{dead}")
    assert text_of(browser, "#state") == "discarded"
    assert count_of(browser, "#errors li") == 2
    errors = text_of(browser, "#errors")
    # Newest first, each with its attempt.
    assert errors.index("attempt 2") < errors.index("planned failure 1 of 2")
    assert "planned failure 2 of 2" in errors and "no attempts left" in errors
    screenshot(browser, "job-errors")

    browser.get(web.url + f"/jobs/{done}")
    assert text_of(browser, "#state") == "completed"
    assert "not in pgq.jobs" in text_of(browser, "#message")
    assert text_of(browser, "#attempts") == "3"
    assert count_of(browser, '#history tr[data-outcome="completed"]') == 1
    assert count_of(browser, "#errors li") == 2
    errors = text_of(browser, "#errors")
    assert "planned failure 1 of 2" in errors and "planned failure 2 of 2" in errors
    screenshot(browser, "job-completed")
