"""Periodic schedules as pure logic: validation with key paths, ticks (cron in a time zone
across daylight-saving changes, fixed intervals), and what a missed tick does."""

from __future__ import annotations

import itertools
import json
import os
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from supervisor.config import ConfigError, ScheduleConfig, parse_config
from supervisor.config.ticks import latest_tick, next_ticks, ticks_after
from supervisor.services.scheduler import should_run
from tests.commands import run_cli

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")

BASE = """
handlers:
  sync_accounts: tests.handlers:noop
pools:
  main: {queues: {default: 1}}
"""


def _config(schedules: str) -> dict[str, ScheduleConfig]:
    text = BASE + "schedules:\n" + textwrap.indent(textwrap.dedent(schedules), "  ")
    return parse_config(text, source="q.yaml").schedules


def _issues(schedules: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _config(schedules)
    return [f"{i.path}: {i.message}" for i in caught.value.issues]


def test_the_issue_s_example_is_read_as_written() -> None:
    (nightly,) = _config("""
        nightly_sync:
          cron: "0 3 * * *"
          kind: sync_accounts
          args: {full: true}
          queue: sync
          priority: 0
          timezone: Europe/Berlin
          missed: skip
    """).values()
    assert nightly == ScheduleConfig(
        name="nightly_sync",
        kind="sync_accounts",
        cron="0 3 * * *",
        args={"full": True},
        queue="sync",
        timezone="Europe/Berlin",
        missed="skip",
    )
    (every,) = _config("tick: {every: 30s, kind: sync_accounts, missed: run_once}").values()
    assert (every.every, every.cron, every.queue, every.missed) == (
        30.0,
        None,
        "default",
        "run_once",
    )


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ('s: {cron: "61 * * * *", kind: sync_accounts}', "schedules.s.cron: is not a valid cron"),
        ('s: {cron: "* * * * * *", kind: sync_accounts}', "schedules.s.cron: must have five"),
        ('s: {cron: "0 3 * * *"}', "schedules.s.kind: is required"),
        ('s: {cron: "0 3 * * *", kind: sync_acounts}', "did you mean 'sync_accounts'"),
        ("s: {kind: sync_accounts}", "schedules.s: needs exactly one of cron"),
        ('s: {every: 5s, cron: "* * * * *", kind: sync_accounts}', "needs exactly one of cron"),
        ("s: {every: 500ms, kind: sync_accounts}", "schedules.s.every: must be at least 1s"),
        ("s: {every: soon, kind: sync_accounts}", "schedules.s.every:"),
        ('s: {cron: "0 3 * * *", kind: sync_accounts, timezone: Mars/Olympus}', "time zone"),
        ("s: {every: 5s, kind: sync_accounts, timezone: UTC}", "applies to cron only"),
        ("s: {every: 5s, kind: sync_accounts, missed: always}", "schedules.s.missed: must be"),
        ("s: {every: 5s, kind: sync_accounts, args: [1]}", "schedules.s.args: must be a mapping"),
        ("s: {every: 5s, kind: sync_accounts, priority: 40000}", "schedules.s.priority:"),
        ("s: {every: 5s, kind: sync_accounts, queue: ''}", "schedules.s.queue: must not be empty"),
        ("s: {every: 5s, kind: sync_accounts, evry: 1}", "schedules.s.evry: unknown key"),
        ('"a b": {every: 5s, kind: sync_accounts}', "schedule name must be"),
    ],
)
def test_bad_schedules_are_refused_with_their_key_path(schedule: str, expected: str) -> None:
    issues = _issues(schedule)
    assert any(expected in issue for issue in issues), issues


def test_check_exits_2_on_a_bad_cron_expression(tmp_path: Path) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(BASE + 'schedules:\n  nightly: {cron: "0 25 * * *", kind: sync_accounts}\n')
    done = run_cli(config, "check", env=os.environ)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "schedules.nightly.cron: is not a valid cron expression" in done.stderr


def test_the_schedules_verb_lists_the_next_five_ticks(tmp_path: Path) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(
        BASE + "schedules:\n  nightly: {cron: '0 3 * * *', kind: sync_accounts, "
        "timezone: Europe/Berlin}\n  often: {every: 90s, kind: sync_accounts}\n"
    )
    done = run_cli(config, "schedules", "--json", env=os.environ)
    assert done.returncode == 0, done.stderr
    listed = {s["name"]: s for s in json.loads(done.stdout)}
    nightly = [datetime.fromisoformat(t) for t in listed["nightly"]["next_ticks"]]
    assert len(nightly) == 5
    assert all(t.astimezone(BERLIN).hour == 3 for t in nightly)
    assert all(b - a >= timedelta(hours=23) for a, b in itertools.pairwise(nightly))
    often = [datetime.fromisoformat(t) for t in listed["often"]["next_ticks"]]
    assert [int(t.timestamp()) % 90 for t in often] == [0] * 5
    text = run_cli(config, "schedules", env=os.environ).stdout
    assert "nightly: sync_accounts on queue default, cron 0 3 * * * (Europe/Berlin)" in text


def _cron(expression: str, zone: str = "Europe/Berlin") -> ScheduleConfig:
    return ScheduleConfig(name="s", kind="k", cron=expression, timezone=zone)


def test_cron_in_a_time_zone_across_daylight_saving_changes() -> None:
    nightly = _cron("0 3 * * *")
    # Spring forward (2026-03-29 02:00 -> 03:00 in Berlin): 03:00 local stays 03:00 local,
    # one hour earlier in UTC than the day before.
    spring = next_ticks(nightly, datetime(2026, 3, 27, 12, tzinfo=UTC), 3)
    assert [t.astimezone(BERLIN).hour for t in spring] == [3, 3, 3]
    assert [t.hour for t in spring] == [2, 1, 1]
    # A tick inside the skipped hour runs once, at the first minute after it.
    skipped = next_ticks(_cron("30 2 * * *"), datetime(2026, 3, 28, 12, tzinfo=UTC), 2)
    assert skipped[0].astimezone(BERLIN).strftime("%m-%d %H:%M") == "03-29 03:00"
    assert skipped[1].astimezone(BERLIN).strftime("%m-%d %H:%M") == "03-30 02:30"
    # Fall back (2026-10-25 03:00 -> 02:00): 02:30 happens twice locally but runs once.
    twice = next_ticks(_cron("30 2 * * *"), datetime(2026, 10, 24, 12, tzinfo=UTC), 3)
    assert [t.strftime("%m-%d %H:%M") for t in twice] == [
        "10-25 00:30",
        "10-26 01:30",
        "10-27 01:30",
    ]


def test_interval_ticks_fall_on_multiples_of_the_interval() -> None:
    every = ScheduleConfig(name="s", kind="k", every=2.0)
    at = datetime(2026, 12, 1, 10, 0, 5, 300000, tzinfo=UTC)
    assert latest_tick(every, at) == datetime(2026, 12, 1, 10, 0, 4, tzinfo=UTC)
    assert next_ticks(every, at, 2) == [
        datetime(2026, 12, 1, 10, 0, 6, tzinfo=UTC),
        datetime(2026, 12, 1, 10, 0, 8, tzinfo=UTC),
    ]


def test_the_latest_tick_includes_the_present_moment() -> None:
    nightly = _cron("0 3 * * *", "UTC")
    three = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    assert latest_tick(nightly, three) == three
    assert latest_tick(nightly, three - timedelta(microseconds=1)) == three - timedelta(days=1)
    assert latest_tick(nightly, three + timedelta(hours=5)) == three


def test_missed_ticks_skip_or_run_once() -> None:
    three = datetime(2026, 12, 1, 3, 0, tzinfo=UTC)
    yesterday = three - timedelta(days=1)
    for missed, runs in (("skip", False), ("run_once", True)):
        nightly = ScheduleConfig(name="s", kind="k", cron="0 3 * * *", missed=missed)
        # On time: the tick runs whatever `missed` says.
        assert should_run(nightly, yesterday, three, three + timedelta(seconds=1))
        # Two hours late (no supervisor ran at 03:00): only run_once runs it.
        assert should_run(nightly, yesterday, three, three + timedelta(hours=2)) is runs
        # Days missed, found late: one job at most, and only with run_once.
        assert (
            should_run(nightly, yesterday - timedelta(days=3), three, three + timedelta(hours=2))
            is runs
        )
    # Earlier ticks missed but the latest on time: the latest runs either way.
    every = ScheduleConfig(name="s", kind="k", every=2.0, missed="skip")
    now = datetime(2026, 12, 1, 3, 0, 10, 500000, tzinfo=UTC)
    assert should_run(every, now - timedelta(seconds=30.5), latest_tick(every, now), now)


NEW_YORK = ZoneInfo("America/New_York")


def _local(ticks: list[datetime], zone: ZoneInfo) -> list[str]:
    return [t.astimezone(zone).strftime("%H:%M%z") for t in ticks]


def _night(schedule: ScheduleConfig, start: datetime, hours: int) -> list[datetime]:
    end = start + timedelta(hours=hours)
    return list(itertools.takewhile(lambda t: t < end, ticks_after(schedule, start)))


def test_a_named_hour_repeated_in_autumn_ticks_once_and_a_clock_hour_twice() -> None:
    # 2026-10-25 in Berlin: 03:00 CEST -> 02:00 CET; the hour from 02:00 happens twice.
    evening = datetime(2026, 10, 24, 22, tzinfo=UTC)
    assert _local(_night(_cron("*/20 2 * * *"), evening, 6), BERLIN) == [
        "02:00+0200",
        "02:20+0200",
        "02:40+0200",
    ]
    # 2026-11-01 in New York: 02:00 EDT -> 01:00 EST.
    ny_evening = datetime(2026, 11, 1, 2, tzinfo=UTC)
    assert _local(_night(_cron("*/30 1 * * *", "America/New_York"), ny_evening, 8), NEW_YORK) == [
        "01:00-0400",
        "01:30-0400",
    ]
    # The hour field a wildcard: the clock's every half hour of real time, both passes.
    assert _local(
        _night(_cron("0,30 * * * *"), datetime(2026, 10, 24, 22, 59, tzinfo=UTC), 3), BERLIN
    ) == [
        "01:00+0200",
        "01:30+0200",
        "02:00+0200",
        "02:30+0200",
        "02:00+0100",
        "02:30+0100",
    ]


def test_ticks_of_the_hour_skipped_in_spring_run_once_at_the_first_minute_after_it() -> None:
    # 2026-03-29 in Berlin: 02:00 CET -> 03:00 CEST; no 02:xx that night.
    evening = datetime(2026, 3, 28, 22, tzinfo=UTC)
    assert _local(_night(_cron("*/20 2 * * *"), evening, 6), BERLIN) == ["03:00+0200"]
    # 03:00 itself a tick too: still one.
    assert _local(_night(_cron("0,30 2,3 * * *"), evening, 6), BERLIN) == [
        "03:00+0200",
        "03:30+0200",
    ]
    assert _local(
        _night(_cron("0,30 * * * *"), datetime(2026, 3, 28, 23, 59, tzinfo=UTC), 2), BERLIN
    ) == [
        "01:00+0100",
        "01:30+0100",
        "03:00+0200",
        "03:30+0200",
    ]


EXPRESSIONS = (
    "*/20 2 * * *",
    "0,30 * * * *",
    "30 1 * * *",
    "*/7 * * * *",
    "0 3 * * 0",
    "15 */2 * * *",
)
NIGHTS = (
    ("Europe/Berlin", datetime(2026, 3, 28, 21, tzinfo=UTC)),
    ("Europe/Berlin", datetime(2026, 10, 24, 21, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 3, 8, 3, tzinfo=UTC)),
    ("America/New_York", datetime(2026, 11, 1, 2, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2026, 4, 4, 12, tzinfo=UTC)),  # a half-hour change
)


@pytest.mark.parametrize("expression", EXPRESSIONS)
@pytest.mark.parametrize(("zone", "evening"), NIGHTS)
def test_the_latest_and_next_ticks_agree_with_one_forward_iteration(
    expression: str, zone: str, evening: datetime
) -> None:
    schedule = _cron(expression, zone)
    ticks: list[datetime] = []
    beyond = 0
    for tick in ticks_after(schedule, evening - timedelta(days=8)):
        ticks.append(tick)
        beyond += tick > evening + timedelta(days=1)
        if beyond == 3:
            break
    assert ticks == sorted(set(ticks))
    for minutes in range(0, 24 * 60, 11):
        at = evening + timedelta(minutes=minutes, seconds=minutes % 60)
        before = [t for t in ticks if t <= at]
        after = [t for t in ticks if t > at]
        assert latest_tick(schedule, at) == before[-1], at
        assert next_ticks(schedule, at, 3) == after[:3], at


def test_purge_at_keeps_its_wall_clock_time_across_daylight_saving_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from datetime import time as dt_time

    from supervisor.services.purge import next_daily

    def local(at: str, evening: datetime, zone: ZoneInfo | None) -> str:
        moment = next_daily(dt_time.fromisoformat(at), evening.timestamp(), zone)
        return datetime.fromtimestamp(moment, BERLIN).strftime("%m-%d %H:%M%z")

    autumn = datetime(2026, 10, 24, 20, tzinfo=BERLIN)  # 20:00 CEST, the eve of the change
    spring = datetime(2026, 3, 28, 20, tzinfo=BERLIN)
    monkeypatch.setenv("TZ", "Europe/Berlin")  # the host's own zone, as most run the purge
    import time

    time.tzset()
    try:
        for zone in (BERLIN, None):
            assert local("03:00", autumn, zone) == "10-25 03:00+0100"  # not 02:00 CET
            assert local("03:00", spring, zone) == "03-29 03:00+0200"  # not 04:00 CEST
            assert local("02:30", spring, zone) == "03-29 03:00+0200"  # the gap: just after it
            assert local("02:30", autumn, zone) == "10-25 02:30+0200"  # the first pass
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
