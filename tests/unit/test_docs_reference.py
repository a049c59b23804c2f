"""The documentation that is generated from the code stays true to it: every configuration key
the schema reads has a line of help, the JSON Schema shipped for editors is the one the schema
gives today, the command line page lists every verb, and every page under docs/ is in the
site's navigation (mkdocs build --strict, run by scripts/test.sh, fails on an orphan too)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from supervisor.config import parse_config
from supervisor.config.reference import HELP, json_schema, keys, reference_markdown

ROOT = Path(__file__).resolve().parent.parent.parent
SHIPPED = ROOT / "supervisor" / "config" / "pgq-supervisor.schema.json"
sys.path.insert(0, str(ROOT / "scripts" / "tools"))
import docs_hooks  # noqa: E402


def test_every_key_the_schema_reads_has_help_and_no_help_is_stale() -> None:
    read = {k.path for k in keys()}
    assert "pools.<pool>.processes" in read and "schedules.<name>.missed" in read
    undocumented = sorted(read - set(HELP))
    assert not undocumented, f"add a line to HELP in supervisor/config/reference.py: {undocumented}"
    stale = sorted(set(HELP) - read)
    assert not stale, f"HELP names keys the schema no longer reads: {stale}"


def test_the_shipped_json_schema_is_current() -> None:
    shipped = json.loads(SHIPPED.read_text())
    assert shipped == json_schema(), (
        "regenerate it: python -m supervisor.config.reference > "
        "supervisor/config/pgq-supervisor.schema.json"
    )


def _check(schema: dict, value: object, path: str) -> list[str]:
    """A small validator for the subset the schema uses (jsonschema is not a dependency)."""
    problems = []
    if isinstance(value, dict):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, inner in value.items():
            if key in props:
                problems += _check(props[key], inner, f"{path}.{key}")
            elif isinstance(extra, dict):
                problems += _check(extra, inner, f"{path}.{key}")
            elif extra is False:
                problems.append(f"{path}.{key}: not in the schema")
        problems += [f"{path}.{r}: required" for r in schema.get("required", []) if r not in value]
    return problems


def test_the_example_configurations_match_the_json_schema_and_a_typo_does_not() -> None:
    schema = json_schema()
    readme = (ROOT / "README.md").read_text()
    quick = re.search(r'```yaml title="queues.yaml"\n(.*?)```', readme, re.S)
    assert quick
    for text in ((ROOT / "config" / "queues.yaml").read_text(), quick[1]):
        assert _check(schema, yaml.safe_load(text), "") == []
        parse_config(text, source="example", env={})  # and check accepts it
    typo = yaml.safe_load(quick[1].replace("processes:", "procesess:"))
    assert _check(schema, typo, "") == [".pools.main.procesess: not in the schema"]


def test_the_configuration_page_lists_every_key() -> None:
    page = reference_markdown()
    for key in keys():
        assert f"| `{key.path}` |" in page


def test_the_cli_page_lists_every_verb_and_its_exit_codes() -> None:
    from supervisor.cli.main import build_parser
    from supervisor.cli.verbs import VERBS

    build_parser()
    page = docs_hooks.cli_markdown()
    for name in VERBS:
        assert f"## `{name}`" in page
    assert "### `jobs show`" in page and "### `queues pause`" in page
    assert "| 2 | bad configuration or usage" in page


def test_the_python_api_page_has_every_public_name() -> None:
    import supervisor

    page = docs_hooks.python_api_markdown()
    for name in supervisor.__all__:
        assert f"### `{name}`" in page


def test_every_page_under_docs_is_on_the_site(tmp_path: Path) -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    docs = ROOT / "docs"
    nav = docs_hooks.complete_nav(config["nav"], docs)
    listed = set(docs_hooks.nav_pages(nav))
    pages = {str(p.relative_to(docs)) for p in docs.rglob("*.md")}
    generated = {uri for uri in docs_hooks.GENERATED if uri.endswith(".md")}
    assert pages - listed == set()
    assert listed - pages - generated == set(), "the nav names pages that do not exist"
    # A page another part of the project adds lands in its section, or under More.
    (tmp_path / "doctor.md").write_text("# Doctor\n")
    (tmp_path / "new-topic.md").write_text("text\n")
    grown = docs_hooks.complete_nav([{"How-to guides": []}], tmp_path)
    assert grown == [
        {"How-to guides": [{"Doctor": "doctor.md"}]},
        {"More": [{"New topic": "new-topic.md"}]},
    ]
