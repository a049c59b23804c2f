"""The dashboard's exposure through the real ASGI application on a real database: the Host
names it answers (DNS rebinding), the Origin it accepts, a trusted proxy's forwarded scheme and
host, read-only mode, the audit log of actions and redaction of arguments."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from supervisor import enqueue
from supervisor.config.model import WebConfig
from supervisor.web import create_app
from supervisor.web.security import Credentials

Steps = Callable[[httpx.AsyncClient], Awaitable[Any]]


def run_app(
    dsn: str,
    steps: Steps,
    *,
    web: WebConfig | None = None,
    credentials: Credentials | None = None,
    peer: str = "127.0.0.1",
    base_url: str = "http://127.0.0.1:9188",
) -> Any:
    async def run() -> Any:
        async with AsyncConnectionPool(dsn, min_size=1, kwargs={"autocommit": True}) as pool:
            app = create_app(pool=pool, credentials=credentials or Credentials(), web=web)
            transport = httpx.ASGITransport(app=app, client=(peer, 40000))
            async with httpx.AsyncClient(transport=transport, base_url=base_url) as client:
                return await steps(client)

    return asyncio.run(run())


def _card_job(conn: psycopg.Connection[Any]) -> int:
    return enqueue(conn, "charge", {"card_number": "4111 1111 1111 1111", "amount": 5})


def _state(conn: psycopg.Connection[Any], job_id: int) -> str:
    return str(conn.execute("SELECT state FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone()[0])


def test_a_rebound_name_gets_nothing_from_an_unauthenticated_dashboard(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    job_id = _card_job(conn)

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        # attacker.example now resolves to 127.0.0.1: the browser sends its own name.
        rebound = {"host": "attacker.example:9188"}
        page = await client.get(f"/jobs/{job_id}", headers=rebound)
        confirm = await client.get(f"/jobs/{job_id}/cancel", headers=rebound)
        token = client.cookies.get("pgq_csrf", "forged-but-matching-token-of-32-chars-or-more")
        client.cookies.set("pgq_csrf", token)
        cancel = await client.post(
            f"/jobs/{job_id}/cancel",
            data={"csrf": token},
            headers={**rebound, "origin": "http://attacker.example:9188"},
        )
        return [page, confirm, cancel]

    page, confirm, cancel = run_app(dsn, steps)
    assert [r.status_code for r in (page, confirm, cancel)] == [421, 421, 421]
    assert "4111" not in page.text and "attacker.example" in page.text
    assert _state(conn, job_id) == "available"


@pytest.mark.parametrize(
    "host", ["localhost:9188", "127.0.0.1:9188", "[::1]:9188", "LOCALHOST", "dash.internal:80"]
)
def test_loopback_names_and_the_allowed_ones_are_answered(
    conn: psycopg.Connection[Any], dsn: str, host: str
) -> None:
    job_id = _card_job(conn)

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.get(f"/jobs/{job_id}", headers={"host": host})

    allowed = WebConfig(allowed_hosts=("dash.internal",))
    assert run_app(dsn, steps, web=allowed).status_code == 200
    if host.startswith("dash."):  # not allowed unless named
        assert run_app(dsn, steps).status_code == 421


def test_an_authenticated_dashboard_answers_any_name_unless_names_are_allowed(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    secret = Credentials(token="s3cret-token")

    async def steps(client: httpx.AsyncClient) -> int:
        response = await client.get(
            "/", headers={"host": "dash.example.com", "authorization": "Bearer s3cret-token"}
        )
        return response.status_code

    assert run_app(dsn, steps, credentials=secret) == 200
    narrowed = WebConfig(allowed_hosts=("other.example.com",))
    assert run_app(dsn, steps, credentials=secret, web=narrowed) == 421


def _cancel(host: str, origin: str, extra: dict[str, str] | None = None) -> Callable[..., Any]:
    def make(job_id: int) -> Steps:
        async def steps(client: httpx.AsyncClient) -> httpx.Response:
            headers = {"host": host, **(extra or {})}
            await client.get(f"/jobs/{job_id}/cancel", headers=headers)
            return await client.post(
                f"/jobs/{job_id}/cancel",
                data={"csrf": client.cookies["pgq_csrf"]},
                headers={**headers, "origin": origin},
            )

        return steps

    return make


def test_the_origin_must_be_the_dashboard_itself(conn: psycopg.Connection[Any], dsn: str) -> None:
    for origin in ("http://attacker.example", "https://127.0.0.1:9188", "http://127.0.0.1:9"):
        job_id = _card_job(conn)
        refused = run_app(dsn, _cancel("127.0.0.1:9188", origin)(job_id))
        assert refused.status_code == 403 and "another site" in refused.text, origin
        assert _state(conn, job_id) == "available"
    job_id = _card_job(conn)
    done = run_app(dsn, _cancel("127.0.0.1:9188", "http://127.0.0.1:9188")(job_id))
    assert done.status_code == 303 and _state(conn, job_id) == "cancelled"


def test_behind_a_trusted_tls_proxy_actions_work_and_an_untrusted_peer_s_headers_are_ignored(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    web = WebConfig(allowed_hosts=("dash.example.com",), trusted_proxies=("10.0.0.0/8",))
    forwarded = {"x-forwarded-proto": "https", "x-forwarded-host": "dash.example.com"}
    browser = "https://dash.example.com"
    job_id = _card_job(conn)
    done = run_app(
        dsn, _cancel("10.1.2.3:9188", browser, forwarded)(job_id), web=web, peer="10.0.0.5"
    )
    assert done.status_code == 303 and _state(conn, job_id) == "cancelled"
    # The same headers from an address that is not the proxy: not believed.
    job_id = _card_job(conn)
    spoofed = run_app(
        dsn, _cancel("dash.example.com", browser, forwarded)(job_id), web=web, peer="192.0.2.7"
    )
    assert spoofed.status_code == 403 and _state(conn, job_id) == "available"
    # Without the option, a TLS proxy's requests are refused as before (http is expected).
    job_id = _card_job(conn)
    plain = WebConfig(allowed_hosts=("dash.example.com",))
    refused = run_app(
        dsn, _cancel("dash.example.com", browser, forwarded)(job_id), web=plain, peer="10.0.0.5"
    )
    assert refused.status_code == 403 and _state(conn, job_id) == "available"


def _post(path: str) -> Steps:
    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        confirm = await client.get(path)
        assert confirm.status_code == 200, confirm.text
        return await client.post(path, data={"csrf": client.cookies["pgq_csrf"]})

    return steps


def _paused(conn: psycopg.Connection[Any]) -> list[str]:
    return [q for (q,) in conn.execute("SELECT queue FROM pgq.queue_pauses ORDER BY queue")]


def test_a_queue_named_x_slash_pause_shadows_nothing(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    enqueue(conn, "k", {}, queue="x")
    enqueue(conn, "k", {"marker": "in x/pause"}, queue="x/pause")

    async def pages(client: httpx.AsyncClient) -> list[httpx.Response]:
        return [await client.get("/queues/x%2Fpause"), await client.get("/queues/x")]

    named, plain = run_app(dsn, pages)
    assert named.status_code == 200 and "Queue x/pause" in named.text
    assert plain.status_code == 200 and "Queue x " in plain.text
    # Pausing the queue named "x/pause" pauses it, not x; and x's own pause pauses x.
    assert run_app(dsn, _post("/queues/x%2Fpause/pause")).status_code == 303
    assert _paused(conn) == ["x/pause"]
    assert run_app(dsn, _post("/queues/x/pause")).status_code == 303
    assert _paused(conn) == ["x", "x/pause"]
    # The page links its actions by the encoded name.
    assert 'href="/queues/x%2Fpause/resume"' in run_app(dsn, pages)[0].text


def test_a_read_only_dashboard_shows_no_action_and_refuses_every_one(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    job_id = _card_job(conn)
    read_only = WebConfig(read_only=True)

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        page = await client.get(f"/jobs/{job_id}")
        confirm = await client.get(f"/jobs/{job_id}/cancel")
        token = client.cookies["pgq_csrf"]
        posted = await client.post(f"/jobs/{job_id}/cancel", data={"csrf": token})
        pause = await client.post("/queues/default/pause", data={"csrf": token})
        return [page, confirm, posted, pause]

    page, confirm, posted, pause = run_app(dsn, steps, web=read_only)
    assert page.status_code == 200 and 'id="cancel"' not in page.text
    assert [confirm.status_code, posted.status_code, pause.status_code] == [403, 403, 403]
    assert "read-only" in posted.text
    assert _state(conn, job_id) == "available" and _paused(conn) == []


def test_every_action_is_in_the_audit_log_with_who_where_what_and_which_jobs(
    conn: psycopg.Connection[Any], dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    import base64

    job_id = _card_job(conn)
    basic = base64.b64encode(b"alice:pw-of-alice").decode()
    credentials = Credentials(user="alice", password="pw-of-alice")

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        client.headers["authorization"] = f"Basic {basic}"
        return await _post(f"/jobs/{job_id}/cancel")(client)

    caplog.set_level("INFO", logger="pgq.web.audit")
    web = WebConfig(trusted_proxies=("10.0.0.0/8",))

    async def via_proxy(client: httpx.AsyncClient) -> httpx.Response:
        client.headers["x-forwarded-for"] = "198.51.100.23"
        return await steps(client)

    done = run_app(dsn, via_proxy, credentials=credentials, web=web, peer="10.0.0.5")
    assert done.status_code == 303
    (record,) = [r for r in caplog.records if r.name == "pgq.web.audit"]
    assert record.audit == {  # type: ignore[attr-defined]
        "action": "cancel job",
        "who": "alice",
        "client": "198.51.100.23",
        "target": {"job_id": job_id},
        "job_ids": [job_id],
        "jobs": 1,
        "outcome": "done",
    }
    assert f"dashboard action cancel job (job_id={job_id}) by alice" in record.getMessage()
    from supervisor.observability.logs import JsonFormatter

    assert '"audit": {"action": "cancel job"' in JsonFormatter().format(record)


def test_redacted_argument_keys_show_on_no_page(conn: psycopg.Connection[Any], dsn: str) -> None:
    job_id = enqueue(
        conn,
        "charge",
        {"card_number": "4111 1111 1111 1111", "customer": {"CVV": "737", "name": "Ann"}},
    )

    async def steps(client: httpx.AsyncClient) -> str:
        return (await client.get(f"/jobs/{job_id}")).text

    shown = run_app(dsn, steps, web=WebConfig(redact=("card_number", "cvv")))
    assert "4111" not in shown and "737" not in shown
    assert "[redacted]" in shown and "Ann" in shown
    assert "4111 1111 1111 1111" in run_app(dsn, steps)  # shown when not named


def test_the_purge_action_commits_slice_by_slice(conn: psycopg.Connection[Any], dsn: str) -> None:
    from supervisor.web.actions import Actions

    conn.execute(
        "INSERT INTO pgq.jobs (queue, kind, args, state, attempts, finished_at)"
        " SELECT 'q', 'k', '{}', 'discarded', 1, now() - interval '2 days'"
        " FROM generate_series(1, 250)"
    )
    # Each DELETE statement notes the transaction it ran in.
    conn.execute(
        "CREATE TABLE purge_xacts (xact xid8);"
        "CREATE FUNCTION note_xact() RETURNS trigger LANGUAGE plpgsql AS"
        " $$BEGIN INSERT INTO purge_xacts VALUES (pg_current_xact_id()); RETURN NULL; END$$;"
        "CREATE TRIGGER note_xact AFTER DELETE ON pgq.jobs"
        " FOR EACH STATEMENT EXECUTE FUNCTION note_xact()"
    )
    done = asyncio.run(Actions(dsn, purge_batch=100).purge(86400.0, None, None))
    assert done.said == "purged 250 dead letters older than 1d"
    (xacts,) = conn.execute("SELECT count(DISTINCT xact) FROM purge_xacts").fetchone()
    assert xacts >= 3  # 100 + 100 + 50, each committed on its own
