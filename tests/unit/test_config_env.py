"""${VAR} interpolation in the configuration's string values."""

from __future__ import annotations

import pytest

from supervisor.config import Config, ConfigError, ConfigIssue, parse_config

HANDLERS = "handlers:\n  render_pdf: examples.pdf:render_invoice\n"
POOL = "pools:\n  pdf:\n    queues: {pdf: 1}\n"


def parse(text: str, env: dict[str, str]) -> Config:
    return parse_config(HANDLERS + POOL + text, source="queues.yaml", env=env)


def only_issue(text: str, env: dict[str, str]) -> ConfigIssue:
    with pytest.raises(ConfigError) as caught:
        parse(text, env)
    assert len(caught.value.issues) == 1, caught.value.issues
    return caught.value.issues[0]


def test_a_variable_is_substituted() -> None:
    config = parse("database:\n  dsn: ${DATABASE_URL}\n", {"DATABASE_URL": "postgresql://db/app"})
    assert config.database.dsn == "postgresql://db/app"


def test_a_variable_inside_text() -> None:
    env = {"PGUSER": "app", "PGHOST": "db"}
    config = parse("database:\n  dsn: postgresql://${PGUSER}@${PGHOST}:5432/app\n", env)
    assert config.database.dsn == "postgresql://app@db:5432/app"


def test_a_missing_variable_names_the_key_and_the_variable() -> None:
    issue = only_issue("database:\n  dsn: ${DATABASE_URL}\n", {})
    assert issue == ConfigIssue(
        "database.dsn",
        "environment variable DATABASE_URL not set; set it or give a default like "
        "${DATABASE_URL:-value}",
        7,
    )


def test_several_missing_variables_in_one_value() -> None:
    issue = only_issue("database:\n  dsn: postgresql://${U}@${H}/app\n", {})
    assert issue.message.startswith("environment variables U and H not set; set them or")


def test_defaults_apply_when_unset_or_empty() -> None:
    text = "database:\n  embedded_dir: ${PGQ_DIR:-var/pgq}\n"
    assert parse(text, {}).database.embedded_dir == "var/pgq"
    assert parse(text, {"PGQ_DIR": ""}).database.embedded_dir == "var/pgq"
    assert parse(text, {"PGQ_DIR": "/srv/pgq"}).database.embedded_dir == "/srv/pgq"


def test_a_set_but_empty_variable_without_default_is_empty_text() -> None:
    issue = only_issue("database:\n  dsn: ${DATABASE_URL}\n", {"DATABASE_URL": ""})
    assert issue.message == (
        "is empty (an unset variable?); give a connection string or remove the key"
    )


def test_double_dollar_is_a_literal_dollar() -> None:
    config = parse("database:\n  dsn: 'password=pa$$word host=${H}'\n", {"H": "db"})
    assert config.database.dsn == "password=pa$word host=db"


@pytest.mark.parametrize("value", ["$HOME/pgq", "${}", "${1X}", "${X-default}", "${X", "cost$"])
def test_malformed_interpolation_is_an_error(value: str) -> None:
    issue = only_issue(f"database:\n  embedded_dir: '{value}'\n", {"HOME": "/root", "X": "x"})
    assert issue.path == "database.embedded_dir"
    assert issue.message.startswith("bad interpolation")
    assert issue.message.endswith("write ${NAME} or ${NAME:-default}, and $$ for a literal '$'")


def test_a_whole_expression_is_read_as_a_yaml_scalar() -> None:
    text = "    processes: ${N:-2}\n    threads: ${T}\nhistory:\n  enabled: ${H}\n"
    config = parse(text, {"T": "8", "H": "true"})
    assert (config.pools["pdf"].processes, config.pools["pdf"].threads) == (2, 8)
    assert config.history.enabled is True


def test_a_quoted_whole_expression_is_also_typed_so_flow_style_works() -> None:
    text = "    processes: '${N:-3}'\nrescue: {interval: \"${RESCUE:-90}\"}\n"
    config = parse(text, {})
    assert config.pools["pdf"].processes == 3
    assert config.rescue.interval == 90.0


def test_an_expression_with_other_text_stays_text() -> None:
    issue = only_issue("    processes: ${N}0\n", {"N": "1"})
    assert issue.message == "must be an integer, got the value of $N (not shown)"


@pytest.mark.parametrize(
    "value", ["a: b", "[1, 2]", "{x: 1}", "- item", "!!python/object:os.system"]
)
def test_environment_values_cannot_inject_yaml_structure(value: str) -> None:
    config = parse("database:\n  embedded_dir: ${D}\n", {"D": value})
    assert config.database.embedded_dir == value


def test_injected_structure_in_a_typed_value_is_a_type_error_not_a_mapping() -> None:
    issue = only_issue("    processes: ${N}\n", {"N": "a: b"})
    assert issue.path == "pools.pdf.processes"
    assert issue.message == "must be an integer, got the value of $N (not shown)"


def test_values_from_the_environment_are_not_echoed_in_errors() -> None:
    secret = "postgresql://app:hunter2@db/app"
    with pytest.raises(ConfigError) as caught:
        parse("    threads: ${DATABASE_URL}\n", {"DATABASE_URL": secret})
    assert "hunter2" not in str(caught.value)
    assert "the value of $DATABASE_URL (not shown)" in str(caught.value)


def test_a_default_from_the_file_is_shown() -> None:
    issue = only_issue("    threads: ${T:-many}\n", {})
    assert issue.message == "must be an integer, got 'many'"


def test_an_empty_expression_means_not_set_for_optional_values() -> None:
    config = parse("    memory_limit: ${MEM:-}\n    max_jobs: ${MAX_JOBS:-}\n", {})
    assert (config.pools["pdf"].memory_limit, config.pools["pdf"].max_jobs) == (None, None)
    config = parse("    memory_limit: ${MEM:-}\n", {"MEM": "1GiB"})
    assert config.pools["pdf"].memory_limit == 2**30


def test_keys_are_not_interpolated() -> None:
    text = HANDLERS + "pools:\n  pdf:\n    queues: {'${Q}': 1}\n"
    queues = parse_config(text, source="q.yaml", env={"Q": "other"}).pools["pdf"].queues
    assert queues == {"${Q}": 1}
