"""The YAML of issue 23: effects and reconcile per kind, results, reconcile; and `check`
importing the reconcile hooks like the handlers (exit 2 with the key path)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from supervisor.cli.main import main
from supervisor.config import ConfigError, parse_config
from supervisor.config.handlers import load_reconcilers

BASE = """\
handlers:
  charge: examples.noop:noop
pools:
  main:
    queues: {default: 1}
"""


def parse(extra: str) -> object:
    return parse_config(BASE + textwrap.dedent(extra), source="q.yaml", env={})


def problems(extra: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(extra)
    return [f"{i.path}: {i.message}" for i in caught.value.issues]


def test_effects_reconcile_results_and_reconcile_parse() -> None:
    config = parse("""\
        jobs:
          charge: {effects: external, reconcile: "examples.archive:was_mailed"}
        results: {max_size: 1MiB}
        reconcile: {interval: 2s, timeout: 5s, batch: 3}
    """)
    policy = config.policy("charge")  # type: ignore[attr-defined]
    assert policy.external and policy.reconcile == "examples.archive:was_mailed"
    assert config.external_kinds() == ["charge"]  # type: ignore[attr-defined]
    assert config.results.max_size == 2**20  # type: ignore[attr-defined]
    assert (config.reconcile.interval, config.reconcile.timeout, config.reconcile.batch) == (  # type: ignore[attr-defined]
        2.0,
        5.0,
        3,
    )


def test_defaults() -> None:
    config = parse("")
    assert config.external_kinds() == []  # type: ignore[attr-defined]
    assert config.results.max_size == 64 * 1024  # type: ignore[attr-defined]
    assert not config.policy("charge").external  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("jobs:\n  charge: {effects: outside}\n", "jobs.charge.effects: must be one of"),
        (
            "jobs:\n  charge: {reconcile: 'examples.archive:was_mailed'}\n",
            "jobs.charge.reconcile: a reconcile hook needs effects: external",
        ),
        (
            "jobs:\n  charge: {effects: external, reconcile: nope}\n",
            "jobs.charge.reconcile: must look like 'package.module:function'",
        ),
        ("results: {max_size: 0}\n", "results.max_size:"),
        ("reconcile: {batch: 0}\n", "reconcile.batch:"),
        ("reconcile: {every: 1s}\n", "reconcile.every: unknown key"),
    ],
)
def test_bad_values_name_their_key(extra: str, expected: str) -> None:
    found = problems(extra)
    assert any(p.startswith(expected) for p in found), found


def test_a_hook_that_does_not_import_fails_check_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = parse("""\
        jobs:
          charge: {effects: external, reconcile: "examples.archive:no_such_hook"}
    """)
    with pytest.raises(ConfigError) as caught:
        load_reconcilers(config)  # type: ignore[arg-type]
    assert caught.value.issues[0].path == "jobs.charge.reconcile"
    assert "has no attribute 'no_such_hook'" in caught.value.issues[0].message
    path = tmp_path / "q.yaml"
    path.write_text(
        BASE + "jobs:\n  charge: {effects: external, reconcile: 'examples.archive:nope'}\n"
    )
    assert main(["-c", str(path), "check"]) == 2
    assert "jobs.charge.reconcile" in capsys.readouterr().err
