"""The supervisor's YAML configuration: ``load_config(path)`` gives a validated ``Config``.

Every mistake in the file is collected and raised at once as a ``ConfigError`` whose lines
name the key path (``pools.pdf.queues.reports: weight must be a positive integer, got 0``), so
an operator fixes a file in one round instead of one error per restart. Reading is pure (no
imports, no connections), which lets the master re-read the file on SIGHUP and keep the
running configuration when the new one is broken.

String values may use ``${VAR}``, ``${VAR:-default}`` and ``$$`` (a literal ``$``); see
``reader`` for the rules.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from yaml.nodes import MappingNode, ScalarNode

from supervisor.config.fields import Section
from supervisor.config.model import (
    Config,
    ConfigError,
    ConfigIssue,
    DatabaseConfig,
    DoctorConfig,
    HistoryConfig,
    JobPolicy,
    LeaseConfig,
    LogConfig,
    MetricsConfig,
    PoolConfig,
    PurgeConfig,
    QueueLimits,
    Rate,
    RescueConfig,
    ScheduleConfig,
    TenantLimits,
    VacuumConfig,
)
from supervisor.config.reader import Reader, SyntaxProblem, compose, describe
from supervisor.config.schema import TOP_KEYS, build_config

__all__ = [
    "Config",
    "ConfigError",
    "ConfigIssue",
    "DatabaseConfig",
    "DoctorConfig",
    "HistoryConfig",
    "JobPolicy",
    "LeaseConfig",
    "LogConfig",
    "MetricsConfig",
    "PoolConfig",
    "PurgeConfig",
    "QueueLimits",
    "Rate",
    "RescueConfig",
    "ScheduleConfig",
    "TenantLimits",
    "VacuumConfig",
    "load_config",
    "parse_config",
]


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    """Read and validate the file at ``path``; ``env`` (default ``os.environ``) feeds ${VAR}."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as file:
            raw = file.read()
    except OSError as exc:
        problem = f"cannot read the file: {exc.strerror or exc}"
        raise ConfigError([ConfigIssue("", problem)], source) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
        raise ConfigError([ConfigIssue("", problem)], source) from None
    return parse_config(text, source=source, env=env)


def parse_config(text: str, *, source: str, env: Mapping[str, str] | None = None) -> Config:
    """Validate YAML ``text``; ``source`` is the name shown in error messages."""
    try:
        root, loader = compose(text)
    except SyntaxProblem as problem:
        raise ConfigError([problem.issue], source) from None
    reader = Reader(loader, os.environ if env is None else env)
    if root is None:
        needed = "it needs at least 'handlers' and 'pools'"
        raise ConfigError([ConfigIssue("", f"the file is empty; {needed}")], source)
    reader.check_tags(root)
    if not isinstance(root, MappingNode):
        if not reader.issues:
            sections = ", ".join(TOP_KEYS[:3])
            problem = f"the top level must be a mapping of sections ({sections}, ...)"
            got = root.value if isinstance(root, ScalarNode) else root
            reader.report("", f"{problem}, got {describe(got)}", root)
        raise ConfigError(reader.issues, source)
    config = build_config(reader, Section(reader, root, ""), source)
    if reader.issues:
        raise ConfigError(reader.issues, source)
    return config
