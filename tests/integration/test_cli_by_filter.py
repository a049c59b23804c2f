"""`jobs cancel|retry|replay` by ids or by filter (DESIGN, fourth round: the CLI by filter):
--dry-run counts and changes nothing, --json says the same, and the jobs touched are exactly the
ones the filter names (the dashboard's /jobs code, supervisor.queue.bulk)."""

from __future__ import annotations

from typing import Any

import psycopg

from supervisor import NewJob, claim, enqueue, enqueue_many, settle
from supervisor.queue.outcomes import retry
from tests.integration.operator_helpers import Cli, dead_letter, states


def _mixed(conn: psycopg.Connection[Any]) -> dict[str, list[int]]:
    return {
        "pdf_acme": enqueue_many(
            conn,
            [
                NewJob("render_pdf", {"customer": 7, "n": i}, queue="pdf", tenant="acme")
                for i in range(3)
            ],
        ),
        "pdf_other": enqueue_many(
            conn, [NewJob("render_pdf", {"customer": 8}, queue="pdf") for _ in range(2)]
        ),
        "hooks": enqueue_many(
            conn, [NewJob("deliver_webhook", {}, queue="webhooks") for _ in range(2)]
        ),
    }


def test_cancel_by_filter_with_a_dry_run(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    made = _mixed(conn)
    before = states(conn)
    dry = cli("jobs", "cancel", "--queue", "pdf", "--kind", "render_pdf", "--dry-run")
    assert dry.code == 0, dry.err
    assert dry.out.startswith("would cancel 5 jobs (queue pdf, kind render_pdf;")
    assert "nothing changed" in dry.out
    assert states(conn) == before
    document = cli("jobs", "cancel", "--args", '{"customer": 7}', "--dry-run", "--json").json()
    assert document["dry_run"] is True and document["matched"] == 3
    assert states(conn) == before
    done = cli("jobs", "cancel", "--tenant", "acme", "--json").json()
    assert done["changed"] == sorted(made["pdf_acme"]) and done["skipped"] == 0
    after = states(conn)
    assert {i for i in after if after[i][0] == "cancelled"} == set(made["pdf_acme"])
    text = cli("jobs", "cancel", "--queue", "webhooks")
    assert text.out.startswith("cancelled or stopping 2 jobs (queue webhooks;"), text.out
    assert all(states(conn)[i][0] == "available" for i in made["pdf_other"])


def test_retry_takes_several_ids_and_a_filter(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    ids = [enqueue(conn, "render_pdf", queue="pdf") for _ in range(3)]
    for _ in ids:
        (job,) = claim(conn, "pdf", worker="w")
        settle(conn, [retry(job, 3600, "boom")])
    assert {s[0] for s in states(conn).values()} == {"scheduled"}
    two = cli("jobs", "retry", str(ids[0]), str(ids[1]))
    assert two.code == 0, two.err
    assert two.out.count("is due now (attempts kept)") == 2
    both = cli("jobs", "retry", str(ids[0]), str(ids[1]), "--json").json()
    assert [j["id"] for j in both["jobs"]] == ids[:2]
    dry = cli("jobs", "retry", "--state", "scheduled", "--dry-run")
    assert dry.out.startswith("would retry 1 job (state scheduled;"), dry.out
    assert cli("jobs", "retry", "--queue", "pdf").out.startswith("made due now 1 job")
    assert {s[0] for s in states(conn).values()} == {"available"}


def test_replay_by_filter(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    pdf = [dead_letter(conn, "render_pdf", "pdf") for _ in range(2)]
    hook = dead_letter(conn, "deliver_webhook", "webhooks")
    assert cli("jobs", "replay", "--kind", "render_pdf", "--dry-run").out.startswith(
        "would replay 2 jobs"
    )
    assert states(conn)[pdf[0]][0] == "discarded"
    done = cli("jobs", "replay", "--kind", "render_pdf", "--json").json()
    assert done["changed"] == sorted(pdf)
    assert states(conn)[hook][0] == "discarded"
    assert cli("jobs", "replay", str(hook)).code == 0
    assert states(conn)[hook][0] == "available"


def test_bad_usage_is_exit_2_and_changes_nothing(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    made = _mixed(conn)
    before = states(conn)
    one = str(made["hooks"][0])
    for argv, said in [
        (["jobs", "cancel"], "name the jobs"),
        (["jobs", "cancel", one, "--queue", "pdf"], "not both"),
        (["jobs", "cancel", "--state", "discarded"], "cancel applies to available"),
        (["jobs", "replay", "--args", "[1]"], "--args must be a JSON object"),
        (["jobs", "retry", "--args", "{nope"], "--args must be a JSON object"),
    ]:
        result = cli(*argv)
        assert result.code == 2, (argv, result.err)
        assert said in result.err, (argv, result.err)
    assert states(conn) == before
