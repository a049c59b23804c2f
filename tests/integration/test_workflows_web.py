"""The dashboard's workflow pages (issue 32): the graph as an SVG drawn from the steps' rows,
each box coloured by its state and linked to its job; a wide layer collapses."""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg

from supervisor import Discard, NewJob, Workflow, enqueue_workflow
from supervisor.testing import drain
from supervisor.web import graph
from tests.integration.test_web_pages import with_client


def test_the_workflow_page_draws_its_graph(conn: psycopg.Connection[Any], dsn: str) -> None:
    conn.autocommit = True
    wf = Workflow("invoice <7>")
    pages = [wf.add(NewJob("render_page", {"page": n})) for n in range(3)]
    archive = wf.add(NewJob("zip_pages"), after=pages)
    wf.add(NewJob("mail_zip"), after=[archive])
    handle = enqueue_workflow(conn, wf)

    def fail_one(page: int) -> None:
        if page == 2:
            raise Discard("bad page")

    drain(conn, {"render_page": fail_one})

    async def steps(client: httpx.AsyncClient) -> list[httpx.Response]:
        return [
            await client.get(f"/workflows/{handle.id}"),
            await client.get("/workflows"),
            await client.get("/workflows/999999"),
        ]

    page, listing, missing = with_client(dsn, steps)
    assert page.status_code == 200
    assert "invoice &lt;7&gt;" in page.text and "<7>" not in page.text
    svg = page.text[page.text.index('<svg id="workflow-graph"') : page.text.index("</svg>")]
    links = re.findall(r'<a href="/jobs/(\d+)" class="step" data-job="\d+" data-state="(\w+)"', svg)
    states = {int(job): state for job, state in links}
    assert states == {
        handle.job_ids[0]: "completed",
        handle.job_ids[1]: "completed",
        handle.job_ids[2]: "discarded",
        handle.job_ids[3]: "cancelled",
        handle.job_ids[4]: "cancelled",
    }
    assert svg.count("<line ") == 4  # three pages to the zip, the zip to the mail
    assert 'class="wf-discarded"' in svg
    assert listing.status_code == 200 and f'href="/workflows/{handle.id}"' in listing.text
    assert missing.status_code == 404


def test_a_wide_layer_collapses_into_one_box() -> None:
    from supervisor.queue.workflows import StepStatus

    def step(job_id: int, parents: list[int], state: str = "waiting") -> StepStatus:
        return StepStatus(
            job_id, job_id, "k", "q", state, "cancel", None, parents, None, None, None, 0, None
        )

    steps = [step(1, [], "completed")]
    steps += [step(10 + i, [1], "running" if i % 2 else "available") for i in range(1000)]
    steps.append(step(5000, [10 + i for i in range(1000)]))
    drawing = graph.draw(steps)
    boxes = [b for b in drawing.boxes if b.y == graph.MARGIN + graph.BOX_H + graph.GAP_Y]
    assert len(boxes) == graph.LAYER_WIDTH + 1
    assert boxes[-1].label == f"+{1000 - graph.LAYER_WIDTH} more" and boxes[-1].job_id is None
    assert "available" in boxes[-1].title and "running" in boxes[-1].title
    # Root to each drawn box, and each drawn box (the collapsed one once) to the join.
    assert len(drawing.lines) == 2 * (graph.LAYER_WIDTH + 1)
