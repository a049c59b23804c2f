"""Where a child's claims start inside each tenant (supervisor/child/cursors.py): pure logic,
no database."""

from __future__ import annotations

import itertools
import os
from datetime import datetime, timedelta, timezone

from supervisor.child.cursors import NEAR, PER_CLAIM, PER_QUEUE, ClaimCursors
from supervisor.queue.job import Job
from supervisor.shared.head_walks import HeadWalks

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def job(id: int, queue: str = "q", tenant: str | None = None, priority: int = 0) -> Job:
    run_at = T0 + timedelta(seconds=id)
    return Job(id, queue, "k", {}, priority, run_at, 1, 10, 1, T0, T0, tenant=tenant)


def test_the_first_claim_and_every_refresh_start_from_the_head() -> None:
    cursors = ClaimCursors(refresh=1.0)
    assert cursors.for_claim(["q"], 0.0) == []
    cursors.observe([job(1), job(2)], 0.0, took=0.004)  # cheap: no claim from near
    assert cursors.for_claim(["q"], 0.05) == [("q", "", 0, job(2).run_at, 2)]
    cursors.observe([job(3)], 0.05)
    assert cursors.for_claim(["q"], 0.08) == []  # due: from the head
    cursors.observe([job(9)], 0.08, took=0.004)  # and the cursors start again from its jobs
    assert [c[4] for c in cursors.for_claim(["q"], 0.1)] == [9]


def test_a_cursor_is_the_last_job_in_claim_order_per_tenant() -> None:
    cursors = ClaimCursors(refresh=60.0)
    cursors.for_claim(["q"], 0.0)
    # Claim order is priority DESC, run_at, id: the last is the lowest priority, latest.
    cursors.observe([job(5, priority=3), job(6, priority=0), job(7, priority=0)], 0.0, took=0.001)
    cursors.observe([job(2, tenant="b"), job(1, tenant="a"), job(4, queue="other")], 0.001)
    assert cursors.for_claim(["q", "other"], 0.002) == [
        ("q", "", 0, job(7).run_at, 7),
        ("q", "a", 0, job(1).run_at, 1),  # in tenant order, as the claim reads them
        ("q", "b", 0, job(2).run_at, 2),
        ("other", "", 0, job(4).run_at, 4),
    ]
    # An older job claimed later (a sibling's leftover) does not move a cursor back.
    cursors.observe([job(3)], 0.003)
    assert cursors.for_claim(["q"], 0.004)[0][4] == 7


def test_claims_from_near_the_cursors_come_between_those_from_the_head() -> None:
    """While the head is dear (a held horizon), every HEAD_EVERY of its own walks a claim
    starts NEAR before each cursor: it finds a producer's late commit without the walk of the
    whole dead prefix, and leaves the cursors where they were."""
    cursors = ClaimCursors(refresh=1.0)
    cursors.for_claim(["q"], 0.0)
    cursors.observe([job(10), job(12, tenant="a")], 0.0, took=0.3)  # the walk: 300 ms
    assert cursors.for_claim(["q"], 0.05) == [
        ("q", "", 0, job(10).run_at, 10),
        ("q", "a", 0, job(12).run_at, 12),
    ]
    cursors.observe([job(11)], 0.05, took=0.002)
    near = cursors.for_claim(["q"], 0.3)  # 20 of the cheap walks after the head's
    assert near == [("q", "", 0, job(11).run_at - NEAR, 0), ("q", "a", 0, job(12).run_at - NEAR, 0)]
    cursors.observe([job(9), job(13)], 0.3, took=0.004)  # a late commit, and the next job
    assert cursors.for_claim(["q"], 0.31)[0] == ("q", "", 0, job(13).run_at, 13)
    cursors.observe([], 0.31)
    assert cursors.for_claim(["q"], 0.37)[0][4] == 13  # 20 of its 4 ms walks after 0.3:
    cursors.observe([], 0.37)
    assert cursors.for_claim(["q"], 0.39)[0][4] == 0  # the next from near
    cursors.observe([], 0.39, took=0.004)
    # The head's claim is still due HEAD_EVERY of its walks after the last (at most the refresh).
    assert cursors.for_claim(["q"], 0.99) != []
    assert cursors.for_claim(["q"], 1.0) == []


def test_an_idle_child_wakes_for_the_claim_from_the_head_only_with_cursors() -> None:
    cursors = ClaimCursors(refresh=1.0)
    assert cursors.due_in(0.0) is None
    cursors.for_claim(["q"], 0.0)
    cursors.observe([], 0.0, took=0.004)
    assert cursors.due_in(0.1) is None  # nothing claimed: nothing to skip
    cursors.for_claim(["q"], 0.1)
    cursors.observe([job(1)], 0.1, took=0.0035)
    due = cursors.due_in(0.11)
    assert due is not None and abs(due - 0.06) < 1e-9  # 20 walks after the last head claim
    assert cursors.due_in(5.0) == 0.0
    # A dear head: the idle child wakes for it, not for a claim from near the cursors (every
    # twenty cheap walks); its next claim after a wake-up is one from near.
    dear = ClaimCursors(refresh=1.0)
    dear.for_claim(["q"], 0.0)
    dear.observe([job(1)], 0.0, took=0.1)
    assert dear.due_in(0.0) == 1.0
    assert dear.for_claim(["q"], 0.5) == [("q", "", 0, job(1).run_at - NEAR, 0)]


def heads(cursors: ClaimCursors, walks: list[float], step: float = 0.01) -> list[float]:
    """When the claims from the head begin, each taking the next of ``walks``, a claim every
    ``step`` seconds between them (those from near take a millisecond)."""
    now, began = 0.0, []
    while walks:
        if cursors.for_claim(["q"], now) == []:
            took = walks.pop(0)
            began.append(now)
        else:
            took = 0.001
        cursors.observe([job(1)], now, took=took)
        now += max(took, step)
    return began


def test_the_claim_from_the_head_comes_sooner_when_it_is_cheap() -> None:
    began = heads(ClaimCursors(refresh=1.0), [0.001, 0.004, 0.016, 0.064, 0.2, 0.2])
    gaps = [b - a for a, b in itertools.pairwise(began)]
    # 20 walks apart (a clean database: 20 ms), at most the refresh as the dead prefix grows,
    # and never sooner than ten walks (seen to the simulation's step).
    expected = [0.02, 0.08, 0.32, 1.0, 2.0]
    assert all(0 <= g - e < 0.0101 for g, e in zip(gaps, expected, strict=True)), gaps


def test_the_claim_from_the_head_takes_at_most_a_tenth_of_the_childs_time() -> None:
    """A horizon held for an hour makes the walk from the head cost seconds; every refresh it
    would take the whole child."""
    began = heads(ClaimCursors(refresh=1.0), [1.8] * 6)
    # A walk that long is believed within a few claims from the head; then ten walks apart.
    assert 18.0 <= began[-1] - began[-2] < 18.0101


def test_a_wait_in_a_claim_from_the_head_does_not_postpone_the_next() -> None:
    """A claim from the head that waited 15 s behind a row lock (its carried outcome's) walked
    what the last one walked: the next comes within the refresh, not four times 15 s later
    (issue 30: a late-committed job stayed hidden below the cursors for about 60 s)."""
    cursors = ClaimCursors(refresh=1.0)
    cursors.for_claim(["q"], 0.0)
    cursors.observe([job(1)], 0.0, took=0.002)
    cursors.for_claim(["q"], 1.0)
    cursors.observe([job(2)], 1.0, took=15.0)
    assert cursors.due_in(16.0) == 0.0  # due at once: 20 walks of at most 8 ms after 1.0
    assert cursors.for_claim(["q"], 16.0) == []


def test_cursors_are_bounded() -> None:
    cursors = ClaimCursors(refresh=60.0)
    cursors.for_claim(["q"], 0.0)
    tenants = [job(n, tenant=f"t{n:04d}") for n in range(PER_QUEUE + 10)]
    cursors.observe(tenants, 0.0, took=1.0)
    kept = cursors.for_claim(["q"], 0.1)
    assert len(kept) == PER_QUEUE
    assert kept[0][1] == "t0010"  # the least recently claimed went first
    for n in range(10):
        cursors.observe([job(n, queue=f"q{n}", tenant=f"t{m}") for m in range(PER_QUEUE)], 0.2)
    assert len(cursors.for_claim(["q", *(f"q{n}" for n in range(10))], 0.3)) == PER_CLAIM


def test_an_empty_claim_drops_the_cursors_only_while_the_head_is_cheap() -> None:
    # Clean database: the claim from the head took 0.5 ms. An empty claim leaves no cursor, so
    # the idle child sleeps until woken (no early claim from the head) and its next claim
    # starts from the head, where a late-committed job below the old cursor is.
    cheap = ClaimCursors(refresh=1.0)
    cheap.for_claim(["q"], 0.0)
    cheap.observe([job(1), job(2)], 0.0, took=0.0005)
    assert cheap.due_in(0.001) is not None
    cheap.for_claim(["q"], 0.001)
    cheap.observe([], 0.001, took=0.0005)
    assert cheap.due_in(0.002) is None and cheap.for_claim(["q"], 0.002) == []
    # A held horizon: the head walk took 50 ms. Cursors outlive an empty claim (a claim from
    # the head costs the walk), and the idle child still wakes for the head when it is due.
    dear = ClaimCursors(refresh=1.0)
    dear.for_claim(["q"], 0.0)
    dear.observe([job(1), job(2)], 0.0, took=0.05)
    dear.for_claim(["q"], 0.06)
    dear.observe([], 0.06, took=0.001)
    assert dear.due_in(0.07) is not None
    assert dear.for_claim(["q"], 0.07) == [("q", "", 0, job(2).run_at, 2)]


def test_a_claim_from_the_head_that_came_back_short_keeps_the_cursors_it_did_not_move() -> None:
    """It visited every tenant and took all it found: nothing waits below the cursors of the
    tenants where it took nothing. Dropped, they made every claim after it a walk from the head
    until one claimed a job (at 3,000 jobs/s with a held horizon: three walks a second, not
    one a refresh)."""
    cursors = ClaimCursors(refresh=1.0)
    cursors.for_claim(["q"], 0.0)
    cursors.observe([job(5), job(7, tenant="a")], 0.0, took=0.1)
    assert cursors.for_claim(["q"], 1.0) == []  # from the head: it finds one job of tenant a
    cursors.observe([job(6, tenant="a")], 1.0, took=0.1, whole=True)
    kept = cursors.for_claim(["q"], 1.01)
    assert [(c[1], c[4]) for c in kept] == [("", 5), ("a", 6)]  # a's moves back to what it took
    # Came back full (a tenant may not have been reached): the cursors start again.
    assert cursors.for_claim(["q"], 5.0) == []
    cursors.observe([job(8, tenant="a")], 5.0, took=0.1, whole=False)
    assert [(c[1], c[4]) for c in cursors.for_claim(["q"], 5.01)] == [("a", 8)]


def test_the_pools_walks_from_the_head_take_turns_while_a_horizon_is_held() -> None:
    """Two children walking the dead prefix at once left the third to take the whole rate, and
    the pickup's slowest hundredth was those moments: a child whose claim from the head is due
    while a sibling's is under way claims from its cursors, and walks after the answer."""
    shared = HeadWalks()
    a = ClaimCursors(refresh=10.0, shared=shared, walker=101)
    b = ClaimCursors(refresh=10.0, shared=shared, walker=102)
    for cursors, at in ((a, 0.0), (b, 0.5)):  # walks of 250 ms: next ones due 5 s after
        assert cursors.for_claim(["q"], at) == []
        cursors.observe([job(int(at * 10) + 1)], at, took=0.25, whole=True)
    assert a.for_claim(["q"], 5.0) == []  # a's walk is under way ...
    assert shared.sibling_until(102, 5.0) == 5.0 + 4 * 0.25  # believed within four walks
    assert b.for_claim(["q"], 5.5) != []  # ... so b's, due at 5.5, waits: from its cursors
    b.observe([job(20)], 5.5, took=0.002)
    assert b.due_in(5.6) == 6.0 - 5.6  # an idle b would wake when a's is believed over
    a.observe([job(21)], 5.0, took=0.25, whole=True)
    assert shared.sibling_until(102, 5.6) is None
    assert b.for_claim(["q"], 5.6) == []  # a's answer came: b's turn
    assert a.for_claim(["q"], 5.7) != []
    b.observe([job(22)], 5.6, took=0.25, whole=True)
    assert shared.sibling_until(101, 5.9) is None


def _siblings(refresh: float, walk: float) -> tuple[HeadWalks, ClaimCursors, ClaimCursors]:
    """Two children of a pool (pids 101 and 102), each after its first claim from the head,
    which walked ``walk`` seconds."""
    shared = HeadWalks()
    a = ClaimCursors(refresh=refresh, shared=shared, walker=101)
    b = ClaimCursors(refresh=refresh, shared=shared, walker=102)
    for cursors in (a, b):
        cursors.for_claim(["q"], 0.0)
        cursors.observe([job(1)], 0.0, took=walk, whole=True)
    return shared, a, b


def test_a_walker_that_never_answers_is_waited_for_only_as_long_as_it_said() -> None:
    shared, a, b = _siblings(refresh=10.0, walk=0.25)
    assert a.for_claim(["q"], 5.0) == []  # a's claim from the head is cut short (no answer),
    assert a.for_claim(["q"], 5.1) == []  # made again (its own mark holds it not back),
    assert b.for_claim(["q"], 5.5) != []  # and a dies in it
    b.observe([job(2)], 5.5, took=0.002)
    assert b.for_claim(["q"], 6.1) == []  # a said 6.1 at the latest
    assert shared.sibling_until(101, 6.1) == 6.1 + 4 * 0.25  # b's walk, announced


def test_cheap_walks_do_not_take_turns() -> None:
    """No horizon held (a walk costs what any claim costs): nothing to wait for, and an idle
    child does not wake for a sibling's walk."""
    shared, a, b = _siblings(refresh=1.0, walk=0.001)
    assert a.for_claim(["q"], 0.02) == []
    assert b.for_claim(["q"], 0.02) == []
    assert shared.sibling_until(102, 0.02) is None


def test_a_walk_a_forked_child_announces_is_seen_by_its_siblings() -> None:
    """The master maps the pool's HeadWalks before it forks the children: what one writes the
    others read (an anonymous shared mapping, not a copy)."""
    shared = HeadWalks()
    pid = os.fork()
    if pid == 0:  # the walking child
        shared.begin(os.getpid(), 123.0)
        os._exit(0)
    os.waitpid(pid, 0)
    assert shared.sibling_until(os.getpid(), 100.0) == 123.0
    assert shared.sibling_until(pid, 100.0) is None  # its own walk holds nobody back: itself
    shared.end(pid)
    assert shared.sibling_until(os.getpid(), 100.0) is None
