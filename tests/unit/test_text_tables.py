"""Plain-text output helpers: ages, safe names, aligned tables, id listings; and ARGS_JSON."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from supervisor.cli.dlq import telling_line
from supervisor.cli.main import UsageError
from supervisor.cli.operator import parse_json_object
from supervisor.views.text import age, iso, listing, safe, safe_block, table, width


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0.42, "0.4s"),
        (1, "1s"),
        (59.6, "1m"),
        (432, "7m12s"),
        (3600 * 3 + 312, "3h5m"),
        (86400 * 2 + 3600 * 4 + 61, "2d4h"),
    ],
)
def test_age_keeps_the_two_largest_units(seconds: float | None, text: str) -> None:
    assert age(seconds) == text


def test_safe_escapes_control_characters_and_keeps_every_script() -> None:
    assert safe("队列 ✓ café") == "队列 ✓ café"
    assert safe("a\x1b[2Jb\x07") == "a\\x1b[2Jb\\x07"
    assert safe(None) == "-"
    assert safe_block("Traceback:\n\tline\x1b]0;x\x07") == "Traceback:\n    line\\x1b]0;x\\x07"


def test_table_aligns_wide_characters_by_terminal_columns() -> None:
    lines = table(["NAME", "N"], [["队列", 1], ["ab", 20]], right=(1,))
    assert lines == ["NAME   N", "队列   1", "ab    20"]
    assert {width(line) for line in lines} == {8}


def test_listing_stops_after_20() -> None:
    assert listing([4, 7, 9]) == "4, 7, 9"
    ids = list(range(1, 26))
    assert listing(ids) == ", ".join(map(str, range(1, 21))) + " and 5 more"


def test_iso_is_utc() -> None:
    moment = datetime(2024, 5, 1, 5, 0, tzinfo=timezone(timedelta(hours=2)))
    assert iso(moment) == "2024-05-01T03:00:00+00:00"


def test_telling_line_is_the_exception_of_a_traceback() -> None:
    tb = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 't'\n"
    assert telling_line(tb) == "KeyError: 't'"
    assert telling_line(tb + " (attempt 3 of 3: no attempts left)") == (
        "KeyError: 't' (attempt 3 of 3: no attempts left)"
    )
    assert telling_line(None) is None and telling_line("\n \n") is None


def test_args_json_must_be_an_object_without_duplicates_or_nan() -> None:
    assert parse_json_object(None) == {}
    assert parse_json_object('{"a": [1, {"b": null}]}') == {"a": [1, {"b": None}]}
    for text, problem in [
        ("", "Expecting value at line 1, column 1 (character 0)"),
        ('{"a": 1}\n{"b"', "Extra data at line 2, column 1 (character 9)"),
        ('"text"', "not a string"),
        ("null", "not null"),
        ('{"a": {"b": 1, "b": 2}}', "key 'b' appears twice"),
        ('{"a": -Infinity}', "-Infinity is not JSON"),
    ]:
        with pytest.raises(UsageError, match="ARGS_JSON") as caught:
            parse_json_object(text)
        assert problem in str(caught.value)
