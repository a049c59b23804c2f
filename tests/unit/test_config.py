"""The YAML configuration: shape, defaults, and one exact issue per mistake."""

from __future__ import annotations

import pickle
import sys
import textwrap
from datetime import time
from pathlib import Path

import pytest
import yaml

from supervisor.config import (
    Config,
    ConfigError,
    ConfigIssue,
    DatabaseConfig,
    HistoryConfig,
    JobPolicy,
    LeaseConfig,
    LogConfig,
    MetricsConfig,
    PoolConfig,
    PurgeConfig,
    RescueConfig,
    VacuumConfig,
    load_config,
    parse_config,
)

REPO = Path(__file__).resolve().parents[2]
MiB = 2**20
DAY = 86400.0

MINIMAL = """\
handlers:
  render_pdf: examples.pdf:render_invoice
pools:
  pdf:
    queues: {pdf: 1}
"""


def parse(text: str, env: dict[str, str] | None = None) -> Config:
    return parse_config(textwrap.dedent(text), source="queues.yaml", env=env or {})


def issues(text: str, env: dict[str, str] | None = None) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        parse(text, env)
    assert caught.value.source == "queues.yaml"
    return caught.value.issues


def only_issue(text: str, env: dict[str, str] | None = None) -> ConfigIssue:
    found = issues(text, env)
    assert len(found) == 1, found
    return found[0]


def with_minimal(extra: str) -> str:
    return MINIMAL + textwrap.dedent(extra)


# The whole file


FULL = """\
database:
  dsn: postgresql://app@db.internal/app
  embedded_dir: var/pg
  auto_migrate: false
  connect_timeout: 10s
handlers:
  render_pdf: examples.pdf:render_invoice
  deliver_webhook: examples.webhooks:deliver_webhook
pools:
  pdf:
    processes: 2
    queues: {pdf: 3, reports: 1}
    batch: 4
    memory_limit: 512MiB
    max_jobs: 1000
  webhooks:
    processes: 1
    threads: 8
    queues: {webhooks: 1}
    memory_limit: 256MiB
    memory_hard_limit: 1GiB
    poll_interval: 250ms
jobs:
  render_pdf: {timeout: 120s, max_attempts: 5}
  deliver_webhook: {backoff: {base: 5s, cap: 30m}}
shutdown_timeout: 45s
lease: {duration: 90s, renew_every: 15s}
rescue: {interval: 30s, batch: 200}
purge: {at: "04:30", discarded_after: 30d, batch: 100}
vacuum: {enabled: false, interval: 30s, dead_rows: 50000}
history: {enabled: true, keep: 3d}
metrics: {port: 9187, host: 0.0.0.0}
log: {format: json, level: debug}
"""


def test_full_config_parses_to_the_expected_dataclasses() -> None:
    config = parse(FULL)
    assert config == Config(
        path="queues.yaml",
        database=DatabaseConfig(
            dsn="postgresql://app@db.internal/app",
            embedded_dir="var/pg",
            auto_migrate=False,
            connect_timeout=10.0,
        ),
        handlers={
            "render_pdf": "examples.pdf:render_invoice",
            "deliver_webhook": "examples.webhooks:deliver_webhook",
        },
        pools={
            "pdf": PoolConfig(
                name="pdf",
                queues={"pdf": 3, "reports": 1},
                processes=2,
                batch=4,
                memory_limit=512 * MiB,
                memory_hard_limit=768 * MiB,
                max_jobs=1000,
            ),
            "webhooks": PoolConfig(
                name="webhooks",
                queues={"webhooks": 1},
                threads=8,
                memory_limit=256 * MiB,
                memory_hard_limit=1024 * MiB,
                poll_interval=0.25,
            ),
        },
        jobs={
            "render_pdf": JobPolicy("render_pdf", timeout=120.0, max_attempts=5),
            "deliver_webhook": JobPolicy("deliver_webhook", backoff_base=5.0, backoff_cap=1800.0),
        },
        shutdown_timeout=45.0,
        lease=LeaseConfig(duration=90.0, renew_every=15.0),
        rescue=RescueConfig(interval=30.0, batch=200),
        purge=PurgeConfig(at=time(4, 30), discarded_after=30 * DAY, batch=100),
        vacuum=VacuumConfig(enabled=False, interval=30.0, dead_rows=50_000),
        history=HistoryConfig(enabled=True, keep=3 * DAY),
        metrics=MetricsConfig(port=9187, host="0.0.0.0"),
        log=LogConfig(format="json", level="debug"),
    )
    assert list(config.pools) == ["pdf", "webhooks"]
    assert list(config.pools["pdf"].queues) == ["pdf", "reports"]
    assert config.lines["pools.pdf.queues.reports"] == 12
    assert config.lines["handlers.deliver_webhook"] == 8


def test_minimal_config_gets_the_documented_defaults() -> None:
    config = parse(MINIMAL)
    assert config.database == DatabaseConfig(None, False, ".pgq", True, 5.0)
    assert config.pools == {"pdf": PoolConfig("pdf", {"pdf": 1}, 1, 1, 1, None, None, None, 1.0)}
    assert config.jobs == {}
    assert config.shutdown_timeout == 30.0
    assert config.lease == LeaseConfig(60.0, 10.0)
    assert config.rescue == RescueConfig(60.0, 1000)
    assert config.purge == PurgeConfig(time(3, 0), 14 * DAY, 5000)
    assert config.vacuum == VacuumConfig(True, 5.0, 10_000)
    assert config.history == HistoryConfig(False, 7 * DAY)
    assert config.metrics == MetricsConfig(None, "127.0.0.1")
    assert config.log == LogConfig("text", "info")


def test_the_example_config_parses_without_importing_handlers() -> None:
    before = set(sys.modules)
    config = load_config(REPO / "config" / "queues.yaml", env={})
    assert not {m for m in set(sys.modules) - before if m.startswith("examples")}
    assert config.database.dsn is None
    assert config.handlers == {
        "render_pdf": "examples.pdf:render_invoice",
        "deliver_webhook": "examples.webhooks:deliver_webhook",
        "sync_account": "examples.flaky:sync_account",
        "zip_invoices": "examples.invoice_workflow:zip_invoices",
        "mail_archive": "examples.archive:mail_archive",
    }
    assert config.external_kinds() == ["mail_archive"]
    pdf, webhooks = config.pools["pdf"], config.pools["webhooks"]
    assert (pdf.processes, pdf.queues, pdf.batch) == (2, {"pdf": 3, "reports": 1}, 4)
    assert (pdf.memory_limit, pdf.max_jobs) == (512 * MiB, 1000)
    assert (webhooks.processes, webhooks.threads) == (1, 8)
    assert webhooks.queues == {"webhooks": 1, "sync": 1, "mail": 1}
    assert set(config.jobs) == set(config.handlers)
    assert config.shutdown_timeout == 30.0
    assert config.history.enabled is True


def test_policy_and_max_attempts_overrides() -> None:
    config = parse(FULL)
    assert config.policy("render_pdf") == JobPolicy("render_pdf", 120.0, 5)
    assert config.policy("unconfigured") == JobPolicy("unconfigured")
    assert config.max_attempts_overrides() == {"render_pdf": 5}


def test_pool_config_defaults_the_hard_limit_to_one_and_a_half_times_the_soft_one() -> None:
    assert PoolConfig("p", {"q": 1}, memory_limit=100 * MiB).memory_hard_limit == 150 * MiB
    assert PoolConfig("p", {"q": 1}).memory_hard_limit is None
    explicit = PoolConfig("p", {"q": 1}, memory_limit=100 * MiB, memory_hard_limit=120 * MiB)
    assert explicit.memory_hard_limit == 120 * MiB


# Messages


def test_error_text_has_one_line_per_issue_with_path_and_line() -> None:
    text = MINIMAL + "  reports:\n    queues:\n      reports: 0\n    threads: 0\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="config/queues.yaml", env={})
    assert str(caught.value).splitlines() == [
        "config/queues.yaml: pools.reports.queues.reports: weight must be a positive integer, "
        "got 0 (line 8)",
        "config/queues.yaml: pools.reports.threads: must be a positive integer, got 0 (line 9)",
    ]


def test_several_mistakes_are_all_reported_in_file_order() -> None:
    found = issues("""\
        handlers:
          render_pdf: examples.pdf:render_invoice
        pools:
          pdf:
            proceses: 2
            queues: {pdf: 0}
            batch: 5000
        shutdown_timeout: forever
        """)
    assert [(i.path, i.line) for i in found] == [
        ("pools.pdf.proceses", 5),
        ("pools.pdf.queues.pdf", 6),
        ("pools.pdf.batch", 7),
        ("shutdown_timeout", 8),
    ]


def test_did_you_mean_for_a_close_unknown_key() -> None:
    issue = only_issue(with_minimal("lease: {duraton: 30s}\n"))
    assert issue == ConfigIssue("lease.duraton", "unknown key; did you mean 'duration'?", 6)


def test_unknown_key_without_a_close_match_lists_the_known_ones() -> None:
    issue = only_issue(with_minimal("log: {colour: true}\n"))
    assert issue.path == "log.colour"
    assert issue.message == "unknown key; expected format, level"


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("databse: {}\n", "databse"),
        ("database: {dns: x}\n", "database.dns"),
        ("jobs: {render_pdf: {tiemout: 5s}}\n", "jobs.render_pdf.tiemout"),
        ("jobs: {render_pdf: {backoff: {bsae: 1s}}}\n", "jobs.render_pdf.backoff.bsae"),
        ("rescue: {intervall: 5s}\n", "rescue.intervall"),
        ("vacuum: {dead_row: 5}\n", "vacuum.dead_row"),
        ("purge: {att: '01:00'}\n", "purge.att"),
        ("history: {enable: true}\n", "history.enable"),
        ("metrics: {prot: 9000}\n", "metrics.prot"),
    ],
)
def test_unknown_keys_at_every_level(extra: str, path: str) -> None:
    issue = only_issue(with_minimal(extra))
    assert issue.path == path
    assert issue.message.startswith("unknown key; did you mean")


def test_key_paths_quote_keys_with_dots_or_spaces() -> None:
    found = issues("""\
        handlers: {render_pdf: examples.pdf:render_invoice}
        pools:
          pdf:
            queues: {"reports.v2": 0, "month end": 0}
        """)
    assert [i.path for i in found] == [
        'pools.pdf.queues["reports.v2"]',
        'pools.pdf.queues["month end"]',
    ]


# Safe loading


def test_object_building_tags_are_rejected_and_never_run(tmp_path: Path) -> None:
    target = tmp_path / "pwned"
    config = tmp_path / "queues.yaml"
    config.write_text(
        MINIMAL + f'metrics: !!python/object/apply:os.system ["touch {target}"]\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(config, env={})
    assert not target.exists()
    [issue] = caught.value.issues
    assert issue.line == 6
    assert "YAML tag '!!python/object/apply:os.system' is not allowed" in issue.message
    # The payload is live: an unsafe loader would have run it.
    yaml.unsafe_load(config.read_text(encoding="utf-8"))
    assert target.exists()


def test_a_dangerous_tag_at_the_top_level_is_rejected() -> None:
    issue = only_issue('!!python/object/apply:os.system ["true"]\n')
    assert (issue.path, issue.line, issue.column) == ("", 1, 1)
    assert issue.message.startswith("YAML tag '!!python/object/apply:os.system' is not allowed")


def test_custom_tags_and_binary_are_rejected() -> None:
    found = issues(with_minimal("log: {format: !secret text, level: !!binary aGk=}\n"))
    assert [i.message.split(" is not")[0] for i in found] == [
        "YAML tag '!secret'",
        "YAML tag '!!binary'",
    ]


def test_duplicate_keys_are_errors_with_their_line() -> None:
    found = issues("""\
        handlers:
          render_pdf: examples.pdf:render_invoice
        pools:
          pdf:
            processes: 2
            queues: {pdf: 1}
            processes: 4
        handlers:
          other: m:f
        """)
    assert found == [
        ConfigIssue("pools.pdf.processes", "duplicate key (first on line 5)", 7),
        ConfigIssue("handlers", "duplicate key (first on line 1)", 8),
    ]


def test_malformed_yaml_reports_line_and_column() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config("handlers:\n  a: b: c\n", source="q.yaml", env={})
    [issue] = caught.value.issues
    assert (issue.line, issue.column) == (2, 7)
    assert str(caught.value) == "q.yaml: line 2, column 7: mapping values are not allowed here"


def test_unclosed_flow_mapping_reports_where_it_started() -> None:
    issue = only_issue("handlers: {a: m:f\npools: x\n")
    assert issue.line == 2
    assert "while parsing a flow mapping on line 1" in issue.message


@pytest.mark.parametrize(
    ("text", "issue"),
    [
        (
            MINIMAL + "---\nmore: 1\n",
            ConfigIssue(
                "", "expected a single document in the stream, but found another document", 6, 1
            ),
        ),
        (
            MINIMAL + "log: {level: \x07}\n",
            ConfigIssue(
                "", "unacceptable character #x0007: special characters are not allowed", 6, 14
            ),
        ),
        ("[" * 100_000, ConfigIssue("", "the YAML is nested too deeply")),
    ],
)
def test_other_unreadable_yaml(text: str, issue: ConfigIssue) -> None:
    assert only_issue(text) == issue


def test_config_error_survives_pickling() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(with_minimal("lease: {duraton: 30s}\nlog: {level: loud}\n"))
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.issues, copy.source, str(copy)) == (
        caught.value.issues,
        caught.value.source,
        str(caught.value),
    )


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing yet\n"])
def test_empty_file(text: str) -> None:
    issue = only_issue(text)
    assert issue == ConfigIssue("", "the file is empty; it needs at least 'handlers' and 'pools'")


@pytest.mark.parametrize(("text", "got"), [("- a\n- b\n", "a list"), ("pools\n", "'pools'")])
def test_top_level_must_be_a_mapping(text: str, got: str) -> None:
    issue = only_issue(text)
    assert issue.message == (
        f"the top level must be a mapping of sections (database, handlers, pools, ...), got {got}"
    )


def test_merge_keys_work_and_own_keys_win() -> None:
    config = parse("""\
        handlers: {render_pdf: examples.pdf:render_invoice}
        pools:
          pdf: &base
            processes: 2
            queues: {pdf: 1}
          reports:
            <<: *base
            processes: 5
        """)
    assert config.pools["reports"].processes == 5
    assert config.pools["reports"].queues == {"pdf": 1}


def test_keys_are_text_even_when_yaml_would_read_them_as_bools_or_numbers() -> None:
    config = parse(with_minimal("").replace("{pdf: 1}", "{no: 1, on: 2, 1: 3, null: 4}"))
    assert config.pools["pdf"].queues == {"no": 1, "on": 2, "1": 3, "null": 4}


# Reading files


def test_load_config_reports_a_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config(missing)
    assert str(caught.value) == f"{missing}: cannot read the file: No such file or directory"


def test_load_config_rejects_non_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(MINIMAL.encode() + b"# caf\xe9\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert caught.value.issues[0].message.startswith("not UTF-8 text (byte 0xe9")


def test_load_config_accepts_a_byte_order_mark(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_config(path, env={}).handlers == {"render_pdf": "examples.pdf:render_invoice"}


def test_load_config_reads_os_environ_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGQ_TEST_PROCESSES", "7")
    path = tmp_path / "queues.yaml"
    path.write_text(MINIMAL + "    processes: ${PGQ_TEST_PROCESSES}\n", encoding="utf-8")
    assert load_config(path).pools["pdf"].processes == 7


def test_host_identity_from_the_yaml_and_pgq_host_which_wins() -> None:
    assert parse(MINIMAL).host is None  # the machine's host name
    assert parse(with_minimal("host: web-1\n")).host == "web-1"
    assert parse(with_minimal("host: web-1\n"), env={"PGQ_HOST": "web-1-b"}).host == "web-1-b"
    issue = only_issue(with_minimal("host: 'web:1'\n"))
    assert (issue.path, issue.message) == (
        "host",
        "must be 1-64 letters, digits, '.', '_' or '-', got 'web:1'",
    )
    issue = only_issue(MINIMAL, env={"PGQ_HOST": "a b"})
    assert issue.path == "host" and issue.message.startswith("PGQ_HOST must be 1-64")


def test_transaction_pooler_and_listen_dsn() -> None:
    direct = "postgresql://app@db/app"
    pooled = parse(with_minimal("database: {pooler: transaction}\n")).database
    assert pooled.pooled and pooled.wakeup_dsn("postgresql://app@bouncer/app") is None
    listening = parse(
        with_minimal(f"database: {{pooler: transaction, listen_dsn: '{direct}'}}\n")
    ).database
    assert listening.pooled and listening.wakeup_dsn("postgresql://app@bouncer/app") == direct
    plain = parse(MINIMAL).database
    assert not plain.pooled and plain.wakeup_dsn(direct) == direct
    assert not parse(with_minimal("database: {pooler: session}\n")).database.pooled
    issue = only_issue(with_minimal("database: {pooler: statement}\n"))
    assert issue.path == "database.pooler"
