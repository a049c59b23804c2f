"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages generated at build time.

docs/reference/configuration.md comes from the config schema (supervisor.config.reference),
docs/reference/cli.md from the command line's own parser, docs/reference/python-api.md from
the public names' signatures and docstrings, and /pgq-supervisor.schema.json is the
JSON Schema shipped in the package, so none of them can fall behind the code: a key, a verb or an
option added there is on the site at the next build. tests/unit/test_docs_reference.py renders
them too, without MkDocs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GENERAL_EXITS = [
    ("0", "success (`run`: a clean stop)"),
    ("1", "anything else: a database error, a job named that is missing or left as it was"),
    ("2", "bad configuration or usage, found before anything connects, writes or forks"),
    ("3", "`run`: a pool's children cannot boot (every slot failed 5 times in a row)"),
]


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse._SubParsersAction[Any]]:
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.dest in ("config", "dsn") and action.default is argparse.SUPPRESS:
            continue  # the shared -c/--dsn, listed once under the global options
        if action.option_strings:
            name = ", ".join(f"`{o}`" for o in action.option_strings)
            if action.nargs != 0 and action.metavar:
                name += f" `{action.metavar}`"
            elif action.nargs != 0 and action.choices:
                name += " `{" + ",".join(map(str, action.choices)) + "}`"
        else:
            name = f"`{action.metavar or action.dest}`"
        text = (action.help or "").replace("|", "/").replace("\n", " ")
        if action.required and action.option_strings:
            text = f"required; {text}"
        rows.append(f"| {name} | {text} |")
    if not rows:
        return []
    return ["| argument | meaning |", "|---|---|", *rows, ""]


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    usage = parser.format_usage().replace("usage: ", "", 1).rstrip()
    return ["```", usage, "```", ""]


def cli_markdown() -> str:
    """docs/reference/cli.md: every verb, its usage, its arguments and its exit codes."""
    import os

    from supervisor.cli.main import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps usage to the terminal: the same everywhere
    parser = build_parser()
    lines = [
        "# Command line reference",
        "",
        "<!-- Generated from the parser (supervisor/cli) when the docs are built. -->",
        "",
        "`pgq-supervisor -c FILE VERB ...`: `-c FILE` (and `--dsn`) may come before or after the",
        "verb. Without a verb, `run`. Every verb that prints a result takes `--json` (one JSON",
        "document on stdout); a verb without it says so, with its usage, and exits 2.",
        "",
        "## Global options",
        "",
        *_usage(parser),
        *_options(parser),
        "## Exit codes",
        "",
        "| code | meaning |",
        "|---|---|",
        *(f"| {code} | {meaning} |" for code, meaning in GENERAL_EXITS),
        "",
        "Each verb's own codes are in its description below. A reader that leaves early",
        "(`jobs list --json | head`) ends the command quietly, exit 1.",
        "",
    ]
    (verbs,) = _subparsers(parser)
    for name, verb in verbs.choices.items():
        about = (verb.description or "").strip()
        lines += [f"## `{name}`", "", about[:1].upper() + about[1:] + ".", ""]
        subs = _subparsers(verb)
        if not subs:
            lines += _usage(verb) + _options(verb)
            continue
        helps = {a.dest: a.help for a in subs[0]._choices_actions}
        for sub_name, sub in subs[0].choices.items():
            lines += [f"### `{name} {sub_name}`", ""]
            about = sub.description or helps.get(sub_name)
            if about:
                about = about.strip().rstrip(".")
                lines += [about[:1].upper() + about[1:] + ".", ""]
            lines += _usage(sub) + _options(sub)
    return "\n".join(lines) + "\n"


def _documented(owner: str, name: str, obj: Any) -> list[str]:
    import inspect

    title = f"### `{owner}.{name}`" if owner != "supervisor" else f"### `{name}`"
    lines = [title, ""]
    try:
        signature = str(inspect.signature(obj))
    except (TypeError, ValueError):
        signature = ""
    kind = "class " if inspect.isclass(obj) else ""
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        kind = "exception "
    lines += ["```python", f"{kind}{name}{signature}", "```", ""]
    doc = inspect.getdoc(obj) or ""
    if doc and not (inspect.isclass(obj) and doc == inspect.getdoc(obj.__mro__[1])):
        lines += [doc.replace("<", "&lt;"), ""]
    return lines


API_GROUPS = [
    (
        "Enqueue",
        [
            "enqueue",
            "enqueue_many",
            "enqueue_async",
            "enqueue_many_async",
            "NewJob",
            "EnqueueError",
        ],
    ),
    ("Inside a handler", ["JobContext", "Retry", "Discard", "Snooze"]),
    (
        "Operate",
        [
            "cancel",
            "pause_queue",
            "resume_queue",
            "paused_queues",
            "retry_now",
            "list_jobs",
            "show_job",
            "migrate",
        ],
    ),
    (
        "The queue's primitives (what the supervisor itself uses)",
        ["claim", "complete", "settle", "renew_leases", "Job", "Fenced", "LeaseLost"],
    ),
]


def python_api_markdown() -> str:
    """docs/reference/python-api.md: the public names, their signatures and docstrings."""
    import supervisor
    import supervisor.testing

    lines = [
        "# Python API",
        "",
        "<!-- Generated from the package's docstrings when the docs are built. -->",
        "",
        "Everything here imports from `supervisor` (`from supervisor import enqueue`), except the",
        "testing helpers (`supervisor.testing`) and the dashboard (`supervisor.web`). The",
        "functions take a psycopg 3 connection and work inside the caller's transaction.",
        "",
    ]
    listed = set()
    for group, names in API_GROUPS:
        lines += [f"## {group}", ""]
        for name in names:
            listed.add(name)
            lines += _documented("supervisor", name, getattr(supervisor, name))
    rest = [n for n in supervisor.__all__ if n not in listed]
    if rest:
        lines += ["## Other names", ""]
        for name in rest:
            lines += _documented("supervisor", name, getattr(supervisor, name))
    lines += ["## Testing handlers: `supervisor.testing`", ""]
    for name in ("run_inline", "drain", "Outcome", "DrainReport"):
        lines += _documented("supervisor.testing", name, getattr(supervisor.testing, name))
    try:
        from supervisor.web import create_app
    except ImportError:  # the web extra is not installed where the docs are built
        pass
    else:
        lines += ["## The dashboard: `supervisor.web`", ""]
        lines += _documented("supervisor.web", "create_app", create_app)
    return "\n".join(lines) + "\n"


def configuration_markdown() -> str:
    from supervisor.config.reference import reference_markdown

    return reference_markdown()


def schema_json() -> str:
    from supervisor.config.reference import json_schema

    return json.dumps(json_schema(), indent=2) + "\n"


GENERATED = {
    "reference/configuration.md": configuration_markdown,
    "reference/cli.md": cli_markdown,
    "reference/python-api.md": python_api_markdown,
    "pgq-supervisor.schema.json": schema_json,
}


# Pages other parts of the project add under docs/ (one per topic), and the nav section each
# belongs in. Any other page found under docs/ and missing from mkdocs.yml's nav goes under
# "More", so a page added without touching mkdocs.yml is still on the site (and the strict
# build does not fail on it).
PLACES = {
    "claim-order.md": "Explanations",
    "outcomes.md": "Explanations",
    "enqueue_wakeups.md": "Explanations",
    "doctor.md": "How-to guides",
    "limits.md": "How-to guides",
    "time-and-upgrades.md": "How-to guides",
    "dashboard-security.md": "How-to guides",
}


def nav_pages(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in nav_pages(value)]
    return []


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return path.stem.replace("-", " ").replace("_", " ").capitalize()


def complete_nav(nav: list[Any], docs_dir: Path) -> list[Any]:
    """``nav`` with every page under ``docs_dir`` that it does not name yet, in its place."""
    listed = set(nav_pages(nav))
    generated = {uri for uri in GENERATED if uri.endswith(".md")}
    missing = sorted(
        str(p.relative_to(docs_dir))
        for p in docs_dir.rglob("*.md")
        if str(p.relative_to(docs_dir)) not in listed | generated
    )
    for page in missing:
        section = PLACES.get(page, "More")
        entry = {_title(docs_dir / page): page}
        for item in nav:
            if isinstance(item, dict) and section in item:
                item[section].append(entry)
                break
        else:
            nav.append({section: [entry]})
    return nav


def on_config(config: Any) -> Any:
    config["nav"] = complete_nav(config["nav"], Path(config["docs_dir"]))
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, render in GENERATED.items():
        files.append(File.generated(config, uri, content=render()))
    return files
