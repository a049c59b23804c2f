"""Fixtures shared by the integration tests of the operator verbs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.operator_helpers import Cli, Restore


@pytest.fixture
def cli(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cli]:
    """`pgq-supervisor -c FILE ...` run in this process against the test's database."""
    monkeypatch.setenv("PGQ_DSN", dsn)
    restore = Restore()
    yield Cli(tmp_path, capsys)
    restore()
