"""Encrypted arguments against real PostgreSQL (issue 30 item 3): `keys rotate` in slices,
killed mid-way and run again; supervisor.testing.drain, a reconcile hook and a replayed job
seeing plaintext; `keys status`."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from supervisor import NewJob, Secret, claim, enqueue, enqueue_batch, enqueue_many
from supervisor.queue import keyring as keys
from supervisor.queue import secrets as envelope
from supervisor.queue.keyring import new_key
from supervisor.queue.maintenance import requeue_worker
from supervisor.services.reconciler import run_round
from supervisor.testing import drain
from tests.commands import ROOT, run_cli

CONFIG = """
handlers: {charge: "tests.secret_handlers:see"}
pools: {main: {queues: {default: 1}}}
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "pgq.yaml"
    path.write_text(CONFIG)
    return path


def _by_key(conn: psycopg.Connection[Any]) -> dict[str, int]:
    rows = conn.execute(
        "SELECT e #>> '{}', count(*) FROM pgq.jobs, jsonb_path_query(args, "
        """'strict $.** ? (exists(@."$pgq_secret"))."$pgq_secret".key') AS e GROUP BY 1"""
    ).fetchall()
    return dict(rows)


def test_rotate_killed_mid_way_resumes_and_a_second_run_changes_nothing(
    conn: psycopg.Connection[Any], config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old, new = f"k1:{new_key()}", f"k2:{new_key()}"
    monkeypatch.setenv("PGQ_KEYS", old)
    jobs = [
        NewJob("charge", {"card": Secret(f"card-{i}"), "more": [Secret(i)], "n": i})
        for i in range(600)
    ]
    ids = enqueue_many(conn, jobs)
    enqueue_batch(conn, [NewJob("charge", {})], then=NewJob("charge", {"t": Secret("then")}))
    assert _by_key(conn) == {"k1": 1200}
    env = {**os.environ, "PGQ_DSN": conn.info.dsn, "PGQ_KEYS": f"{new},{old}"}
    argv = [sys.executable, "-m", "supervisor.cli", "-c", str(config), "keys", "rotate"]
    proc = subprocess.Popen([*argv, "--slice", "10", "--pause", "0.05"], cwd=ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while _by_key(conn).get("k2", 0) < 100:
            assert proc.poll() is None, "the rotation ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    mid = _by_key(conn)
    assert mid["k1"] > 0 and mid["k2"] > 0, mid
    # Each row is all one key or all the other: a slice commits whole or not at all.
    mixed = conn.execute(
        """SELECT count(*) FROM pgq.jobs WHERE jsonb_path_exists(args,
           'strict $.** ? (@."$pgq_secret".key == "k1")') AND jsonb_path_exists(args,
           'strict $.** ? (@."$pgq_secret".key == "k2")')"""
    ).fetchone()[0]
    assert mixed == 0
    done = run_cli(config, "keys", "rotate", "--json", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["envelopes"] == mid["k1"] + 1  # the jobs left, and the batch's then job
    assert _by_key(conn) == {"k2": 1200}
    again = json.loads(run_cli(config, "keys", "rotate", "--json", env=env).stdout)
    assert again["envelopes"] == 0 and again["rows"] == 0, "a second run changes nothing"
    status = json.loads(run_cli(config, "keys", "status", "--json", env=env).stdout)
    assert status == {"current": "k2", "envelopes": {"k2": 1201}, "missing": []}
    # The old key can go: everything opens with the new one alone, to the same values.
    ring = keys.from_text(new)
    rows = conn.execute("SELECT id, kind, args FROM pgq.jobs WHERE id = ANY(%s)", (ids,))
    for _, kind, args in rows:
        n = args["n"]
        assert envelope.open_args(args, kind, ring) == {"card": f"card-{n}", "more": [n], "n": n}
    for text in (done.stdout, done.stderr, status):
        assert new.split(":")[1] not in str(text) and old.split(":")[1] not in str(text)


def test_drain_a_reconcile_hook_and_a_replay_see_plaintext(
    conn: psycopg.Connection[Any], config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k1, k9 = f"k1:{new_key()}", f"k9:{new_key()}"
    monkeypatch.setenv("PGQ_KEYS", k9)
    lost = enqueue(conn, "charge", {"card": Secret("4242")}, max_attempts=1)
    monkeypatch.setenv("PGQ_KEYS", k1)
    fine = enqueue(conn, "charge", {"card": Secret("5555")})
    seen: dict[int, Any] = {}

    def charge(*, job: Any, **args: Any) -> None:
        seen[job.id] = args

    report = drain(conn, {"charge": charge})
    assert seen == {fine: {"card": "5555"}}
    (failed,) = [o for j, o in report.runs if j.id == lost]
    assert "key 'k9'" in (failed.error or "")
    # The key is found again: replay the dead letter, and it runs with its plaintext.
    env = {**os.environ, "PGQ_DSN": conn.info.dsn, "PGQ_KEYS": f"{k1},{k9}"}
    replayed = run_cli(config, "dlq", "replay", "--id", str(lost), env=env)
    assert replayed.returncode == 0, replayed.stderr
    monkeypatch.setenv("PGQ_KEYS", f"{k1},{k9}")
    drain(conn, {"charge": charge})
    assert seen[lost] == {"card": "4242"}
    # A reconcile hook gets the plaintext too (forked rounds read PGQ_KEYS themselves).
    unknown = enqueue(conn, "charge", {"card": Secret("6011")})
    claim(conn, "default", worker="h:1:a", limit=1)
    requeue_worker(conn, "h:1:a", "killed", spent=None, external_kinds=["charge"])
    asked: list[Any] = []

    def hook(job: Any) -> str:
        asked.append(job.args)
        return "discarded"

    run_round(conn.info.dsn, {"charge": hook}, limit=5, hold=30, backoff=1, history=False)
    assert asked == [{"card": "6011"}]
    last_error = conn.execute(
        "SELECT last_error FROM pgq.jobs WHERE id = %s", (unknown,)
    ).fetchone()[0]
    assert "6011" not in (last_error or "")


def test_the_dashboard_shows_envelopes_by_key_and_refuses_a_search_naming_an_encrypted_field(
    conn: psycopg.Connection[Any], dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from supervisor.config import load_config
    from supervisor.web import create_app
    from supervisor.web.security import Credentials

    monkeypatch.setenv("PGQ_KEYS", f"k1:{new_key()}")
    path = tmp_path / "pgq.yaml"
    path.write_text(CONFIG + "jobs: {charge: {encrypt: [card]}}\n")
    config = load_config(path)
    job_id = enqueue(conn, "charge", {"card": Secret("4111-0000"), "order": 7})

    async def steps(client: Any) -> dict[str, Any]:
        return {
            "job": await client.get(f"/jobs/{job_id}"),
            "list": await client.get("/jobs"),
            "search": await client.get('/jobs?args={"card": "4111-0000"}'),
            "folded": await client.get('/jobs?args={"order": 7, "CARD": "x"}&kind=charge'),
            "fine": await client.get('/jobs?args={"order": 7}'),
            "dry": await client.get('/jobs/bulk?action=cancel&args={"card": "4111"}'),
        }

    async def run() -> dict[str, Any]:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, config=config, credentials=Credentials())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return await steps(c)

    pages = asyncio.run(run())
    for name in ("job", "list", "fine"):
        assert pages[name].status_code == 200, name
        assert "[encrypted: key k1]" in pages[name].text, name
        assert "$pgq_secret" not in pages[name].text and "4111" not in pages[name].text
    for name in ("search", "folded", "dry"):
        assert pages[name].status_code == 400, name
        # The message names the key and where it is declared, not the value searched for (the
        # header's links carry the operator's own query back, as on every page).
        message = pages[name].text.split("<main>")[1]
        assert "jobs.charge.encrypt" in message and "4111" not in message, message
