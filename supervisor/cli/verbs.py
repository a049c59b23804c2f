"""What every verb shares: its context (arguments and config), usage errors, and registration.

Verb modules (operator, dlq) register themselves with ``@verb`` when the entry point imports
them; they take what they need from here, never from the entry point.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from supervisor.config import Config


class UsageError(Exception):
    """Bad usage that argparse cannot see (exit code 2)."""


@dataclass
class Context:
    args: argparse.Namespace
    config: Config

    def dsn(self) -> str:
        """The database for verbs other than run: flag, environment, config, or a running
        embedded server."""
        dsn = explicit_dsn(self.args, self.config)
        if dsn:
            return dsn
        from supervisor.embedded.server import EmbeddedPostgres

        running = EmbeddedPostgres.find_running(self.config.database.embedded_dir)
        if running is None:
            raise UsageError(
                "no database: set database.dsn in the config, PGQ_DSN or --dsn, or start "
                f"`pgq-supervisor -c {self.config.path}` to run the embedded server "
                f"(data in {self.config.database.embedded_dir})"
            )
        return running


def explicit_dsn(args: argparse.Namespace, config: Config) -> str | None:
    return args.dsn or os.environ.get("PGQ_DSN") or config.database.dsn or None


Verb = Callable[[Context], int]
VERBS: dict[str, tuple[Verb, Callable[[argparse.ArgumentParser], None], str]] = {}


def verb(
    name: str, help_text: str, arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None
) -> Callable[[Verb], Verb]:
    def register(fn: Verb) -> Verb:
        VERBS[name] = (fn, arguments, help_text)
        return fn

    return register
