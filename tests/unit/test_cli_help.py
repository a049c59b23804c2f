"""Every command's --help has a description and examples (issue 35), and every example is a
command line the parser accepts."""

from __future__ import annotations

import argparse
import shlex

import pytest

from supervisor.cli.examples import EXAMPLES
from supervisor.cli.main import build_parser


def commands(
    parser: argparse.ArgumentParser, words: str = ""
) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {words: parser}
    found: dict[str, argparse.ArgumentParser] = {}
    for name, sub in subs[0].choices.items():
        found.update(commands(sub, f"{words} {name}".strip()))
    return found


PARSER = build_parser()
COMMANDS = commands(PARSER)


@pytest.mark.parametrize("words", sorted(COMMANDS))
def test_every_command_has_a_description_and_examples(words: str) -> None:
    text = COMMANDS[words].format_help()
    assert COMMANDS[words].description, words
    assert "examples:\n  pgq-supervisor -c queues.yaml" in text, words


@pytest.mark.parametrize(
    "line", [e for lines in EXAMPLES.values() for e in lines], ids=lambda e: e[:60]
)
def test_every_example_parses(line: str) -> None:
    argv = shlex.split(line.split(" | ")[0])
    _, extra = PARSER.parse_known_args(argv)
    assert not extra, line


def test_no_example_for_a_command_that_does_not_exist() -> None:
    assert set(EXAMPLES) <= set(COMMANDS)
