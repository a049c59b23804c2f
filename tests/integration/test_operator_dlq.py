"""`dlq list|show|replay|purge` against real PostgreSQL: each moves or deletes exactly the dead
letters it was asked to, and nothing else."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from supervisor import claim, enqueue, settle
from supervisor.queue.outcomes import describe_exception, discard, failure
from tests.integration.operator_helpers import Cli, dead_letter, states


@pytest.fixture
def letters(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Four dead letters of two kinds and ages, beside a waiting and a running job."""
    made = {
        "pdf_old": dead_letter(conn, "render_pdf", "pdf", finished_ago="2 days"),
        "pdf_new": dead_letter(conn, "render_pdf", "pdf", finished_ago="1 hour"),
        "hook_old": dead_letter(conn, "deliver_webhook", "webhooks", finished_ago="3 days"),
        "hook_new": dead_letter(conn, "deliver_webhook", "webhooks", finished_ago="10 minutes"),
        "waiting": enqueue(conn, "render_pdf", queue="pdf"),
        "running": enqueue(conn, "render_pdf", queue="reports"),
    }
    claim(conn, "reports", worker="w")
    return made


def _changed(before: dict[int, Any], after: dict[int, Any]) -> set[int]:
    return {job_id for job_id in before if before[job_id] != after.get(job_id)}


@pytest.mark.parametrize(
    ("argv", "moved"),
    [
        (["--id", "{pdf_old}"], {"pdf_old"}),
        (["--id", "{pdf_old}", "{hook_new}"], {"pdf_old", "hook_new"}),
        (["--kind", "deliver_webhook"], {"hook_old", "hook_new"}),
        (["--queue", "pdf"], {"pdf_old", "pdf_new"}),
        (["--older-than", "1d"], {"pdf_old", "hook_old"}),
        (["--older-than", "30m", "--kind", "render_pdf"], {"pdf_old", "pdf_new"}),
        (["--all"], {"pdf_old", "pdf_new", "hook_old", "hook_new"}),
    ],
)
def test_replay_moves_exactly_the_named_dead_letters(
    cli: Cli,
    conn: psycopg.Connection[Any],
    letters: dict[str, int],
    argv: list[str],
    moved: set[str],
) -> None:
    before = states(conn)
    with psycopg.connect(conn.info.dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq_jobs")
        result = cli("dlq", "replay", *[a.format(**letters) for a in argv])
        woken = {n.payload for n in listener.notifies(timeout=1, stop_after=2)}
    assert result.code == 0, result.err
    after = states(conn)
    expected = {letters[name] for name in moved}
    assert _changed(before, after) == expected
    for job_id in expected:
        # Back in its queue, attempts reset, due now, no longer finished.
        assert after[job_id] == ("available", 0, True, False)
    ids = ", ".join(str(i) for i in sorted(expected))
    noun = "dead letter" if len(expected) == 1 else "dead letters"
    assert result.out.startswith(f"replayed {len(expected)} {noun} (")
    assert result.out.rstrip().endswith(f"due now: {ids}")
    queues = conn.execute(
        "SELECT DISTINCT queue FROM pgq.jobs WHERE id = ANY(%s)", (sorted(expected),)
    ).fetchall()
    assert woken == {q for (q,) in queues}


@pytest.mark.parametrize(
    "argv",
    [[], ["--all", "--kind", "render_pdf"], ["--kind"], ["--id"], ["--older-than", "yesterday"]],
)
def test_replay_without_a_clear_filter_exits_2_and_changes_nothing(
    cli: Cli, conn: psycopg.Connection[Any], letters: dict[str, int], argv: list[str]
) -> None:
    before = states(conn)
    result = cli("dlq", "replay", *argv)
    assert result.code == 2
    assert result.out == ""
    assert states(conn) == before
    if not argv:
        assert "say which dead letters to replay" in result.err


def test_replay_of_ids_that_are_not_dead_letters_says_so_and_exits_1(
    cli: Cli, conn: psycopg.Connection[Any], letters: dict[str, int]
) -> None:
    before = states(conn)
    ids = [letters["pdf_new"], letters["waiting"], letters["running"], 999999]
    result = cli("dlq", "replay", "--id", *map(str, ids))
    assert result.code == 1
    assert _changed(before, states(conn)) == {letters["pdf_new"]}
    assert f"due now: {letters['pdf_new']}" in result.out
    missing = sorted([letters["waiting"], letters["running"], 999999])
    assert f"not replayed: {', '.join(map(str, missing))}" in result.err


def test_replay_lists_the_first_20_ids(cli: Cli, conn: psycopg.Connection[Any]) -> None:
    ids = [dead_letter(conn) for _ in range(23)]
    result = cli("dlq", "replay", "--kind", "render_pdf")
    assert result.out.rstrip().endswith(f"due now: {', '.join(map(str, ids[:20]))} and 3 more")


def test_replay_keeps_a_dead_letter_whose_unique_key_is_held_again(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    enqueue(conn, "render_pdf", queue="pdf", unique_key="invoice:7")
    (job,) = claim(conn, "pdf", worker="w")
    settle(conn, [discard(job, "no")])
    enqueue(conn, "render_pdf", queue="pdf", unique_key="invoice:7")
    before = states(conn)
    result = cli("dlq", "replay", "--id", str(job.id))
    assert result.code == 1
    assert "unique key" in result.err and "invoice:7" in result.err
    assert states(conn) == before


def test_replay_of_two_dead_letters_sharing_a_unique_key_replays_the_newer(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    first, second = (dead_letter(conn, queue="pdf", unique_key="invoice:8") for _ in range(2))
    listed = cli("dlq", "list", "--json").json()
    assert [j["unique_key"] for j in listed["jobs"]] == ["invoice:8", "invoice:8"]
    result = cli("dlq", "replay", "--kind", "render_pdf")
    assert result.code == 1 and "left 1 dead letter in the queue" in result.err
    assert f"{first} (invoice:8)" in result.err
    assert states(conn)[second][0] == "available" and states(conn)[first][0] == "discarded"


@pytest.mark.parametrize(
    ("argv", "gone"),
    [
        (["--older-than", "1d"], {"pdf_old", "hook_old"}),
        (["--older-than", "1d", "--kind", "render_pdf"], {"pdf_old"}),
        (["--older-than", "30m", "--queue", "webhooks"], {"hook_old"}),
        (["--older-than", "5m"], {"pdf_old", "pdf_new", "hook_old", "hook_new"}),
        (["--older-than", "7d"], set()),
    ],
)
def test_purge_deletes_only_what_matches(
    cli: Cli,
    conn: psycopg.Connection[Any],
    letters: dict[str, int],
    argv: list[str],
    gone: set[str],
) -> None:
    before = set(states(conn))
    result = cli("dlq", "purge", *argv)
    assert result.code == 0, result.err
    assert before - set(states(conn)) == {letters[name] for name in gone}
    noun = "dead letter" if len(gone) == 1 else "dead letters"
    assert result.out.startswith(f"purged {len(gone)} {noun} (")


def test_purge_requires_older_than_and_works_in_batches(
    cli: Cli, conn: psycopg.Connection[Any]
) -> None:
    for _ in range(5):  # the test config purges in batches of 2
        dead_letter(conn, finished_ago="2 days")
    refused = cli("dlq", "purge", "--kind", "render_pdf")
    assert refused.code == 2 and "--older-than" in refused.err
    assert len(states(conn)) == 5
    assert cli("dlq", "purge", "--older-than", "1d").out.startswith("purged 5 dead letters")
    assert states(conn) == {}


def _traceback() -> str:
    try:
        {}["template"]
    except KeyError as exc:
        return describe_exception(exc)
    raise AssertionError


def test_list_newest_first_with_filters_limit_and_the_telling_line(
    cli: Cli, conn: psycopg.Connection[Any], letters: dict[str, int]
) -> None:
    listed = cli("dlq", "list", "--json").json()
    assert [j["id"] for j in listed["jobs"]] == [
        letters[n] for n in ("hook_new", "pdf_new", "pdf_old", "hook_old")
    ]
    assert listed["total"] == 4
    first = listed["jobs"][0]
    assert (first["kind"], first["queue"], first["attempts"], first["error"]) == (
        "deliver_webhook",
        "webhooks",
        1,
        "boom",
    )
    assert 600 <= first["finished_age_seconds"] < 700
    newer = cli("dlq", "list", "--json", "--newer-than", "1d", "--kind", "render_pdf").json()
    assert [j["id"] for j in newer["jobs"]] == [letters["pdf_new"]]
    older = cli("dlq", "list", "--json", "--older-than", "1d", "--queue", "webhooks").json()
    assert [j["id"] for j in older["jobs"]] == [letters["hook_old"]]
    limited = cli("dlq", "list", "--limit", "2")
    assert "2 of 4 dead letters" in limited.out
    assert len([line for line in limited.out.splitlines() if line[:1] == " "]) <= 2

    (job,) = claim(conn, "pdf", worker="w")  # the waiting job fails for good
    settle(conn, [failure(job, _traceback(), max_attempts=1)])
    text = cli("dlq", "list", "--kind", "render_pdf").out
    row = next(line for line in text.splitlines() if line.lstrip().startswith(str(job.id)))
    assert "KeyError: 'template'" in row and "Traceback" not in row
    assert cli("dlq", "list", "--kind", "nothing").out == "no dead letters match (kind 'nothing')\n"


def test_show_prints_everything_and_refuses_what_is_not_a_dead_letter(
    cli: Cli, conn: psycopg.Connection[Any], letters: dict[str, int]
) -> None:
    job_id = dead_letter(conn, args={"invoice_id": 7, "lines": [1, 2]}, error=_traceback())
    shown = cli("dlq", "show", str(job_id))
    assert shown.code == 0
    assert f"job {job_id}: render_pdf on queue pdf, discarded" in shown.out
    assert '    "invoice_id": 7,' in shown.out
    assert "Traceback (most recent call last)" in shown.out
    assert "KeyError: 'template'" in shown.out
    assert f"dlq replay --id {job_id}" in shown.out
    document = cli("dlq", "show", str(job_id), "--json").json()
    assert document["args"] == {"invoice_id": 7, "lines": [1, 2]}
    assert document["state"] == "discarded" and document["last_error"].startswith("Traceback")
    missing = cli("dlq", "show", "999999")
    assert missing.code == 1 and "no job 999999" in missing.err
    waiting = cli("dlq", "show", str(letters["waiting"]))
    assert waiting.code == 1 and "is available, not discarded" in waiting.err
    assert waiting.out == ""
