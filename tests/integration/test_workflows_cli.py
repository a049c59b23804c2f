"""The operator's view of workflows (issue 32): `workflows show|list|cancel`, `jobs show` of a
step naming its workflow and parents, `status` counting the waiting steps."""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor import NewJob, Workflow, enqueue_workflow
from supervisor.testing import drain
from tests.integration.operator_helpers import Cli


def _workflow(conn: psycopg.Connection[Any]) -> Any:
    wf = Workflow("invoice 7")
    pages = [wf.add(NewJob("render_pdf", {"page": n}, queue="pdf")) for n in range(3)]
    archive = wf.add(NewJob("render_pdf", {"zip": True}, queue="pdf"), after=pages)
    wf.add(NewJob("deliver_webhook", queue="webhooks"), after=[archive])
    handle = enqueue_workflow(conn, wf)
    conn.commit()
    return handle


def test_workflows_show_and_jobs_show_of_a_step(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    handle = _workflow(conn)
    shown = cli("workflows", "show", str(handle.id))
    assert shown.code == 0, shown.err
    assert "workflow" in shown.out and "invoice 7" in shown.out and "0 of 5 ended" in shown.out
    assert shown.out.count("waiting") == 2
    document = cli("workflows", "show", str(handle.id), "--json").json()
    assert [s["state"] for s in document["steps"]] == ["available"] * 3 + ["waiting"] * 2
    assert document["steps"][3]["parents"] == handle.job_ids[:3]

    step = cli("jobs", "show", str(handle.job_ids[3]))
    assert f"workflow    {handle.id} (invoice 7), step 4" in step.out
    assert ", ".join(map(str, handle.job_ids[:3])) in step.out
    as_json = cli("jobs", "show", str(handle.job_ids[3]), "--json").json()
    assert as_json["state"] == "waiting"
    assert as_json["workflow"]["id"] == handle.id
    assert as_json["workflow"]["parents"] == handle.job_ids[:3]
    assert cli("jobs", "show", str(handle.job_ids[0]), "--json").json()["workflow"]["parents"] == []

    status = cli("status", "--json").json()
    waiting = {q["queue"]: q["waiting"] for q in status["queues"]}
    assert waiting["pdf"] == 1 and waiting["webhooks"] == 1
    assert "WAITING" in cli("status").out

    conn.autocommit = True
    drain(conn, {"render_pdf": lambda **_: {"ok": 1}, "deliver_webhook": lambda: None})
    done = cli("workflows", "show", str(handle.id), "--json").json()
    assert done["finished_at"] is not None and done["completed"] == 5
    assert all(s["state"] == "completed" for s in done["steps"])
    assert done["steps"][0]["result_bytes"] == len('{"ok": 1}')
    listed = cli("workflows", "list", "--json").json()
    assert listed[0]["id"] == handle.id
    # A completed step's row is gone: `jobs show` still names its workflow and parents.
    gone = cli("jobs", "show", str(handle.job_ids[3]), "--json").json()
    assert gone["state"] == "completed" and gone["workflow"]["parents"] == handle.job_ids[:3]
    parents = ", ".join(map(str, handle.job_ids[:3]))
    assert f"after       {parents}" in cli("jobs", "show", str(handle.job_ids[3])).out


def test_workflows_cancel(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    handle = _workflow(conn)
    cancelled = cli("workflows", "cancel", str(handle.id))
    assert cancelled.code == 0 and "cancelled 5 steps" in cancelled.out
    document = cli("workflows", "show", str(handle.id), "--json").json()
    assert {s["state"] for s in document["steps"]} == {"cancelled"}
    assert document["cancelled_at"] is not None
    missing = cli("workflows", "show", "999999")
    assert missing.code == 1 and "no workflow 999999" in missing.err
    assert cli("workflows", "cancel", "999999").code == 1
