"""`limits:` in the YAML: rates in three units, defaults, and one exact issue per mistake."""

from __future__ import annotations

import pytest

from supervisor.config import QueueLimits, Rate, TenantLimits
from supervisor.config.limits import default_burst, limit_rows
from supervisor.queue.limits import Limits, format_rate
from tests.unit.test_config import issues, only_issue, parse

BASE = """\
handlers: {deliver: examples.pdf:render_invoice}
pools:
  hooks: {queues: {webhooks: 1, mail: 1}}
"""


def test_the_contract_example_reads_as_written() -> None:
    config = parse(
        BASE
        + "limits: {webhooks: {concurrency: 20, rate: 50/s, "
        + "per_tenant: {concurrency: 2, rate: 5/s}}}\n"
    )
    assert config.limits == {
        "webhooks": QueueLimits(
            "webhooks",
            concurrency=20,
            rate=Rate(50.0, 5, "50/s"),
            per_tenant=TenantLimits(concurrency=2, rate=Rate(5.0, 2, "5/s")),
        )
    }
    assert limit_rows(config) == [Limits("webhooks", 20, 50.0, 5, 2, 5.0, 2)]


@pytest.mark.parametrize(
    ("written", "per_second"),
    [
        ("50/s", 50.0),
        ("120/min", 2.0),
        ("90/h", 0.025),
        ("1.5/s", 1.5),
        ("30 / minute", 0.5),
    ],
)
def test_rates_in_each_unit(written: str, per_second: float) -> None:
    config = parse(BASE + f"limits: {{mail: {{rate: '{written}'}}}}\n")
    rate = config.limits["mail"].rate
    assert rate is not None and rate.per_second == pytest.approx(per_second)
    assert rate.burst == default_burst(per_second) and rate.text == written


def test_burst_defaults_to_a_tenth_of_a_second_at_least_two() -> None:
    assert [default_burst(r) for r in (0.01, 1, 10, 21, 50, 1000)] == [2, 2, 2, 3, 5, 100]
    config = parse(BASE + "limits: {mail: {rate: 10/s, burst: 7}}\n")
    assert config.limits["mail"].rate == Rate(10.0, 7, "10/s")


def test_no_limits_section_means_no_limits() -> None:
    assert parse(BASE).limits == {}


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ("{rate: 50}", "limits.mail.rate", "must be a rate like 50/s, 100/min or 10/h (a number"),
        ("{rate: 50/day}", "limits.mail.rate", "must be a rate like 50/s, 100/min or 10/h, got"),
        ("{rate: 0/s}", "limits.mail.rate", "must be more than zero"),
        ("{rate: 200000/s}", "limits.mail.rate", "must be at most 100000/s"),
        ("{rate: 1/h, burst: 0}", "limits.mail.burst", "must be a positive integer"),
        ("{burst: 3, concurrency: 2}", "limits.mail.burst", "applies to a rate"),
        ("{concurrency: 0}", "limits.mail.concurrency", "must be a positive integer"),
        ("{concurrency: two}", "limits.mail.concurrency", "must be an integer"),
        ("{concurency: 2}", "limits.mail.concurency", "unknown key; did you mean 'concurrency'?"),
        ("{}", "limits.mail", "must not be empty"),
        ("{per_tenant: {}}", "limits.mail.per_tenant", "must not be empty"),
        ("{per_tenant: {rate: 5}}", "limits.mail.per_tenant.rate", "must be a rate like"),
        ("{per_tenant: {cap: 1}}", "limits.mail.per_tenant.cap", "unknown key"),
        (
            "{concurrency: 2, per_tenant: {concurrency: 3}}",
            "limits.mail.per_tenant.concurrency",
            "(3) is above the queue's concurrency (2): no tenant could ever reach it",
        ),
        ("7", "limits.mail", "must be a mapping"),
    ],
)
def test_each_mistake_is_one_issue_at_its_key_path(body: str, path: str, message: str) -> None:
    issue = only_issue(BASE + f"limits:\n  mail: {body}\n")
    assert issue.path == path
    assert message in issue.message, issue.message
    assert issue.line == 5  # the queue's line


def test_a_queue_no_pool_serves_is_an_error_with_a_hint() -> None:
    issue = only_issue(BASE + "limits: {webhook: {concurrency: 2}}\n")
    assert issue.path == "limits.webhook"
    assert issue.message == "no pool serves this queue; did you mean 'webhooks'?"
    far = only_issue(BASE + "limits: {reports: {concurrency: 2}}\n")
    assert far.message == "no pool serves this queue; pools serve mail, webhooks"


def test_every_issue_of_the_section_is_reported_at_once() -> None:
    found = issues(BASE + "limits:\n  mail: {rate: fast}\n  webhooks: {concurrency: -1}\n")
    assert [i.path for i in found] == ["limits.mail.rate", "limits.webhooks.concurrency"]


@pytest.mark.parametrize(
    ("per_second", "shown"),
    [(50.0, "50/s"), (0.5, "30/min"), (1 / 360, "10/h"), (2.5, "2.5/s")],
)
def test_rates_are_shown_in_the_unit_that_reads_best(per_second: float, shown: str) -> None:
    assert format_rate(per_second) == shown
