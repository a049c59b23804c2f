"""Jobs due later wait as 'scheduled', outside the claim index, until the stager makes them
available; periodic schedules enqueue one job per tick. Real PostgreSQL throughout."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

from supervisor import NewJob, claim, enqueue, enqueue_many
from supervisor.config import parse_config
from supervisor.observability.view import MasterCounters
from supervisor.queue import scheduled
from supervisor.queue.jobs import claim_params
from supervisor.queue.maintenance import queue_stats
from supervisor.queue.migrations import available, migrate
from supervisor.queue.queries import query
from supervisor.services.scheduler import GRACE, Scheduler, unique_key
from supervisor.sessions.database import MasterDatabase
from tests.master_session import connected

UTC = timezone.utc


def _states(conn: psycopg.Connection[Any], ids: list[int]) -> list[str]:
    rows = dict(conn.execute("SELECT id, state FROM pgq.jobs WHERE id = ANY(%s)", (ids,)))
    return [rows[i] for i in ids]


def _due_now(conn: psycopg.Connection[Any], ids: list[int]) -> None:
    """Bring scheduled jobs' run_at to the present, as time passing would."""
    conn.execute("UPDATE pgq.jobs SET run_at = now() WHERE id = ANY(%s)", (ids,))


def test_a_job_due_later_waits_as_scheduled_and_is_not_claimed_early(
    conn: psycopg.Connection[Any],
) -> None:
    later = enqueue(conn, "k", delay=3600)
    at = enqueue(conn, "k", run_at=datetime.now(UTC) + timedelta(hours=1))
    now = enqueue(conn, "k")
    bulk = enqueue_many(conn, [NewJob("k", delay=60), NewJob("k"), NewJob("k", delay=0)])
    assert _states(conn, [later, at, now, *bulk]) == [
        "scheduled",
        "scheduled",
        "available",
        "scheduled",
        "available",
        "available",
    ]
    assert scheduled.stage_due(conn) == []  # nothing is due yet
    claimed = claim(conn, "default", worker="w", limit=10)
    assert sorted(j.id for j in claimed) == sorted([now, bulk[1], bulk[2]])
    _due_now(conn, [later])
    assert scheduled.stage_due(conn) == [scheduled.Staged("default", 1)]
    assert [j.id for j in claim(conn, "default", worker="w", limit=10)] == [later]


def test_the_master_learns_the_earliest_run_at_from_the_index(
    conn: psycopg.Connection[Any],
) -> None:
    assert scheduled.seconds_to_next(conn) is None
    enqueue(conn, "k", delay=3600)
    enqueue(conn, "k", delay=30)
    assert 25 < (scheduled.seconds_to_next(conn) or 0) <= 30
    plan = "\n".join(
        row[0] for row in conn.execute("EXPLAIN " + query("next_scheduled")).fetchall()
    )
    assert "jobs_scheduled" in plan, plan


def test_staging_notifies_each_queue_and_scheduling_wakes_the_stagers(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq_jobs; LISTEN pgq_scheduled")
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = enqueue_many(
                conn,
                [NewJob("k", queue="a", delay=5), NewJob("k", queue="b", delay=5)],
            )
            enqueue(conn, "k", queue="c", delay=5)
            _due_now(conn, ids)
            staged = scheduled.stage_due(conn)
        assert sorted(staged, key=lambda s: s.queue) == [
            scheduled.Staged("a", 1),
            scheduled.Staged("b", 1),
        ]
        got = [(n.channel, n.payload) for n in listener.notifies(timeout=1, stop_after=4)]
    assert got.count(("pgq_scheduled", "")) == 2  # one per enqueue transaction
    assert sorted(p for c, p in got if c == "pgq_jobs") == ["a", "b"]


@pytest.mark.parametrize("path", ["enqueue", "enqueue_many", "pgq.enqueue"])
def test_a_job_for_later_wakes_the_stagers_only_when_due_before_their_next_look(
    dsn: str, path: str
) -> None:
    """A NOTIFY takes a database-wide lock at commit, so one per enqueue of a job for later
    serialized the producers' commits; the stagers look at least once a second anyway, so only
    a job due within 10 s (pgq.wakes_stagers) is worth waking them for."""

    def enqueue_by(conn: psycopg.Connection[Any], delay: float) -> None:
        if path == "enqueue":
            enqueue(conn, "k", delay=delay)
        elif path == "enqueue_many":
            enqueue_many(conn, [NewJob("k", delay=delay), NewJob("k", delay=delay + 1)])
        else:
            conn.execute(
                "SELECT pgq.enqueue('k', run_at => now() + make_interval(secs => %s))", (delay,)
            )

    with psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute("LISTEN pgq_scheduled")
        with psycopg.connect(dsn, autocommit=True) as conn:
            for delay in (60.0, 11.0, 5.0):  # one transaction each
                enqueue_by(conn, delay)
        heard = [n.channel for n in listener.notifies(timeout=1, stop_after=3)]
        with psycopg.connect(dsn, autocommit=True) as conn:
            waiting = conn.execute("SELECT count(*) FROM pgq.jobs WHERE state = 'scheduled'")
            assert waiting.fetchone()[0] == (6 if path == "enqueue_many" else 3)
    assert heard == ["pgq_scheduled"]  # the job due in 5 s alone


def test_several_stagers_move_each_job_once(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many(conn, [NewJob("k", delay=60) for _ in range(3000)])
        _due_now(conn, ids)
    counts: list[int] = []

    def stage() -> None:
        with psycopg.connect(dsn, autocommit=True) as own:
            total = 0
            while moved := scheduled.stage_due(own, limit=100):
                total += sum(m.jobs for m in moved)
            counts.append(total)

    threads = [threading.Thread(target=stage) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(counts) == 3000
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert _states(conn, ids) == ["available"] * 3000


def _claim_buffers(conn: psycopg.Connection[Any]) -> int:
    """Pages the claim reads (EXPLAIN ANALYZE, BUFFERS), rolled back."""
    with conn.transaction(force_rollback=True):
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query("claim"),
            claim_params("default", worker="w", limit=10, lease_seconds=60),
        ).fetchone()[0]
    top = plan[0]["Plan"]
    return int(top["Shared Hit Blocks"]) + int(top["Shared Read Blocks"])


def test_a_claim_costs_the_same_with_100000_future_jobs_of_higher_priority(
    conn: psycopg.Connection[Any],
) -> None:
    enqueue_many(conn, [NewJob("k") for _ in range(2000)])
    conn.execute("VACUUM ANALYZE pgq.jobs")
    without = _claim_buffers(conn)
    future = [NewJob("k", priority=5, delay=3600) for _ in range(10_000)]
    for _ in range(10):
        enqueue_many(conn, future)
    conn.execute("VACUUM ANALYZE pgq.jobs")
    with_future = _claim_buffers(conn)
    # Before the scheduled state, the claim walked every future entry of higher priority in
    # jobs_claim first: hundreds of pages here, against a handful.
    assert with_future <= without + 5, (without, with_future)


def test_a_held_unique_key_covers_scheduled_jobs_and_replay_respects_it(
    conn: psycopg.Connection[Any],
) -> None:
    first = enqueue(conn, "k", delay=600, unique_key="invoice-7")
    assert enqueue(conn, "k", unique_key="invoice-7") == first
    assert enqueue_many(conn, [NewJob("k", unique_key="invoice-7")]) == [first]
    dead = enqueue(conn, "k", unique_key="invoice-8")
    conn.execute(
        "UPDATE pgq.jobs SET state = 'discarded', finished_at = now(), unique_key = 'invoice-7' "
        "WHERE id = %s",
        (dead,),
    )
    replayed = conn.execute(
        query("replay"),
        {"ids": [dead], "kind": None, "queue": None, "finished_before": None},
    ).fetchall()
    assert [r[3] for r in replayed] == [False]  # stays dead: a scheduled job holds its key


def test_status_counts_scheduled_jobs(conn: psycopg.Connection[Any]) -> None:
    enqueue_many(conn, [NewJob("k", delay=600), NewJob("k", delay=600), NewJob("k")])
    (stats,) = queue_stats(conn)
    assert (stats.available, stats.scheduled) == (1, 2)


def test_the_migration_moves_existing_future_jobs_out_of_the_claim_index(empty_dsn: str) -> None:
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE SCHEMA pgq; CREATE TABLE pgq.schema_migrations (version integer PRIMARY KEY, "
            "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for m in available():
            if m.version < 4:
                conn.execute(m.sql)
                conn.execute(
                    "INSERT INTO pgq.schema_migrations VALUES (%s, %s)", (m.version, m.name)
                )
        conn.execute(
            "INSERT INTO pgq.jobs (kind, run_at, unique_key) VALUES "
            "('k', now() + interval '1 hour', 'a'), ('k', now() - interval '1 second', 'b')"
        )
        assert migrate(conn)[0].version == 4  # and any later ones
        rows = conn.execute("SELECT unique_key, state FROM pgq.jobs ORDER BY unique_key").fetchall()
    assert rows == [("a", "scheduled"), ("b", "available")]


class _Host:
    """The part of a master the scheduler uses: a session, the config, the counters."""

    def __init__(self, dsn: str, yaml_text: str) -> None:
        self.db = connected(MasterDatabase(dsn, name="test", connect_timeout=5.0))
        self.config = parse_config(yaml_text, source="q.yaml")
        self.counters = MasterCounters()
        self.woken: list[str] = []

    def wake_queue(self, queue: str) -> None:
        self.woken.append(queue)


SCHEDULES = """
handlers: {sync_accounts: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
schedules:
  nightly: {cron: "0 3 * * *", kind: sync_accounts, args: {full: true}, queue: sync, missed: %s}
"""


def _scheduled_jobs(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT run_at, unique_key, args, queue FROM pgq.jobs ORDER BY run_at"
        ).fetchall()


def test_a_tick_is_enqueued_once_however_many_supervisors_run(dsn: str) -> None:
    hosts = [_Host(dsn, SCHEDULES % "skip") for _ in range(3)]
    schedulers = [Scheduler(h) for h in hosts]  # type: ignore[arg-type]
    three = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    for s in schedulers:
        s.run_at(three - timedelta(hours=1))  # first seen: nothing is owed yet
    assert _scheduled_jobs(dsn) == []
    for s in schedulers:
        s.run_at(three + timedelta(seconds=1))
    for s in [Scheduler(h) for h in hosts]:  # restarted masters, knowing nothing
        s.run_at(three + timedelta(seconds=2))  # type: ignore[arg-type]
    ((run_at, key, args, queue),) = _scheduled_jobs(dsn)
    assert (run_at, key, args, queue) == (
        three,
        unique_key("nightly", three),
        {"full": True},
        "sync",
    )
    assert sum(h.counters.schedule_jobs for h in hosts) == 1
    assert [q for h in hosts for q in h.woken] == ["sync"]  # the enqueuer woke its children
    for h in hosts:
        h.db.close()


def test_ticks_missed_while_no_supervisor_ran_are_skipped_or_run_once(dsn: str) -> None:
    three = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    for missed, expected in (("skip", []), ("run_once", [three])):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgq.jobs; DELETE FROM pgq.schedules")
        host = _Host(dsn, SCHEDULES % missed)
        Scheduler(host).run_at(three - timedelta(days=3))  # ran three days ago, then stopped
        Scheduler(host).run_at(three + timedelta(hours=2))  # back two hours after the tick
        assert [row[0] for row in _scheduled_jobs(dsn)] == expected, missed
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert scheduled.last_tick(conn, "nightly") == three  # missed ticks stay missed
        host.db.close()


def test_status_shows_each_schedule_s_last_and_next_tick(dsn: str) -> None:
    from supervisor.views import status as status_view

    host = _Host(dsn, SCHEDULES % "skip")
    three = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    Scheduler(host).run_at(three - timedelta(hours=1))  # type: ignore[arg-type]
    Scheduler(host).run_at(three + timedelta(seconds=1))  # type: ignore[arg-type]
    host.db.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        (job_id,) = conn.execute("SELECT id FROM pgq.jobs").fetchone()
        status = status_view.gather(conn, host.config, "test")
    (row,) = status.schedules
    assert (row.last_tick, row.last_job_id) == (three, job_id)
    assert row.next_tick > datetime.now(UTC)
    text = "\n".join(status_view.render(status))
    assert "SCHEDULES" in text and "cron 0 3 * * * (UTC)" in text and str(job_id) in text
    (shown,) = status_view.to_json(status)["schedules"]
    assert (shown["name"], shown["last_job_id"]) == ("nightly", job_id)


def test_the_stager_sleeps_until_the_next_run_at_and_does_not_spin_on_a_locked_job(
    dsn: str,
) -> None:
    from supervisor.services.stager import LOCKED_WAIT, LOOK_EVERY, Stager

    host = _Host(dsn, SCHEDULES % "skip")
    stager = Stager(host)  # type: ignore[arg-type]
    stager.run_once()
    assert stager.wait == LOOK_EVERY  # nothing scheduled: the fallback look
    with psycopg.connect(dsn, autocommit=True) as conn:
        later = enqueue(conn, "k", queue="q", delay=30)
        stager.run_once()
        assert 29 < stager.wait <= 30.001
        conn.execute(
            "UPDATE pgq.jobs SET run_at = now() - interval '1 second' WHERE id = %s", (later,)
        )
        with psycopg.connect(dsn) as holder:  # a transaction holding the row
            holder.execute("SELECT 1 FROM pgq.jobs WHERE id = %s FOR UPDATE", (later,))
            stager.run_once()
            assert (stager.wait, host.woken) == (LOCKED_WAIT, [])
        stager.run_once()
        assert host.woken == ["q"] and host.counters.staged == 1
        assert _states(conn, [later]) == ["available"]
    host.db.close()


def test_a_schedule_row_held_by_a_frozen_supervisor_does_not_hang_the_master(dsn: str) -> None:
    host = _Host(dsn, SCHEDULES % "skip")
    three = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    Scheduler(host).run_at(three - timedelta(hours=1))  # type: ignore[arg-type]
    scheduler = Scheduler(host)  # type: ignore[arg-type]
    with psycopg.connect(dsn) as frozen:  # mid-tick, never committing
        frozen.execute("SELECT 1 FROM pgq.schedules WHERE name = 'nightly' FOR UPDATE")
        started = time.monotonic()
        scheduler.run_at(three + timedelta(seconds=1))
        assert time.monotonic() - started < 5  # the lock timeout, not the holder, decides
        assert scheduler.unsettled and _scheduled_jobs(dsn) == []
    scheduler.run_at(three + timedelta(seconds=2))  # the holder went away: the tick is owed
    assert [row[0] for row in _scheduled_jobs(dsn)] == [three]
    assert not scheduler.unsettled
    host.db.close()


NIGHT = """
handlers: {sync_accounts: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
schedules:
  night: {cron: "%s", timezone: %s, kind: sync_accounts, missed: %s}
"""


@pytest.mark.parametrize(
    ("cron", "zone", "evening", "expected"),
    [
        # Autumn: the hour from 02:00 (Berlin) or 01:00 (New York) happens twice.
        (
            "*/20 2 * * *",
            "Europe/Berlin",
            (2026, 10, 24, 23),
            ["02:00+0200", "02:20+0200", "02:40+0200"],
        ),
        ("*/30 1 * * *", "America/New_York", (2026, 11, 1, 3), ["01:00-0400", "01:30-0400"]),
        (
            "0,30 * * * *",
            "Europe/Berlin",
            (2026, 10, 24, 23, 45),
            [
                "02:00+0200",
                "02:30+0200",
                "02:00+0100",
                "02:30+0100",
                "03:00+0100",
                "03:30+0100",
                "04:00+0100",
                "04:30+0100",
                "05:00+0100",
                "05:30+0100",
            ],
        ),
        # Spring: no 02:xx at all that night in Berlin; its ticks run once, at 03:00.
        ("*/20 2 * * *", "Europe/Berlin", (2026, 3, 28, 22), ["03:00+0200"]),
    ],
)
def test_a_daylight_saving_night_enqueues_each_tick_once_and_misses_none(
    dsn: str,
    caplog: pytest.LogCaptureFixture,
    cron: str,
    zone: str,
    evening: tuple[int, ...],
    expected: list[str],
) -> None:
    start = datetime(*evening, tzinfo=UTC)
    local = ZoneInfo(zone)
    for missed in ("skip", "run_once"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DELETE FROM pgq.jobs; DELETE FROM pgq.schedules")
        host = _Host(dsn, NIGHT % (cron, zone, missed))
        caplog.clear()
        for step in range(5 * 3600 // 13):  # five hours, a look every 13 s, restarts
            if step % 70 == 0:
                scheduler = Scheduler(host)  # type: ignore[arg-type]
            scheduler.run_at(start + timedelta(seconds=13 * step))
        run_ats = [row[0] for row in _scheduled_jobs(dsn)]
        assert [t.astimezone(local).strftime("%H:%M%z") for t in run_ats] == expected, missed
        assert "missed" not in caplog.text, missed
        host.db.close()


def test_a_tick_held_up_by_a_frozen_supervisor_is_late_not_missed(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    host = _Host(dsn, SCHEDULES % "skip")
    three = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    Scheduler(host).run_at(three - timedelta(hours=1))  # type: ignore[arg-type]
    scheduler = Scheduler(host)  # type: ignore[arg-type]
    with psycopg.connect(dsn) as frozen:  # took the row at 03:00, then froze
        frozen.execute("SELECT 1 FROM pgq.schedules WHERE name = 'nightly' FOR UPDATE")
        scheduler.run_at(three + timedelta(seconds=1))  # on time, held up
        scheduler.run_at(three + timedelta(minutes=4))
        assert scheduler.unsettled and _scheduled_jobs(dsn) == []
    # Ten minutes on, the frozen one's session is gone: its tick was late, never missed.
    scheduler.run_at(three + timedelta(minutes=10))
    assert [row[0] for row in _scheduled_jobs(dsn)] == [three]
    assert "missed" not in caplog.text
    host.db.close()


EVERY_TWO_SECONDS = """
handlers: {sync_accounts: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
schedules:
  often: {every: 2s, kind: sync_accounts, missed: %s}
"""


@pytest.mark.parametrize("missed", ["skip", "run_once"])
def test_ticks_a_held_up_master_slept_through_run_late_within_the_grace_period(
    dsn: str, caplog: pytest.LogCaptureFixture, missed: str
) -> None:
    host = _Host(dsn, EVERY_TWO_SECONDS % missed)
    start = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    scheduler = Scheduler(host)  # type: ignore[arg-type]
    scheduler.run_at(start)  # first seen
    scheduler.run_at(start + timedelta(seconds=2.01))  # the tick at 03:00:02, on time
    # Its loop held up for 5 s (a starved CPU): the ticks at :04 and :06 it was due at run, late.
    scheduler.run_at(start + timedelta(seconds=7.0))
    seconds = [(row[0] - start).total_seconds() for row in _scheduled_jobs(dsn)]
    assert seconds == [2.0, 4.0, 6.0]
    assert "missed" not in caplog.text
    # Held up past the grace period: the ticks older than it are missed (the policy decides
    # the latest), the ones within it run.
    scheduler.run_at(start + timedelta(seconds=6 + GRACE + 5.0))
    later = [(row[0] - start).total_seconds() for row in _scheduled_jobs(dsn)][3:]
    assert later == [float(t) for t in range(12, 72, 2)]
    host.db.close()


class _Ahead(datetime):
    """This host's clock, 35 s ahead of the database's."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        return datetime.now(tz) + timedelta(seconds=35)


EVERY_SECOND = """
handlers: {sync_accounts: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
schedules:
  often: {every: 1s, kind: sync_accounts, missed: skip}
"""


def test_a_host_whose_clock_runs_ahead_takes_no_tick_early(
    dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import supervisor.services.scheduler as scheduler_module

    on_time = _Host(dsn, EVERY_SECOND)
    Scheduler(on_time).run_once()  # type: ignore[arg-type]  # first seen
    ahead_host = _Host(dsn, EVERY_SECOND)
    ahead = Scheduler(ahead_host)  # type: ignore[arg-type]
    monkeypatch.setattr(scheduler_module, "datetime", _Ahead)
    ahead.run_once()
    with psycopg.connect(dsn, autocommit=True) as conn:
        last, now = conn.execute(
            "SELECT last_tick, clock_timestamp() FROM pgq.schedules WHERE name = 'often'"
        ).fetchone()
    assert last <= now  # no tick taken 35 s early, so none skipped for the fleet
    assert "missed" not in caplog.text
    # Its wait for the next tick is counted on the database's clock too.
    assert ahead.next_run(time.monotonic()) - time.monotonic() <= 1.1
    on_time.db.close()
    ahead_host.db.close()


def test_the_first_seen_line_names_the_tick_its_first_job_is_for(
    dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="pgq")
    host = _Host(dsn, EVERY_TWO_SECONDS % "skip")
    start = datetime(2026, 12, 1, 3, 0, 1, tzinfo=UTC)
    Scheduler(host).run_at(start)  # type: ignore[arg-type]
    line = next(r.getMessage() for r in caplog.records if "first seen" in r.getMessage())
    # Recorded at 03:00:00 (the latest tick); its first job is the next one, 03:00:02.
    assert "first seen at its tick 2026-12-01T03:00:00+00:00" in line
    assert line.endswith("its first job is for 2026-12-01T03:00:02+00:00"), line
    host.db.close()
