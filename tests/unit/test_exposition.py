"""The Prometheus text format as we write it, read back by a strict parser (tests/promtext.py)."""

from __future__ import annotations

import math

import pytest

from supervisor.observability.exposition import Family, escape_label_value, format_value, render
from tests.promtext import ExpositionError, parse


def test_label_values_and_help_are_escaped_and_read_back() -> None:
    nasty = 'a\\b"c\nd}e,f=g'
    text = render(
        [Family("pgq_x", "gauge", 'help with \\ and\nnewline and "quotes"').add(1, queue=nasty)]
    )
    assert 'queue="a\\\\b\\"c\\nd}e,f=g"' in text
    assert '# HELP pgq_x help with \\\\ and\\nnewline and "quotes"\n' in text
    exposition = parse(text)
    assert exposition.value("pgq_x", queue=nasty) == 1
    assert exposition.families["pgq_x"].help == 'help with \\ and\nnewline and "quotes"'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (42, "42"),
        (True, "1"),
        (0.25, "0.25"),
        (1e-05, "1e-05"),
        (3.0, "3.0"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_values(value: float, text: str) -> None:
    assert format_value(value) == text


def test_histogram_buckets_are_cumulative_with_sum_and_count() -> None:
    family = Family("pgq_h_seconds", "histogram", "h")
    family.add_histogram((0.1, 0.5, 1.0), [1, 2, 0, 3], 7.5, pool="p")
    text = render([family])
    assert text.splitlines()[2:] == [
        'pgq_h_seconds_bucket{pool="p",le="0.1"} 1',
        'pgq_h_seconds_bucket{pool="p",le="0.5"} 3',
        'pgq_h_seconds_bucket{pool="p",le="1.0"} 3',
        'pgq_h_seconds_bucket{pool="p",le="+Inf"} 6',
        'pgq_h_seconds_sum{pool="p"} 7.5',
        'pgq_h_seconds_count{pool="p"} 6',
    ]
    exposition = parse(text)
    assert exposition.value("pgq_h_seconds_count", pool="p") == 6


def test_a_family_without_samples_is_still_declared() -> None:
    text = render([Family("pgq_restarts_total", "counter", "none yet")])
    assert parse(text).families["pgq_restarts_total"].type == "counter"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Family("pgq_jobs", "counter", ""), "_total"),
        (lambda: Family("pgq_up_total", "gauge", ""), "_total"),
        (lambda: Family("pgq-jobs", "gauge", ""), "invalid metric name"),
        (lambda: Family("pgq_x", "summary", ""), "unknown metric type"),
        (lambda: Family("pgq_x", "gauge", "").add(1, **{"bad-label": "x"}), "label name"),
        (lambda: Family("pgq_x", "gauge", "").add(1, __name__="x"), "label name"),
        (lambda: Family("pgq_h", "histogram", "").add(1), "add_histogram"),
        (lambda: Family("pgq_h", "histogram", "").add_histogram((1.0,), [1], 0), "buckets"),
        (lambda: Family("pgq_h", "histogram", "").add_histogram((1.0,), [1, 0], 0, le="1"), "le"),
        (lambda: render([Family("pgq_x", "gauge", ""), Family("pgq_x", "gauge", "")]), "twice"),
    ],
)
def test_mistakes_are_refused_before_they_ship(make: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()  # type: ignore[operator]


def test_escape_label_value() -> None:
    assert escape_label_value('x"y') == 'x\\"y'


# The parser that judges the supervisor's output must itself be able to say no.
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pgq_x 1\n", "no TYPE"),
        ("# TYPE pgq_x gauge\npgq_x 1\npgq_x 2\n", "duplicate series"),
        ("# TYPE pgq_x gauge\n# TYPE pgq_y gauge\npgq_x 1\n", "outside its family"),
        ('# TYPE pgq_x gauge\npgq_x{a="1",a="2"} 1\n', "twice"),
        ('# TYPE pgq_x gauge\npgq_x{a="\\q"} 1\n', "bad escape"),
        ('# TYPE pgq_x gauge\npgq_x{a="1"b="2"} 1\n', "expected ','"),
        ("# TYPE pgq_x gauge\npgq_x one\n", "bad value"),
        ("# TYPE pgq_x_total counter\npgq_x_total -1\n", "negative counter"),
        ("# TYPE pgq_x gauge\npgq_x 1", "end with a newline"),
        ("# TYPE pgq_x gauge\n\npgq_x 1\n", "empty"),
        ("# TYPE pgq_x gauge\npgq_x 1\n# TYPE pgq_x gauge\n", "twice"),
        (
            "# TYPE pgq_x gauge\npgq_x 1\n# TYPE pgq_y gauge\npgq_y 1\n# HELP pgq_x again\n",
            "second HELP|split",
        ),
        (
            '# TYPE pgq_h histogram\npgq_h_bucket{le="1"} 2\npgq_h_bucket{le="+Inf"} 1\n'
            "pgq_h_sum 1\npgq_h_count 1\n",
            "not cumulative",
        ),
        ('# TYPE pgq_h histogram\npgq_h_bucket{le="1"} 1\npgq_h_sum 1\npgq_h_count 1\n', r"\+Inf"),
        (
            '# TYPE pgq_h histogram\npgq_h_bucket{le="+Inf"} 2\npgq_h_sum 1\npgq_h_count 1\n',
            "_count",
        ),
        ('# TYPE pgq_h histogram\npgq_h_bucket{le="+Inf"} 1\npgq_h_count 1\n', "_sum"),
        ('# TYPE pgq_x gauge\npgq_x{le="1"} 1\n', "'le'"),
    ],
)
def test_the_parser_refuses_bad_expositions(text: str, message: str) -> None:
    with pytest.raises(ExpositionError, match=message):
        parse(text)
