"""Queue limits in the claim: concurrency counted from running jobs, rates from token buckets,
both taken in the claim's own transaction; slots given back by requeue and rescue."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest

from supervisor import NewJob, complete, enqueue_many, settle
from supervisor.queue import jobs as jobs_api
from supervisor.queue import outcomes
from supervisor.queue.limits import Limits, limit_use, write_limits
from supervisor.queue.maintenance import requeue_worker, rescue_batch
from tests.commands import run_cli
from tests.integration.operator_helpers import Cli


def _claim(conn: psycopg.Connection[Any], limit: int, **kw: Any) -> jobs_api.Claimed:
    return jobs_api.read_claim(jobs_api.send_claim(conn, "hooks", worker="w", limit=limit, **kw))


def _held(conn: psycopg.Connection[Any], limit: int) -> tuple[jobs_api.Claimed, float]:
    """A claim the limits held back, and when (time.monotonic) the token promised to it is
    due: by its own wait, counted from its reply. Compared between claims, the dues do not
    depend on how far apart the claims ran (on a loaded machine, tens of milliseconds)."""
    claimed = _claim(conn, limit)
    assert claimed.jobs == [] and claimed.limit_wait is not None, claimed
    return claimed, time.monotonic() + claimed.limit_wait


def _limit(conn: psycopg.Connection[Any], **limits: Any) -> None:
    write_limits(conn, [Limits("hooks", **limits)], ["hooks"], "test")


def test_concurrency_caps_a_claim_and_frees_with_completion(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, concurrency=3)
    enqueue_many(conn, [NewJob("k", queue="hooks") for _ in range(10)])
    first = _claim(conn, 10)
    assert len(first.jobs) == 3 and first.limit_wait is None
    held = _claim(conn, 10)
    assert held.jobs == [] and held.limit_wait == -1  # waits for a slot, not for a time
    # Completing one in the same statement frees its slot for that very claim.
    carried = jobs_api.read_claim(
        jobs_api.send_claim(conn, "hooks", worker="w", limit=10, done=first.jobs[:1]),
        first.jobs[:1],
    )
    assert len(carried.jobs) == 1 and carried.completed.kept == first.jobs[:1]
    complete(conn, [first.jobs[1]])
    assert len(_claim(conn, 10).jobs) == 1
    # A settle (a retry) frees its slot too.
    settle(conn, [outcomes.retry(first.jobs[2], 3600, "later")])
    assert len(_claim(conn, 10).jobs) == 1
    assert [u.running for u in limit_use(conn)] == [3]


def test_an_unlimited_queue_and_a_claim_of_nothing_are_untouched(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, concurrency=1)
    enqueue_many(conn, [NewJob("k", queue="other") for _ in range(5)])
    got = jobs_api.read_claim(jobs_api.send_claim(conn, "other", worker="w", limit=5))
    assert len(got.jobs) == 5 and got.limit_wait is None
    assert _claim(conn, 0).limit_wait is None  # a completion alone is never "held back"


def test_the_requeue_of_a_dead_worker_and_the_rescue_give_slots_back(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, concurrency=2)
    enqueue_many(conn, [NewJob("k", queue="hooks") for _ in range(6)])
    dead = jobs_api.read_claim(jobs_api.send_claim(conn, "hooks", worker="dead", limit=1)).jobs
    crashed = jobs_api.read_claim(
        jobs_api.send_claim(conn, "hooks", worker="crashed", limit=1, lease_seconds=0.01)
    ).jobs
    assert len(dead) == len(crashed) == 1
    assert _claim(conn, 5).jobs == []
    requeue_worker(conn, "dead", "child died", spent=[dead[0].id])
    assert len(_claim(conn, 5).jobs) == 1
    time.sleep(0.02)  # the lease above is 10 ms: let it run out
    assert len(rescue_batch(conn, limit=10)) == 1
    assert len(_claim(conn, 5).jobs) == 1
    assert _claim(conn, 5).jobs == []


def test_concurrent_claims_never_exceed_the_cap(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Eight sessions claim, hold and complete as fast as they can; a count of running jobs
    after every claim never passes the cap (without the queue's lock in pgq.limit_take, two
    claims see the same free slot and it does)."""
    _limit(conn, concurrency=4)
    enqueue_many(conn, [NewJob("k", queue="hooks") for _ in range(400)])
    peak = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        try:
            with psycopg.connect(dsn, autocommit=True) as mine:
                done: list[Any] = []
                while True:
                    cursor = jobs_api.send_claim(mine, "hooks", worker=f"w{n}", limit=3, done=done)
                    got = jobs_api.read_claim(cursor, done)
                    running = mine.execute(
                        "SELECT count(*) FROM pgq.jobs WHERE state = 'running'"
                    ).fetchone()[0]
                    with lock:
                        peak[0] = max(peak[0], running)
                    done = got.jobs
                    time.sleep(0.002)  # hold the slots a moment, as a handler would
                    if not got.jobs and got.limit_wait is None:
                        return
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert 1 <= peak[0] <= 4
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()[0] == 0


def test_a_rate_takes_tokens_spreads_promises_and_returns_unused(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, rate=5.0, burst=2)
    enqueue_many(conn, [NewJob("k", queue="hooks") for _ in range(1)])
    # Asked for 4 with one job due: takes 1 of the 2 tokens and gives the other back.
    assert len(_claim(conn, 4).jobs) == 1
    enqueue_many(conn, [NewJob("k", queue="hooks") for _ in range(10)])
    assert len(_claim(conn, 4).jobs) == 1  # the token given back
    first = _claim(conn, 4)
    second = _claim(conn, 4)
    assert first.jobs == [] and second.jobs == []
    # The next token is due within 1/5 s; a second waiter is told the one after it.
    assert first.limit_wait is not None and 0 < first.limit_wait <= 0.2
    assert second.limit_wait is not None
    assert abs(second.limit_wait - first.limit_wait - 0.2) < 0.05
    time.sleep(first.limit_wait)
    assert len(_claim(conn, 4).jobs) == 1
    [use] = limit_use(conn)
    assert use.rate == 5.0 and use.burst == 2 and use.tokens is not None and use.tokens < 1


def test_rate_and_concurrency_together_take_no_token_without_a_slot(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, concurrency=1, rate=100.0, burst=5)
    enqueue_many(conn, [NewJob("k", queue="hooks") for _ in range(5)])
    assert len(_claim(conn, 5).jobs) == 1
    held = _claim(conn, 5)
    assert held.jobs == [] and held.limit_wait == -1
    [use] = limit_use(conn)
    assert use.tokens is not None and use.tokens >= 3.9  # only the one start took a token


def test_write_limits_sets_changes_and_lifts_only_served_queues(
    conn: psycopg.Connection[Any],
) -> None:
    assert write_limits(conn, [Limits("a", concurrency=2)], ["a", "b"], "s1") == [("a", "set")]
    assert write_limits(conn, [Limits("a", concurrency=2)], ["a"], "s1") == []  # unchanged
    assert write_limits(conn, [Limits("c", rate=1.0, burst=1)], ["c"], "s2") == [("c", "set")]
    # s1 no longer limits a: lifted; c is not s1's to lift.
    assert write_limits(conn, [], ["a", "b"], "s1") == [("a", "lifted")]
    assert [u.queue for u in limit_use(conn)] == ["c"]


LIMITED = """
handlers: {deliver_webhook: tests.handlers:noop}
pools: {hooks: {queues: {hooks: 1, mail: 1}}}
limits:
  hooks: {concurrency: 3, rate: 1/s, burst: 4, per_tenant: {concurrency: 1}}
  mail: {rate: 10/min}
"""


def test_status_shows_each_limit_and_its_use(
    conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], dsn: str
) -> None:
    from supervisor.config import load_config
    from supervisor.config.limits import limit_rows

    cli = Cli(tmp_path, capsys, LIMITED, "limited")
    config = load_config(cli.path)
    write_limits(conn, limit_rows(config), ["hooks", "mail"], "host-a:1:ab")
    # Five tenants: the per-tenant cap of 1 lets two of them start.
    enqueue_many(conn, [NewJob("deliver_webhook", queue="hooks", tenant=f"t{n}") for n in range(5)])
    assert len(_claim(conn, 2).jobs) == 2
    document = cli("--dsn", dsn, "status", "--json").json()
    limits = {entry["queue"]: entry for entry in document["limits"]}
    hooks = limits["hooks"]
    assert hooks["concurrency"] == {"limit": 3, "running": 2, "use": 2 / 3}
    assert hooks["rate"]["per_second"] == 1 and hooks["rate"]["burst"] == 4
    assert 2 <= hooks["rate"]["tokens"] < 2.5  # two taken, refilling at 1/s
    assert hooks["per_tenant"] == {"concurrency": 1, "rate": None}
    assert hooks["set_by"] == "host-a:1:ab" and hooks["differs_from_config"] is False
    assert limits["mail"]["rate"]["tokens"] == 2  # untouched: a full bucket (burst 2)
    assert limits["mail"]["concurrency"] is None
    # Another file lifts mail's limit: the database no longer says what this file says.
    write_limits(conn, limit_rows(config)[:1], ["mail"], "host-b:2:cd")
    document = cli("--dsn", dsn, "status", "--json").json()
    assert [entry["queue"] for entry in document["limits"]] == ["hooks"]
    assert any("queue mail: the limits in force differ" in w for w in document["warnings"])
    text = cli("--dsn", dsn, "status").out
    row = next(line for line in text.splitlines() if line.startswith("hooks ") and "/3" in line)
    assert row.split()[:4] == ["hooks", "2/3", "1/s", "burst"]


def test_check_and_run_exit_2_on_a_bad_limit_before_anything_starts(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(LIMITED.replace("rate: 10/min", "rate: 10 a minute"))
    env = {"PATH": os.environ.get("PATH", ""), "PGQ_DSN": "postgresql://nobody@127.0.0.1:1/x"}
    for verb in (["check"], []):
        result = run_cli(path, *verb, env=env)
        assert result.returncode == 2, (verb, result.stderr)
        assert "limits.mail.rate: must be a rate like 50/s, 100/min or 10/h" in result.stderr
        assert "Traceback" not in result.stderr


def _room(conn: psycopg.Connection[Any], tenant: str, want: int, done: Sequence[Any] = ()) -> int:
    return conn.execute(
        "SELECT pgq.tenant_room('hooks', %s, %s, %s::bigint[], %s::bigint[])",
        (tenant, want, [j.id for j in done], [j.lease_id for j in done]),
    ).fetchone()[0]


def test_tenant_room_counts_each_tenants_running_jobs(conn: psycopg.Connection[Any]) -> None:
    _limit(conn, tenant_concurrency=2)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="acme") for _ in range(3)])
    enqueue_many(conn, [NewJob("k", queue="hooks") for _ in range(3)])  # the tenant ''
    running = _claim(conn, 6).jobs  # the claim holds each tenant to two
    assert len(running) == 4
    acme = [j for j in running if j.id in _ids_of(conn, "acme")]
    assert _room(conn, "acme", 5) == 0 and _room(conn, "", 5) == 0
    assert _room(conn, "other", 5) == 2
    # Jobs the same statement completes free their tenant's slots.
    assert _room(conn, "acme", 5, acme[:1]) == 1
    complete(conn, acme)
    assert _room(conn, "acme", 5) == 2 and _room(conn, "acme", 1) == 1


def _room_then_wait(conn: psycopg.Connection[Any], tenant: str) -> tuple[int, float | None]:
    """A claim's two calls in one transaction: its walk's room for the tenant, then (as
    limit_finish does when nothing was claimed) the wait for the token promised to it."""
    with conn.transaction():
        room = _room(conn, tenant, 5)
        wait = conn.execute("SELECT pgq.tenant_wait('hooks')").fetchone()[0]
    return room, wait


def _ids_of(conn: psycopg.Connection[Any], tenant: str) -> set[int]:
    rows = conn.execute("SELECT id FROM pgq.jobs WHERE tenant = %s", (tenant,)).fetchall()
    return {row[0] for row in rows}


def test_tenant_rates_spend_refill_wait_and_forget_full_buckets(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, tenant_rate=2.0, tenant_burst=2)
    assert _room(conn, "acme", 5) == 2  # no bucket yet: a full one
    assert _room_then_wait(conn, "acme") == (2, None)
    conn.execute("SELECT pgq.tenant_spend('hooks', 'acme', 2)")
    assert _room(conn, "acme", 5) == 0 and _room(conn, "globex", 5) == 2
    room, wait = _room_then_wait(conn, "acme")
    assert room == 0 and wait is not None and 0.4 < wait <= 0.5  # one token at 2/s
    # Promised: the next claim held back is told the token after it.
    room, after = _room_then_wait(conn, "acme")
    assert room == 0 and after is not None and abs(after - wait - 0.5) < 0.05
    time.sleep(wait)
    assert _room(conn, "acme", 5) == 1
    # A full bucket is the same as none: the occasional sweep drops it.
    conn.execute("UPDATE pgq.limit_buckets SET refilled_at = now() - interval '1 hour'")
    for _ in range(2000):
        conn.execute("SELECT pgq.tenant_spend('hooks', 'globex', 1)")
        if not _has_bucket(conn, "acme"):
            break
    assert not _has_bucket(conn, "acme")


def _has_bucket(conn: psycopg.Connection[Any], tenant: str) -> bool:
    return bool(
        conn.execute(
            "SELECT 1 FROM pgq.limit_buckets WHERE per = 'tenant' AND tenant = %s", (tenant,)
        ).fetchone()
    )


def test_status_lists_the_busiest_tenants_with_their_backlog_and_oldest_wait(
    conn: psycopg.Connection[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str], dsn: str
) -> None:
    enqueue_many(conn, [NewJob("deliver_webhook", queue="hooks", tenant="acme")] * 5)
    enqueue_many(conn, [NewJob("deliver_webhook", queue="hooks", tenant="globex")] * 2)
    enqueue_many(conn, [NewJob("deliver_webhook", queue="mail")] * 3)
    enqueue_many(conn, [NewJob("deliver_webhook", queue="hooks", tenant="later", delay=600)])
    conn.execute("UPDATE pgq.jobs SET run_at = now() - interval '90 seconds' WHERE tenant = 'acme'")
    jobs_api.read_claim(jobs_api.send_claim(conn, "hooks", worker="w", limit=1))
    cli = Cli(tmp_path, capsys, LIMITED, "limited")
    document = cli("--dsn", dsn, "status", "--json").json()
    busiest = document["busiest_tenants"]
    assert [(t["queue"], t["tenant"], t["available"], t["running"]) for t in busiest] == [
        ("hooks", "acme", 4, 1),
        ("mail", None, 3, 0),
        ("hooks", "globex", 2, 0),
    ]
    assert 90 <= busiest[0]["oldest_wait_seconds"] < 120
    text = cli("--dsn", dsn, "status").out
    assert "BUSIEST TENANTS" in text
    row = next(line for line in text.splitlines() if " acme " in line).split()
    assert row[:3] == ["hooks", "acme", "4"] and row[3].startswith("1m") and row[4] == "1"
    assert next(line for line in text.splitlines() if " (none) " in line).split()[:3] == [
        "mail",
        "(none)",
        "3",
    ]


def test_the_claim_steps_over_a_tenant_at_its_cap_and_fills_the_batch_from_others(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, tenant_concurrency=2)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="flood", priority=5)] * 20)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant=f"quiet-{n}") for n in range(10)])
    # Six tenants, one job each (the fair share), twice: flood reaches its cap of 2.
    first, second = _claim(conn, 6).jobs, _claim(conn, 6).jobs
    assert [j.tenant for j in first + second].count("flood") == 2
    assert len(first) == len(second) == 6
    # flood is at its cap and its jobs are all that wait: nothing to start, no time to wait for
    # (a slot frees when a job ends).
    third = _claim(conn, 6)
    assert third.jobs == [] and third.limit_wait is None
    # New tenants' jobs are claimed past flood's, in full.
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant=f"late-{n}") for n in range(3)])
    assert sorted(j.tenant for j in _claim(conn, 6).jobs) == ["late-0", "late-1", "late-2"]
    # One of flood's jobs completes in the next claim's own statement: its slot goes at once.
    flood = [j for j in first + second if j.tenant == "flood"]
    carried = jobs_api.read_claim(
        jobs_api.send_claim(conn, "hooks", worker="w", limit=6, done=flood[:1]), flood[:1]
    )
    assert [j.tenant for j in carried.jobs] == ["flood"]
    running = conn.execute(
        "SELECT count(*) FROM pgq.jobs WHERE state = 'running' AND tenant = 'flood'"
    ).fetchone()[0]
    assert running == 2


def test_the_claim_spends_each_tenants_tokens_and_waits_for_the_next(
    conn: psycopg.Connection[Any],
) -> None:
    _limit(conn, tenant_rate=4.0, tenant_burst=2)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="acme")] * 10)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="globex")] * 10)
    got = _claim(conn, 10).jobs
    assert sorted(j.tenant for j in got) == ["acme", "acme", "globex", "globex"]
    held = _claim(conn, 10)
    assert held.jobs == []
    assert held.limit_wait is not None and 0 < held.limit_wait <= 0.25  # one token at 4/s
    time.sleep(held.limit_wait)
    assert len(_claim(conn, 10).jobs) >= 1


def test_queue_and_tenant_limits_together(conn: psycopg.Connection[Any]) -> None:
    _limit(conn, concurrency=3, tenant_concurrency=2)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="a")] * 5)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="b")] * 5)
    got = _claim(conn, 10)
    assert len(got.jobs) == 3 and max(Counter(j.tenant for j in got.jobs).values()) == 2
    held = _claim(conn, 10)
    assert held.jobs == [] and held.limit_wait == -1


def test_a_tenant_token_due_while_the_claim_runs_is_waited_for_not_missed(
    conn: psycopg.Connection[Any],
) -> None:
    """The token of a tenant held back by its rate comes due between the claim's walk and its
    end: the claim says to come back at once (0), never nothing (None), which left the child
    asleep for its whole poll interval while the token went unused."""
    _limit(conn, tenant_rate=20.0, tenant_burst=2)
    conn.execute("SELECT pgq.tenant_spend('hooks', 'acme', 2)")
    with conn.transaction():
        assert _room(conn, "acme", 5) == 0
        time.sleep(0.06)  # past the next token (one in 1/20 s)
        wait = conn.execute("SELECT pgq.tenant_wait('hooks')").fetchone()[0]
    assert wait == 0.0


def test_claims_waiting_on_a_tenant_are_promised_one_token_each(
    conn: psycopg.Connection[Any],
) -> None:
    """Four claims that a tenant's rate held back are each told a token of their own, one
    token apart, so the waiting children wake one at a time rather than all together for the
    one token; the first to wake takes it, and a claim woken with it finds nothing."""
    _limit(conn, tenant_rate=5.0, tenant_burst=2)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="acme")] * 20)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="quiet")])
    assert sorted(j.tenant for j in _claim(conn, 5).jobs) == ["acme", "acme", "quiet"]
    held = [_held(conn, 5) for _ in range(4)]
    waits = [h.limit_wait for h, _ in held]
    dues = [due for _, due in held]
    assert waits[0] is not None and 0 < waits[0] <= 0.2
    for earlier, later in itertools.pairwise(dues):
        assert abs(later - earlier - 0.2) < 0.05, (waits, dues)  # one token (1/5 s) apart
    # The tenant without work was never promised anything: only acme's bucket holds promises.
    promised = conn.execute(
        "SELECT tenant FROM pgq.limit_buckets WHERE per = 'tenant' AND promised_at IS NOT NULL"
    ).fetchall()
    assert promised == [("acme",)]
    assert waits[0] is not None
    time.sleep(waits[0])
    assert [j.tenant for j in _claim(conn, 5).jobs] == ["acme"]
    late = _claim(conn, 5)  # a second child woken with the first: its token is not due yet
    assert late.jobs == [] and late.limit_wait is not None and late.limit_wait > waits[0]


def test_tenants_whose_tokens_fall_due_together_wake_one_claim(
    conn: psycopg.Connection[Any],
) -> None:
    """Two tenants spent together get their next tokens at the same moment; the claim woken
    then takes both, so the second claim waiting is told the moment after (one token later),
    not the other tenant's token of the same moment, which it would wake for and miss."""
    _limit(conn, tenant_rate=5.0, tenant_burst=1)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="acme")] * 10)
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant="globex")] * 10)
    assert sorted(j.tenant for j in _claim(conn, 5).jobs) == ["acme", "globex"]
    (first, first_due), (second, second_due) = _held(conn, 5), _held(conn, 5)
    assert first.limit_wait is not None and 0 < first.limit_wait <= 0.2
    assert abs(second_due - first_due - 0.2) < 0.05, (first, second)
    time.sleep(first.limit_wait)
    assert sorted(j.tenant for j in _claim(conn, 5).jobs) == ["acme", "globex"]


def test_a_claim_over_many_tenants_spends_each_tenants_tokens(
    conn: psycopg.Connection[Any],
) -> None:
    """The claim's end takes every tenant's tokens at once (0031): a batch over five tenants
    leaves each bucket short by the jobs it claimed, and a tenant that claimed nothing keeps
    no bucket."""
    _limit(conn, tenant_rate=0.01, tenant_burst=3)
    for n in range(5):
        enqueue_many(conn, [NewJob("k", queue="hooks", tenant=f"t{n}")] * (n + 1))
    got = _claim(conn, 20).jobs
    assert Counter(j.tenant for j in got) == {"t0": 1, "t1": 2, "t2": 3, "t3": 3, "t4": 3}
    tokens = dict(
        conn.execute(
            "SELECT tenant, round(tokens::numeric, 2) FROM pgq.limit_buckets WHERE per = 'tenant'"
        ).fetchall()
    )
    assert {t: float(v) for t, v in tokens.items()} == {
        "t0": 2.0,
        "t1": 1.0,
        "t2": 0.0,
        "t3": 0.0,
        "t4": 0.0,
    }
    # t0's and t1's jobs all ran; the others' tokens are spent: nothing may start now.
    assert _claim(conn, 20).jobs == []


@pytest.mark.parametrize(("variant", "batch"), [("claim", 5), ("claim_one", 1)])
def test_a_limited_claim_in_a_childs_session_reads_by_index_and_compiles_nothing(
    conn: psycopg.Connection[Any], variant: str, batch: int
) -> None:
    """Every statement the claim runs, its limit functions' included, as auto_explain logs them
    (to this client, as notices) in a session set up as a child's (generic plans, sequential
    scans priced out). A tenant passed to pgq.tenant_room in the claim's "C" collation made its
    text parameters "C", so its look-ups by queue could use no index: sequential scans, which
    before PostgreSQL 18 cost 10^10 with enable_seqscan off and so were JIT-compiled, 27-29 ms
    a statement (a claim over three tenants with per-tenant rates took 90 ms)."""
    _limit(
        conn,
        concurrency=50,
        rate=1000.0,
        burst=50,
        tenant_concurrency=20,
        tenant_rate=500.0,
        tenant_burst=20,
    )
    enqueue_many(conn, [NewJob("k", queue="hooks", tenant=f"t{n % 3}") for n in range(300)])
    conn.execute("ANALYZE pgq.jobs")
    jobs_api.use_generic_plans(conn)
    done = _claim(conn, 5).jobs
    plans: list[str] = []
    conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    conn.execute("LOAD 'auto_explain'")
    conn.execute(
        "SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;"
        " SET auto_explain.log_level = notice"
    )
    try:
        for _ in range(3):
            claimed = jobs_api.read_claim(
                jobs_api.send_claim(
                    conn, "hooks", worker="w", limit=batch, done=done, variant=variant
                ),
                done,
            )
            assert len(claimed.jobs) == batch
            done = claimed.jobs
    finally:
        conn.execute("SET auto_explain.log_min_duration = -1")
    nested = [plan for plan in plans if "WITH done AS" not in plan]
    assert any("pgq.queue_limits WHERE queue = p_queue" in plan for plan in nested), plans
    slow = [plan for plan in nested if "Seq Scan" in plan or "JIT:" in plan]
    assert not slow, "\n\n".join(slow)
