"""The real command line, run as the operator runs it: a fresh Python process from the
repository root, output captured as text."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_cli(
    config: Path, *argv: str, env: Mapping[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """`python -m supervisor.cli -c CONFIG ARGV...` with exactly ``env`` as its environment."""
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "-c", str(config), *argv],
        cwd=ROOT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
