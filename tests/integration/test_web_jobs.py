"""/jobs through the real ASGI application on real PostgreSQL: filters across queues and states
(arguments by JSON containment, with and without the optional index), an action on a selection,
an action on everything a filter matches after its dry run, in slices, that leaves alone the
jobs enqueued after the count; the 24-hour charts; the refresh control; the confirmation's
wording."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx
import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from supervisor.web import bulk
from tests.integration.test_web_pages import with_client


def _form(page: httpx.Response) -> dict[str, str]:
    """The hidden fields of the page's form, as the browser would post them."""
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text)
    return {name: html.unescape(value) for name, value in found}


def _ids(page: httpx.Response) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-job="(\d+)"', page.text)]


def _jobs(conn: psycopg.Connection[Any]) -> list[int]:
    jobs = [
        NewJob(
            "invoice",
            {"invoice_id": n, "customer": {"id": n % 3}},
            queue="billing",
            tenant="acme" if n % 5 == 0 else None,
        )
        for n in range(30)
    ]
    jobs += [NewJob("mail", {"to": f"u{n}@x"}, queue="mail", delay=3600) for n in range(20)]
    return enqueue_many(conn, jobs)


def test_filters_across_queues_and_states(conn: psycopg.Connection[Any], dsn: str) -> None:
    ids = _jobs(conn)
    conn.execute(
        "UPDATE pgq.jobs SET state = 'discarded', finished_at = now(), "
        "last_error = repeat('x', 300) WHERE id = %s",
        (ids[5],),
    )

    async def steps(client: httpx.AsyncClient) -> dict[str, httpx.Response]:
        return {
            "all": await client.get("/jobs"),
            "scheduled": await client.get("/jobs?state=scheduled"),
            "args": await client.get('/jobs?args={"customer": {"id": 1}}&queue=billing'),
            "one": await client.get('/jobs?args={"invoice_id": 5}'),
            "bad": await client.get("/jobs?args=[1]"),
            "older": await client.get(f"/jobs?before={ids[10]}"),
            "tenant": await client.get("/jobs?tenant=acme"),
        }

    pages = with_client(dsn, steps)
    assert pages["all"].status_code == 200
    assert _ids(pages["all"]) == sorted(ids, reverse=True)[:50]
    assert _ids(pages["scheduled"]) == sorted(ids[30:], reverse=True)
    assert _ids(pages["args"]) == sorted(
        (i for n, i in enumerate(ids[:30]) if n % 3 == 1), reverse=True
    )
    assert _ids(pages["one"]) == [ids[5]]
    assert 'class="error-line"' in pages["one"].text and "x" * 300 in pages["one"].text
    assert pages["bad"].status_code == 400 and "must be a JSON object" in pages["bad"].text
    assert _ids(pages["older"]) == sorted(ids[:10], reverse=True)
    assert 'name="tenant"' in pages["all"].text
    assert _ids(pages["tenant"]) == sorted(ids[0:30:5], reverse=True)
    assert "<td>acme</td>" in pages["tenant"].text


def test_the_args_search_uses_the_optional_index_when_it_exists(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    ids = _jobs(conn)
    conn.execute("CREATE INDEX jobs_args ON pgq.jobs USING gin (args jsonb_path_ops)")

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.get('/jobs?args={"invoice_id": 7}')

    page = with_client(dsn, steps)
    assert _ids(page) == [ids[7]]
    assert "Searched by the index on arguments" in page.text


def test_an_action_on_a_selection(conn: psycopg.Connection[Any], dsn: str) -> None:
    ids = _jobs(conn)
    chosen = ids[30:33]

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        query = "&".join(f"ids={i}" for i in chosen)
        confirm = await client.get(f"/jobs/selected?action=run-now&{query}&back=state%3Dscheduled")
        done = await client.post(
            "/jobs/selected",
            data={
                "csrf": client.cookies["pgq_csrf"],
                "action": "run-now",
                "ids": " ".join(map(str, chosen)),
                "back": "state=scheduled",
            },
        )
        return [confirm, done, await client.get(done.headers["location"])]

    confirm, done, after = with_client(dsn, steps)
    assert f"Run now 3 jobs ({', '.join(map(str, chosen))})" in confirm.text
    assert ">Go back</a>" in confirm.text and ">Cancel</a>" not in confirm.text
    assert done.status_code == 303
    assert "made due now 3 of 3 jobs" in after.text
    states = dict(conn.execute("SELECT id, state FROM pgq.jobs WHERE id = ANY(%s)", (ids[30:],)))
    assert [states[i] for i in chosen] == ["available"] * 3
    assert states[ids[33]] == "scheduled"


def test_an_action_on_everything_a_filter_matches_runs_in_slices(
    conn: psycopg.Connection[Any], dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk, "SLICE", 4)
    ids = _jobs(conn)
    query = 'action=cancel&queue=billing&args={"customer": {"id": 0}}'
    matching = [i for n, i in enumerate(ids[:30]) if n % 3 == 0]  # 10 jobs

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        dry = await client.get(f"/jobs/bulk?{query}")
        form = _form(dry)
        # Enqueued after the count: the action must leave it alone.
        late = enqueue_many(conn, [NewJob("invoice", {"customer": {"id": 0}}, queue="billing")])
        seen = [dry]
        while True:
            page = await client.post("/jobs/bulk", data=form)
            seen.append(page)
            if 'data-finished="yes"' in page.text:
                break
            assert len(seen) < 10
            form = _form(page)
        seen.append(httpx.Response(200, text=str(late[0])))
        return seen

    pages = with_client(dsn, steps)
    dry, *slices, late = pages
    assert "<strong>10</strong> jobs match" in dry.text and ">Cancel 10 jobs</button>" in dry.text
    assert len(slices) == 3  # 4 + 4 + 2
    assert "Done: 10 cancelled or stopping" in slices[-1].text and "in 3 slices" in slices[-1].text
    states = dict(conn.execute("SELECT id, state FROM pgq.jobs"))
    assert {states[i] for i in matching} == {"cancelled"}
    assert states[int(late.text)] == "available"
    assert sum(s == "cancelled" for s in states.values()) == 10


def test_a_bulk_action_refuses_a_state_it_does_not_apply_to(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.get("/jobs/bulk?action=replay&state=scheduled")

    page = with_client(dsn, steps)
    assert page.status_code == 400 and "replay applies to discarded jobs" in page.text


def test_a_slice_without_the_token_is_refused(conn: psycopg.Connection[Any], dsn: str) -> None:
    ids = _jobs(conn)

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        await client.get("/jobs")
        return await client.post(
            "/jobs/bulk", data={"action": "cancel", "top": str(max(ids)), "floor": "0"}
        )

    assert with_client(dsn, steps).status_code == 403
    assert conn.execute("SELECT count(*) FROM pgq.jobs WHERE state = 'cancelled'").fetchone() == (
        0,
    )


def test_the_last_24_hours_from_history(conn: psycopg.Connection[Any], dsn: str) -> None:
    for ago, outcome in (
        ("3 hours", "completed"),
        ("3 hours", "completed"),
        ("1 hour", "discarded"),
    ):
        conn.execute(
            "INSERT INTO pgq.job_history (id, queue, kind, outcome, attempts, created_at,"
            " started_at, finished_at) VALUES (0, 'q', 'k', %s, 1, now() - %s::interval"
            " - interval '10 seconds', now() - %s::interval - interval '4 seconds',"
            " now() - %s::interval)",
            (outcome, ago, ago, ago),
        )

    async def steps(client: httpx.AsyncClient) -> tuple[httpx.Response, httpx.Response]:
        old = await client.get("/history", follow_redirects=True)
        return old, await client.get("/charts/data?range=day")

    page, data = with_client(dsn, steps)
    assert page.status_code == 200 and str(page.url).endswith("/charts?range=day")
    assert "completed per 15 minutes (2)" in page.text
    assert "discarded or cancelled per 15 minutes (1)" in page.text
    series = data.json()
    assert (sum(series["completed"]), sum(series["failed"])) == (2, 1)
    assert len(series["t"]) == 96 and series["step"] == 900
    # The wait: enqueued 10 s before, started 4 s before the end.
    assert max(w for w in series["wait_p95"] if w is not None) == 6.0


def test_the_refresh_control_is_remembered(conn: psycopg.Connection[Any], dsn: str) -> None:
    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        before = await client.get("/jobs")
        chosen = await client.get("/refresh?every=0&back=%2Fjobs")
        elsewhere = await client.get("/refresh?every=10&back=https%3A%2F%2Fevil.example")
        off = await client.get("/workers")
        return [before, chosen, elsewhere, off]

    before, chosen, elsewhere, off = with_client(dsn, steps)
    assert 'hx-trigger="every 2s [!document.querySelector' in before.text  # waits on ticks
    assert chosen.status_code == 303 and chosen.headers["location"] == "/jobs"
    assert elsewhere.headers["location"] == "/"  # never a redirect to another site
    assert 'hx-trigger="every 10s"' in off.text


def test_the_cancel_confirmation_says_keep_not_cancel(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    (job_id,) = enqueue_many(conn, [NewJob("k", {}, queue="q")])

    async def steps(client: httpx.AsyncClient) -> httpx.Response:
        return await client.get(f"/jobs/{job_id}/cancel")

    page = with_client(dsn, steps)
    assert f">Cancel job {job_id}</button>" in page.text
    assert f">Keep job {job_id}</a>" in page.text and ">Cancel</a>" not in page.text


def test_a_read_only_dashboard_finds_jobs_but_acts_on_none(
    conn: psycopg.Connection[Any], dsn: str
) -> None:
    from supervisor.config.model import WebConfig
    from tests.integration.test_web_security import run_app

    ids = _jobs(conn)

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        page = await client.get("/jobs?state=scheduled")
        slice_ = await client.post(
            "/jobs/bulk",
            data={
                "action": "cancel",
                "top": str(max(ids)),
                "floor": "0",
                "csrf": client.cookies.get("pgq_csrf", ""),
            },
            headers={"Origin": "http://127.0.0.1:9188"},
        )
        ticked = await client.get(f"/jobs/selected?action=cancel&ids={ids[40]}")
        return [page, slice_, ticked]

    page, slice_, ticked = run_app(dsn, steps, web=WebConfig(read_only=True))
    assert _ids(page) == sorted(ids[30:], reverse=True)
    assert 'id="bulk-actions"' not in page.text and 'id="selected-actions"' not in page.text
    assert slice_.status_code == 403 and ticked.status_code == 403
    assert conn.execute("SELECT count(*) FROM pgq.jobs WHERE state = 'cancelled'").fetchone() == (
        0,
    )
