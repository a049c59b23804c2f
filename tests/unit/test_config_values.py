"""The configuration's per-value rules: types, bounds, names and cross-checks."""

from __future__ import annotations

import textwrap
from datetime import time

import pytest

from supervisor.config import Config, ConfigError, ConfigIssue, parse_config

MiB = 2**20

HANDLERS = "handlers:\n  render_pdf: examples.pdf:render_invoice\n"


def pool(body: str) -> str:
    """A file whose pool ``pdf`` has ``body`` (the lines under it) and queues {pdf: 1}."""
    lines = "".join(f"    {line}\n" for line in textwrap.dedent(body).splitlines())
    return HANDLERS + "pools:\n  pdf:\n    queues: {pdf: 1}\n" + lines


def with_pool(extra: str) -> str:
    return pool("") + textwrap.dedent(extra)


def parse(text: str) -> Config:
    return parse_config(text, source="queues.yaml", env={})


def only_issue(text: str) -> ConfigIssue:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert len(caught.value.issues) == 1, caught.value.issues
    return caught.value.issues[0]


def problem(text: str) -> tuple[str, str]:
    issue = only_issue(text)
    return issue.path, issue.message


# Integers


@pytest.mark.parametrize(
    ("line", "path", "message"),
    [
        ("processes: 0", "pools.pdf.processes", "must be a positive integer, got 0"),
        ("processes: -3", "pools.pdf.processes", "must be a positive integer, got -3"),
        ("processes: 257", "pools.pdf.processes", "must be at most 256, got 257"),
        (
            "processes: 99999999999999999999999",
            "pools.pdf.processes",
            "must be at most 256, got 99999999999999999999999",
        ),
        ("processes: true", "pools.pdf.processes", "must be an integer, got true"),
        ("processes: 2.0", "pools.pdf.processes", "must be an integer, got 2.0"),
        ("processes: '2'", "pools.pdf.processes", "must be an integer, got '2'"),
        ("processes:", "pools.pdf.processes", "must be an integer, got null (an empty value)"),
        ("processes: [2]", "pools.pdf.processes", "must be an integer, got a list"),
        ("threads: 0", "pools.pdf.threads", "must be a positive integer, got 0"),
        ("threads: 300", "pools.pdf.threads", "must be at most 256, got 300"),
        ("batch: 0", "pools.pdf.batch", "must be a positive integer, got 0"),
        ("batch: 1001", "pools.pdf.batch", "must be at most 1000, got 1001"),
        ("max_jobs: 0", "pools.pdf.max_jobs", "must be a positive integer, got 0"),
        (
            "max_jobs: 1000000001",
            "pools.pdf.max_jobs",
            "must be at most 1000000000, got 1000000001",
        ),
    ],
)
def test_pool_integers(line: str, path: str, message: str) -> None:
    assert problem(pool(line)) == (path, message)


def test_pool_integers_at_their_bounds_are_accepted() -> None:
    config = parse(pool("processes: 256\nthreads: 256\nbatch: 1000\nmax_jobs: 1000000000"))
    p = config.pools["pdf"]
    assert (p.processes, p.threads, p.batch, p.max_jobs) == (256, 256, 1000, 10**9)


def test_an_empty_max_jobs_means_no_limit() -> None:
    assert parse(pool("max_jobs:")).pools["pdf"].max_jobs is None


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ("0", "weight must be a positive integer, got 0"),
        ("-1", "weight must be a positive integer, got -1"),
        ("1001", "weight must be at most 1000, got 1001"),
        ("yes", "weight must be an integer, got true"),
        ("1.5", "weight must be an integer, got 1.5"),
        ("high", "weight must be an integer, got 'high'"),
    ],
)
def test_weights(weight: str, message: str) -> None:
    text = HANDLERS + f"pools:\n  pdf:\n    queues: {{pdf: 1, reports: {weight}}}\n"
    assert problem(text) == ("pools.pdf.queues.reports", message)


# Sizes and memory limits


def test_memory_limits_parse_and_the_hard_limit_defaults_to_one_and_a_half() -> None:
    assert parse(pool("memory_limit: 512MiB")).pools["pdf"].memory_hard_limit == 768 * MiB
    both = parse(pool("memory_limit: 1GiB\nmemory_hard_limit: 2G")).pools["pdf"]
    assert (both.memory_limit, both.memory_hard_limit) == (1024 * MiB, 2048 * MiB)
    hard_only = parse(pool("memory_hard_limit: 100MB")).pools["pdf"]
    assert (hard_only.memory_limit, hard_only.memory_hard_limit) == (None, 100_000_000)


@pytest.mark.parametrize(
    ("lines", "path", "message"),
    [
        ("memory_limit: 1MiB", "pools.pdf.memory_limit", "must be at least 16MiB, got '1MiB'"),
        ("memory_limit: 2TiB", "pools.pdf.memory_limit", "must be at most 1TiB, got '2TiB'"),
        ("memory_limit: 1024", "pools.pdf.memory_limit", "must be at least 16MiB, got 1024"),
        (
            "memory_limit: lots",
            "pools.pdf.memory_limit",
            "must be a number of bytes or a size like 64KiB, 512MiB, 1.5GiB, 100MB, got 'lots'",
        ),
        ("memory_limit: -1GiB", "pools.pdf.memory_limit", "must not be negative, got '-1GiB'"),
        (
            "memory_limit: 512MiB\nmemory_hard_limit: 256MiB",
            "pools.pdf.memory_hard_limit",
            "must be at least memory_limit (512MiB), got 256MiB",
        ),
    ],
)
def test_memory_limit_rules(lines: str, path: str, message: str) -> None:
    assert problem(pool(lines)) == (path, message)


# Durations


def test_durations_accept_numbers_and_units() -> None:
    config = parse(with_pool("shutdown_timeout: 90\nrescue: {interval: 1m30s}\n"))
    assert (config.shutdown_timeout, config.rescue.interval) == (90.0, 90.0)


@pytest.mark.parametrize(
    ("extra", "path", "message"),
    [
        ("shutdown_timeout: 0", "shutdown_timeout", "must be more than zero, got 0"),
        ("shutdown_timeout: 2d", "shutdown_timeout", "must be at most 1d, got '2d'"),
        ("shutdown_timeout: -5s", "shutdown_timeout", "must not be negative, got '-5s'"),
        ("shutdown_timeout: .nan", "shutdown_timeout", "must be a finite duration, got nan"),
        ("shutdown_timeout: true", "shutdown_timeout", "must be a number of seconds"),
        ("rescue: {interval: 31d}", "rescue.interval", "must be at most 30d, got '31d'"),
        ("rescue: {interval: 0s}", "rescue.interval", "must be more than zero, got '0s'"),
        ("database: {connect_timeout: 25h}", "database.connect_timeout", "must be at most 1d"),
        ("jobs: {render_pdf: {timeout: 2d}}", "jobs.render_pdf.timeout", "must be at most 1d"),
        ("jobs: {render_pdf: {timeout: 0}}", "jobs.render_pdf.timeout", "must be more than zero"),
        ("purge: {discarded_after: 400d}", "purge.discarded_after", "must be at most 365d"),
        ("history: {keep: 0s}", "history.keep", "must be more than zero"),
        ("vacuum: {interval: 0s}", "vacuum.interval", "must be more than zero"),
        ("lease: {duration: 31d}", "lease.duration", "must be at most 30d"),
    ],
)
def test_duration_bounds(extra: str, path: str, message: str) -> None:
    found_path, found_message = problem(with_pool(extra + "\n"))
    assert found_path == path
    assert found_message.startswith(message)


def test_pool_poll_interval() -> None:
    assert parse(pool("poll_interval: 250ms")).pools["pdf"].poll_interval == 0.25
    assert problem(pool("poll_interval: 0")) == (
        "pools.pdf.poll_interval",
        "must be more than zero, got 0",
    )


def test_lease_renewal_must_be_at_most_a_third_of_the_lease() -> None:
    path, message = problem(with_pool("lease: {duration: 30s, renew_every: 15s}\n"))
    assert path == "lease.renew_every"
    assert message.startswith("must be at most a third of lease.duration (10s)")
    assert message.endswith("got 15s")
    assert parse(with_pool("lease: {duration: 30s, renew_every: 10s}\n")).lease.renew_every == 10


def test_a_short_lease_without_renew_every_renews_at_a_third() -> None:
    assert parse(with_pool("lease: {duration: 15s}\n")).lease.renew_every == 5.0


# Jobs


def test_job_policy_parses() -> None:
    config = parse(
        with_pool(
            "jobs:\n  render_pdf:\n    timeout: 2m\n    max_attempts: 3\n"
            "    backoff: {base: 1s, cap: 10m}\n"
        )
    )
    policy = config.jobs["render_pdf"]
    assert (policy.timeout, policy.max_attempts) == (120.0, 3)
    assert (policy.backoff_base, policy.backoff_cap) == (1.0, 600.0)


def test_an_empty_job_policy_means_the_defaults() -> None:
    policy = parse(with_pool("jobs: {render_pdf: }\n")).jobs["render_pdf"]
    assert (policy.timeout, policy.max_attempts, policy.backoff_cap) == (None, None, 3600.0)


def test_a_job_policy_for_a_kind_whose_handler_is_wrong_is_not_reported_twice() -> None:
    text = with_pool("jobs: {render_pdf: {timeout: 5s}}\n").replace(
        "examples.pdf:render_invoice", "examples.pdf"
    )
    assert problem(text)[0] == "handlers.render_pdf"


def test_jobs_for_a_kind_without_handler() -> None:
    assert problem(with_pool("jobs: {render_pfd: {timeout: 5s}}\n")) == (
        "jobs.render_pfd",
        "no handler for this kind; add it under handlers; did you mean 'render_pdf'?",
    )
    assert problem(with_pool("jobs: {mail: {timeout: 5s}}\n")) == (
        "jobs.mail",
        "no handler for this kind; add it under handlers",
    )


@pytest.mark.parametrize(
    ("policy", "path", "message"),
    [
        ("{max_attempts: 0}", "jobs.render_pdf.max_attempts", "must be a positive integer, got 0"),
        ("{max_attempts: 1001}", "jobs.render_pdf.max_attempts", "must be at most 1000, got 1001"),
        ("{max_attempts: 2.5}", "jobs.render_pdf.max_attempts", "must be an integer, got 2.5"),
        (
            "{backoff: {base: 1h, cap: 1m}}",
            "jobs.render_pdf.backoff.cap",
            "backoff.cap (1m) must be at least backoff.base (1h)",
        ),
        (
            "{backoff: {base: 2h}}",
            "jobs.render_pdf.backoff.base",
            "backoff.cap (1h) must be at least backoff.base (2h)",
        ),
        ("{backoff: 5s}", "jobs.render_pdf.backoff", "must be a mapping (base, cap), got '5s'"),
    ],
)
def test_job_policy_rules(policy: str, path: str, message: str) -> None:
    assert problem(with_pool(f"jobs: {{render_pdf: {policy}}}\n")) == (path, message)


# Handlers


@pytest.mark.parametrize(
    "target",
    ["examples.pdf:render_invoice", "tasks:run", "a.b.c:Klass.method", "_x:_y"],
)
def test_handler_targets_accepted(target: str) -> None:
    text = pool("").replace("examples.pdf:render_invoice", target)
    assert parse(text).handlers == {"render_pdf": target}


@pytest.mark.parametrize(
    "target",
    ["render", "mod:", ":func", "a:b:c", "a-b:c", "a..b:c", "class:func", "mod:f()", "1mod:f"],
)
def test_handler_targets_rejected(target: str) -> None:
    text = pool("").replace("examples.pdf:render_invoice", f"'{target}'")
    assert problem(text) == (
        "handlers.render_pdf",
        f"must look like 'package.module:function', got {target!r}",
    )


def test_handler_kind_names() -> None:
    long_kind = "k" * 201
    text = pool("").replace("render_pdf:", f"'': m:f\n  {long_kind}: m:f\n  ok:")
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert [(i.path, i.message) for i in caught.value.issues] == [
        ('handlers[""]', "job kind must not be empty"),
        (f"handlers.{long_kind}", "job kind must be at most 200 characters, got 201"),
    ]


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        (
            "pools: {pdf: {queues: {pdf: 1}}}\n",
            "handlers",
            "is required: map each job kind to 'module:function'",
        ),
        (
            "handlers: {}\npools: {pdf: {queues: {pdf: 1}}}\n",
            "handlers",
            "must not be empty: map each job kind to 'module:function'",
        ),
        (
            "handlers: [examples.pdf:render]\npools: {pdf: {queues: {pdf: 1}}}\n",
            "handlers",
            "must be a mapping (map each job kind to 'module:function'), got a list",
        ),
    ],
)
def test_handlers_section_is_required(text: str, path: str, message: str) -> None:
    assert problem(text) == (path, message)


# Pools and queues


@pytest.mark.parametrize(
    ("pools", "path", "message"),
    [
        ("", "pools", "is required: each pool lists its queues and processes"),
        ("pools: {}\n", "pools", "must not be empty: each pool lists its queues and processes"),
        ("pools:\n", "pools", "must not be empty: each pool lists its queues and processes"),
        ("pools: {pdf: }\n", "pools.pdf", "must not be empty: with at least 'queues'"),
        ("pools: {pdf: {processes: 2}}\n", "pools.pdf.queues", "is required: queue: weight"),
        ("pools: {pdf: {queues: {}}}\n", "pools.pdf.queues", "must not be empty: queue: weight"),
        ("pools: {pdf: {queues: [pdf]}}\n", "pools.pdf.queues", "must be a mapping (queue: weight"),
    ],
)
def test_pools_and_queues_are_required(pools: str, path: str, message: str) -> None:
    found_path, found_message = problem(HANDLERS + pools)
    assert found_path == path
    assert found_message.startswith(message)


@pytest.mark.parametrize("name", ["pdf.v2", "my pool", "é", "a" * 65, "p/q"])
def test_pool_names(name: str) -> None:
    issue = only_issue(HANDLERS + f'pools: {{"{name}": {{queues: {{q: 1}}}}}}\n')
    assert issue.message == "pool name must be 1-64 letters, digits, '_' or '-'"


def test_pool_names_at_the_limit_are_fine() -> None:
    name = "Pool_" + "x" * 58 + "-"
    assert list(parse(HANDLERS + f"pools: {{{name}: {{queues: {{q: 1}}}}}}\n").pools) == [name]


def test_queue_names_may_be_any_text_without_nul() -> None:
    text = HANDLERS + 'pools: {pdf: {queues: {"reports.v2": 1, "日本語 queue": 2, "a:b": 3}}}\n'
    assert parse(text).pools["pdf"].queues == {"reports.v2": 1, "日本語 queue": 2, "a:b": 3}


@pytest.mark.parametrize(
    ("key", "path", "message"),
    [
        ('""', 'pools.pdf.queues[""]', "queue name must not be empty"),
        ('"a\\0b"', 'pools.pdf.queues["a\\u0000b"]', "queue name must not contain a NUL character"),
        ("q" * 201, f"pools.pdf.queues.{'q' * 201}", "queue name must be at most 200 characters"),
    ],
)
def test_queue_name_rules(key: str, path: str, message: str) -> None:
    found_path, found_message = problem(HANDLERS + f"pools: {{pdf: {{queues: {{{key}: 1}}}}}}\n")
    assert found_path == path
    assert found_message.startswith(message)


# Other sections


def test_purge_at_is_a_24_hour_time() -> None:
    assert parse(with_pool('purge: {at: "23:59"}\n')).purge.at == time(23, 59)
    assert parse(with_pool('purge: {at: "3:05"}\n')).purge.at == time(3, 5)
    # Unquoted, YAML 1.1 would read 03:00 as the base-60 number 180.
    assert parse(with_pool("purge:\n  at: 03:00\n")).purge.at == time(3, 0)
    # To the second, quoted or not (unquoted, YAML 1.1 reads base 60 again: 10815).
    assert parse(with_pool('purge: {at: "03:00:15"}\n')).purge.at == time(3, 0, 15)
    assert parse(with_pool("purge:\n  at: 03:00:15\n")).purge.at == time(3, 0, 15)


@pytest.mark.parametrize(
    "value", ['"24:00"', '"12:60"', '"noon"', "3", '"3pm"', '"03:00:60"', '"03:00:00.5"']
)
def test_purge_at_rejects(value: str) -> None:
    path, message = problem(with_pool(f"purge: {{at: {value}}}\n"))
    assert path == "purge.at"
    assert message.startswith('must be a 24-hour time like "03:00" (HH:MM, or HH:MM:SS), got')


def test_history_enabled_takes_only_yaml_booleans() -> None:
    assert parse(with_pool("history: {enabled: true}\n")).history.enabled is True
    assert problem(with_pool("history: {enabled: 1}\n")) == (
        "history.enabled",
        "must be true or false, got 1",
    )
    assert problem(with_pool("history: {enabled: 'true'}\n")) == (
        "history.enabled",
        "must be true or false, got 'true'",
    )


def test_metrics_port_bounds() -> None:
    assert parse(with_pool("metrics: {port: 65535}\n")).metrics.port == 65535
    assert problem(with_pool("metrics: {port: 0}\n")) == (
        "metrics.port",
        "must be a positive integer, got 0",
    )
    assert problem(with_pool("metrics: {port: 65536}\n")) == (
        "metrics.port",
        "must be at most 65535, got 65536",
    )


def test_log_choices() -> None:
    assert (
        parse(with_pool("log: {format: JSON, level: Warning}\n")).log
        == parse(with_pool("log: {format: json, level: warning}\n")).log
    )
    assert problem(with_pool("log: {level: warn}\n")) == (
        "log.level",
        "must be one of debug, info, warning, error, got 'warn'",
    )
    assert problem(with_pool("log: {format: xml}\n")) == (
        "log.format",
        "must be one of text, json, got 'xml'",
    )


def test_database_dsn_must_not_be_empty() -> None:
    expected = (
        "database.dsn",
        ("is empty (an unset variable?); give a connection string or remove the key"),
    )
    assert problem(with_pool("database: {dsn: ''}\n")) == expected
    assert problem(with_pool("database: {dsn: }\n")) == expected


def test_database_booleans_and_dirs() -> None:
    assert problem(with_pool("database: {auto_migrate: sometimes}\n")) == (
        "database.auto_migrate",
        "must be true or false, got 'sometimes'",
    )
    assert problem(with_pool("database: {embedded_dir: ''}\n")) == (
        "database.embedded_dir",
        "must not be empty",
    )


def test_batch_sizes_of_maintenance() -> None:
    assert problem(with_pool("rescue: {batch: 0}\n")) == (
        "rescue.batch",
        "must be a positive integer, got 0",
    )
    assert problem(with_pool("purge: {batch: 100001}\n")) == (
        "purge.batch",
        "must be at most 100000, got 100001",
    )


def test_a_section_that_is_not_a_mapping() -> None:
    assert problem(with_pool("lease: 60s\n")) == (
        "lease",
        "must be a mapping (duration, renew_every), got '60s'",
    )
    assert problem(with_pool("vacuum: {dead_rows: 0}\n")) == (
        "vacuum.dead_rows",
        "must be a positive integer, got 0",
    )
    assert problem(with_pool("vacuum: {enabled: sometimes}\n"))[0] == "vacuum.enabled"


# Tenant weights


def test_tenant_weights_parse_per_queue() -> None:
    text = HANDLERS + "pools:\n  pdf:\n    queues: {pdf: 1}\n"
    text += "tenants:\n  pdf:\n    weights: {acme: 3, globex: 2}\n"
    assert parse(text).tenants == {"pdf": {"acme": 3, "globex": 2}}
    assert parse(HANDLERS + "pools:\n  pdf:\n    queues: {pdf: 1}\n").tenants == {}


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        ("pdf: {weights: {acme: 0}}", "tenants.pdf.weights.acme", "weight must be a positive"),
        ("pdf: {weights: {acme: x}}", "tenants.pdf.weights.acme", "weight must be an integer"),
        ("pdf: {wieghts: {acme: 2}}", "tenants.pdf.wieghts", "did you mean 'weights'?"),
        ("pdf: [acme]", "tenants.pdf", "must be a mapping"),
    ],
)
def test_bad_tenant_weights_name_the_key(body: str, path: str, message: str) -> None:
    text = HANDLERS + "pools:\n  pdf:\n    queues: {pdf: 1}\n" + f"tenants: {{{body}}}\n"
    got_path, got = problem(text)
    assert got_path == path
    assert message in got
