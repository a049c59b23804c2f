"""Detecting supervisord, whose import package is also named `supervisor`.

Both projects install a top-level `supervisor` package, so in one environment their files mix
in one folder and whichever `supervisor/__init__.py` was written last wins: imports then fail
far from the cause (``cannot import name 'enqueue' from 'supervisor'``), and uninstalling
either one deletes files of the other. This says so plainly instead.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

ADVICE = (
    "pgq-supervisor and supervisord (the 'supervisor' distribution) are installed in the same "
    "Python environment: both use the import name `supervisor`, so their files overwrite each "
    "other. Install them in separate environments (for example supervisord from your OS "
    "packages or with pipx, pgq-supervisor in your application's virtualenv)"
)


def supervisord_installed() -> str | None:
    """Where supervisord is installed in this environment, or None."""
    package = Path(__file__).resolve().parent
    # supervisord's own modules beside ours: the two packages share this folder.
    for marker in ("supervisord.py", "supervisorctl.py"):
        if (package / marker).is_file():
            return str(package / marker)
    try:
        dist = importlib.metadata.distribution("supervisor")
    except importlib.metadata.PackageNotFoundError:
        return None
    return f"{dist.metadata['Name']} {dist.version}"


def check() -> None:
    """Raise ImportError with the remedy when supervisord shares this environment."""
    found = supervisord_installed()
    if found is not None:
        raise ImportError(f"{ADVICE} (found: {found})")


def check_package_is_ours() -> None:
    """For our entry points: the `supervisor/__init__.py` in use must be ours (supervisord's,
    installed after us, replaces it)."""
    # The package is imported before any of its modules; no import here (it would be a cycle).
    supervisor = sys.modules["supervisor"]
    if getattr(supervisor, "PGQ_SUPERVISOR", False) is not True:
        raise ImportError(f"{ADVICE} (supervisor/__init__.py is not ours: {supervisor.__file__})")
