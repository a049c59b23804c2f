"""The redaction scan (issue 30): a real supervisor runs jobs whose arguments hold a recognisable
secret under `web.redact` keys into every state they can reach (waiting, scheduled, retried with
an error quoting the secret, discarded, completed with a result echoing it, unknown with a
failing reconcile hook); then every dashboard page, every command-line verb that shows jobs
(text and --json) and the supervisor's log are searched for the secret. A search that names a
redacted key is refused: 400 on the web, exit 2 on the command line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from supervisor import enqueue
from supervisor.config import load_config
from supervisor.web import create_app
from supervisor.web.security import Credentials
from tests.commands import run_cli
from tests.lifecycle.harness import Supervisor, query, wait_for

pytestmark = pytest.mark.slow

NUMBER = "4929-7766-1234-5678"
PIN = "Q7Z9-PIN"
SECRETS = (NUMBER, PIN)

CONFIG = """
handlers:
  charge: tests.redaction_handlers:declined
  refund: tests.redaction_handlers:refunded
  pay: tests.redaction_handlers:stuck
pools:
  main: {processes: 1, queues: {default: 1}}
jobs:
  charge: {max_attempts: 2, backoff: {base: 100ms, cap: 200ms}}
  pay:
    effects: external
    timeout: 1s
    reconcile: tests.redaction_handlers:ask_bank
reconcile: {interval: 200ms, timeout: 10s}
history: {enabled: true}
web: {redact: [number, pin]}
"""


def _args(order: int) -> dict[str, Any]:
    return {"order": order, "card": {"number": NUMBER, "holder": "Ann"}, "pin": PIN}


def _states(dsn: str) -> dict[int, str]:
    return dict(query(dsn, "SELECT id, state FROM pgq.jobs"))  # type: ignore[arg-type]


def _pages(dsn: str, config: Any, ids: list[int], dead: int) -> dict[str, httpx.Response]:
    paths = ["/", "/jobs", "/dead", "/history", "/workers", "/doctor", "/queues/default"]
    for state in ("available", "scheduled", "running", "discarded", "unknown", "cancelled"):
        paths += [f"/jobs?state={state}", f"/queues/default?state={state}"]
    for job_id in ids:
        paths += [f"/jobs/{job_id}", f"/jobs/{job_id}/cancel", f"/jobs/{job_id}/run-now"]
        paths += [f"/jobs/{job_id}/resolve?as=retry", f"/jobs/{job_id}/replay"]
    paths += ["/jobs?kind=charge", '/jobs?args={"order": 1}']
    paths += ["/jobs/bulk?action=cancel", "/jobs/bulk?action=replay", "/jobs/bulk?action=run-now"]
    paths += [f"/jobs/selected?action=replay&ids={dead}"]

    async def run() -> dict[str, httpx.Response]:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), web=config.web)
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:9188"
            ) as client:
                return {path: await client.get(path) for path in paths}

    return asyncio.run(run())


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


def test_no_surface_shows_a_redacted_value(supervisor: Callable[..., Supervisor]) -> None:
    sup = supervisor(CONFIG).start()
    dsn = sup.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        later = enqueue(conn, "charge", _args(1), delay=3600)
        failing = enqueue(conn, "charge", _args(2))
        done = enqueue(conn, "refund", _args(3))
        paid = enqueue(conn, "pay", _args(4))
    wait_for(lambda: _states(dsn).get(failing) == "discarded", 60, what="the charge discarded")
    wait_for(lambda: done not in _states(dsn), 60, what="the refund completed")
    wait_for(lambda: _states(dsn).get(paid) == "unknown", 60, what="the payment unknown")
    sup.wait_log("reconcile hook of job", timeout=60)
    with psycopg.connect(dsn, autocommit=True) as conn:
        waiting = enqueue(conn, "charge", _args(5), queue="elsewhere")
    ids = [later, failing, done, paid, waiting]
    # The secrets are where the scan must not find them: in the table's arguments and, written
    # by the handler and the hook, in their own words.
    stored = json.dumps(query(dsn, "SELECT args FROM pgq.jobs"))
    assert NUMBER in stored and PIN in stored

    config = load_config(sup.config, env=sup.env)
    leaked: dict[str, list[str]] = {}
    for path, response in _pages(dsn, config, ids, failing).items():
        assert response.status_code < 500, (path, response.text[-500:])
        if _leaks(response.text):
            leaked[f"GET {path}"] = _leaks(response.text)

    verbs: list[list[str]] = [["status"], ["status", "--json"], ["dlq", "list"]]
    verbs += [["dlq", "list", "--json"], ["dlq", "show", str(failing)]]
    verbs += [["dlq", "show", str(failing), "--json"], ["schedules"], ["doctor", "--json"]]
    verbs += [["jobs", "list"], ["jobs", "list", "--json"], ["jobs", "list", "--state", "unknown"]]
    for job_id in ids:
        verbs += [["jobs", "show", str(job_id)], ["jobs", "show", str(job_id), "--json"]]
    for argv in verbs:
        ran = run_cli(sup.config, *argv, env=sup.env)
        if _leaks(ran.stdout + ran.stderr):
            leaked[" ".join(argv)] = _leaks(ran.stdout + ran.stderr)

    sup.stop()
    if _leaks(sup.log()):
        leaked["the supervisor's log"] = _leaks(sup.log())
    assert leaked == {}


def test_a_search_naming_a_redacted_key_is_refused(supervisor: Callable[..., Supervisor]) -> None:
    sup = supervisor(CONFIG)
    with psycopg.connect(sup.dsn, autocommit=True) as conn:
        enqueue(conn, "charge", _args(1), delay=3600)
    config = load_config(sup.config, env=sup.env)
    # The right guess and a wrong one: both refused alike (the page echoes the request's own
    # address, the guess, in its links; it says nothing of what is stored).
    guesses = [
        '/jobs?args={"pin": "Q7Z9-PIN"}',
        '/jobs?args={"pin": "0000"}',
        '/jobs?args={"card": {"number": "4929-7766-1234-5678"}}',
        '/jobs?args={"PIN": "0000"}',
        '/jobs/bulk?action=cancel&args={"pin": "Q7Z9-PIN"}',
    ]

    async def run() -> list[httpx.Response]:
        async with AsyncConnectionPool(sup.dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=Credentials(), web=config.web)
            transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:9188"
            ) as client:
                return [await client.get(path) for path in guesses]

    for path, response in zip(guesses, asyncio.run(run()), strict=True):
        assert response.status_code == 400, path
        assert "web.redact" in response.text
    allowed = run_cli(sup.config, "jobs", "list", "--args", '{"order": 1}', env=sup.env)
    assert allowed.returncode == 0 and "charge" in allowed.stdout
    refused = run_cli(sup.config, "jobs", "list", "--args", '{"pin": "Q7Z9-PIN"}', env=sup.env)
    assert refused.returncode == 2
    assert "'pin'" in refused.stderr and "web.redact" in refused.stderr
    assert refused.stdout == ""
