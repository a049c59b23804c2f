"""`aging:` in the YAML: a period for every queue, one per queue, 0s off, and one exact issue
at its key path per mistake."""

from __future__ import annotations

import pytest

from supervisor.config.model import AgingConfig
from tests.unit.test_config import issues, only_issue, parse

BASE = """\
handlers: {deliver: examples.pdf:render_invoice}
pools:
  hooks: {queues: {webhooks: 1, reports: 1, mail: 1}}
"""


def test_the_contract_example_reads_as_written() -> None:
    config = parse(BASE + "aging: {every: 30s, queues: {reports: 10s, mail: 0s}}\n")
    assert config.aging == AgingConfig(every=30.0, queues={"reports": 10.0, "mail": 0.0})
    # mail is turned off; the others age at their periods (what the claim is sent).
    assert config.aging.of(["webhooks", "reports", "mail"]) == {"webhooks": 30.0, "reports": 10.0}


def test_no_aging_section_means_no_aging() -> None:
    assert parse(BASE).aging.of(["webhooks", "reports"]) == {}
    assert parse(BASE + "aging: {queues: {reports: 1m}}\n").aging.of(["webhooks", "reports"]) == {
        "reports": 60.0
    }


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ("{every: -1s}", "aging.every", "must not be negative"),
        ("{every: soon}", "aging.every", ""),
        ("{every: 30d}", "aging.every", "must be at most"),
        ("{evry: 30s}", "aging.evry", "unknown key; did you mean 'every'?"),
        ("{queues: {reports: -5s}}", "aging.queues.reports", "must not be negative"),
        ("{queues: {report: 5s}}", "aging.queues.report", "did you mean 'reports'?"),
        ("{queues: [reports]}", "aging.queues", "must be a mapping"),
        ("30s", "aging", "must be a mapping"),
    ],
)
def test_each_mistake_is_one_issue_at_its_key_path(body: str, path: str, message: str) -> None:
    issue = only_issue(BASE + f"aging: {body}\n")
    assert issue.path == path
    assert message in issue.message, issue.message


def test_every_issue_of_the_section_is_reported_at_once() -> None:
    found = issues(BASE + "aging:\n  every: x\n  queues: {mail: -1s, nope: 1s}\n")
    assert [i.path for i in found] == ["aging.every", "aging.queues.mail", "aging.queues.nope"]
