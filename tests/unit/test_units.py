"""Durations and sizes as written in the YAML file."""

from __future__ import annotations

import math

import pytest

from supervisor.config.units import (
    UnitError,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)

MiB = 2**20
GiB = 2**30


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (30, 30.0),
        (2.5, 2.5),
        ("500ms", 0.5),
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h", 3600.0),
        ("2d", 172800.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("1d2h3m4s5ms", 93784.005),
        ("1h 30m", 5400.0),
        (" 30 s ", 30.0),
        ("90", 90.0),
        ("1H30M", 5400.0),
        ("1m30s", 90.0),
        ("30ms", 0.03),
    ],
)
def test_parse_duration_accepts(value: object, seconds: float) -> None:
    assert parse_duration(value, "timeout") == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (-1, "must not be negative"),
        (-0.5, "must not be negative"),
        ("-5s", "must not be negative"),
        (math.nan, "must be a finite duration"),
        (math.inf, "must be a finite duration"),
        (True, "must be a number of seconds or a duration"),
        (False, "must be a number of seconds or a duration"),
        (None, "must be a number of seconds or a duration"),
        ([30], "must be a number of seconds or a duration"),
        ("", "must be a number of seconds or a duration"),
        ("s", "must be a number of seconds or a duration"),
        ("abc", "must be a number of seconds or a duration"),
        ("30x", "must be a number of seconds or a duration"),
        ("1h30", "must be a number of seconds or a duration"),
        ("1e3s", "must be a number of seconds or a duration"),
        ("30m1h", "units must go from largest to smallest"),
        ("5m5m", "units must go from largest to smallest"),
        (10**400, "is far too large"),
        ("9" * 400, "is far too large"),
    ],
)
def test_parse_duration_rejects(value: object, problem: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_duration(value, "jobs.render.timeout")
    assert caught.value.path == "jobs.render.timeout"
    assert caught.value.problem.startswith(problem)
    assert str(caught.value).startswith(f"jobs.render.timeout: {problem}")


def test_unit_error_shows_the_value() -> None:
    with pytest.raises(UnitError) as caught:
        parse_duration("soon", "shutdown_timeout")
    assert caught.value.value == "soon"
    assert str(caught.value).endswith(", got 'soon'")


@pytest.mark.parametrize(
    ("value", "count"),
    [
        (0, 0),
        (1024, 1024),
        ("512", 512),
        ("512B", 512),
        ("64KiB", 64 * 1024),
        ("512MiB", 512 * MiB),
        ("1GiB", GiB),
        ("1.5GiB", 3 * GiB // 2),
        ("100MB", 100_000_000),
        ("1kb", 1000),
        ("2G", 2 * GiB),
        ("2Gi", 2 * GiB),
        ("512M", 512 * MiB),
        ("1TiB", 2**40),
        ("1TB", 10**12),
        ("512 MiB", 512 * MiB),
        ("512mib", 512 * MiB),
        ("1.1KiB", 1126),
    ],
)
def test_parse_size_accepts(value: object, count: int) -> None:
    assert parse_size(value, "pools.pdf.memory_limit") == count


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (-1, "must not be negative"),
        ("-1MiB", "must not be negative"),
        (True, "must be a number of bytes or a size"),
        (1.5, "must be a number of bytes or a size"),
        (None, "must be a number of bytes or a size"),
        ("", "must be a number of bytes or a size"),
        ("iB", "must be a number of bytes or a size"),
        ("12 parsecs", "must be a number of bytes or a size"),
        ("1MiBB", "must be a number of bytes or a size"),
        ("5iB", "must be a number of bytes or a size"),
        ("1.5", "must be a whole number of bytes"),
        ("1.5B", "must be a whole number of bytes"),
    ],
)
def test_parse_size_rejects(value: object, problem: str) -> None:
    with pytest.raises(UnitError) as caught:
        parse_size(value, "pools.pdf.memory_limit")
    assert caught.value.path == "pools.pdf.memory_limit"
    assert caught.value.problem.startswith(problem)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (0.5, "500ms"),
        (30, "30s"),
        (90, "1m30s"),
        (5400, "1h30m"),
        (14 * 86400, "14d"),
        (3.25, "3s250ms"),
        (86400 + 1, "1d1s"),
        (-30, "-30s"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0B"),
        (512, "512B"),
        (1024, "1KiB"),
        (1536, "1.5KiB"),
        (512 * MiB, "512MiB"),
        (3 * GiB // 2, "1.5GiB"),
        (100_000_000, "100MB"),
        (2**40, "1TiB"),
        (123_456_789, "~117.74MiB"),
    ],
)
def test_format_size(count: int, text: str) -> None:
    assert format_size(count) == text


@pytest.mark.parametrize("text", ["500ms", "30s", "1h30m", "14d", "1d2h3m4s5ms"])
def test_durations_round_trip(text: str) -> None:
    assert format_duration(parse_duration(text, "x")) == text


@pytest.mark.parametrize("text", ["512B", "64KiB", "512MiB", "1.5GiB", "100MB", "1TiB"])
def test_sizes_round_trip(text: str) -> None:
    assert format_size(parse_size(text, "x")) == text
