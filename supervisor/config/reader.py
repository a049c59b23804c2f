"""Reading the YAML file as a tree of nodes, safely, with line numbers and ${VAR} interpolation.

The file is only ever *composed* into nodes; no YAML constructor runs on it. Scalars are turned
into Python values here, one whitelisted type at a time, so a tag such as
``!!python/object/apply:os.system`` can be reported with its line but can never build anything.
Working on nodes also keeps every value's line for error messages and lets us see duplicate
keys, which PyYAML's constructors would silently collapse to the last one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from supervisor.config.model import ConfigIssue

_YAML = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL = (_YAML + t for t in ("str", "int", "float", "bool", "null"))
TIMESTAMP, MERGE, MAP, SEQ = (_YAML + t for t in ("timestamp", "merge", "map", "seq"))
_ALLOWED_TAGS = {STR, INT, FLOAT, BOOL, NULL, TIMESTAMP, MERGE, MAP, SEQ}

_PLAIN_KEY = re.compile(r"[\w-]+")
_INTERPOLATION = re.compile(r"\$(\$|\{([^}]*)\}|)")
_VARIABLE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?", re.DOTALL)
_WHOLE_EXPRESSION = re.compile(r"\$\{[^}]*\}")


class SafeComposer(yaml.SafeLoader):
    """SafeLoader used only to compose nodes and resolve plain scalars; never to construct."""


class Bad(Exception):
    """A value is wrong; raised by converters and turned into a ConfigIssue by the caller.

    ``got`` is the offending value when it is worth showing. A Bad with no problem means the
    node was already reported (a forbidden tag) and must not be reported twice.
    """

    _NOTHING = object()

    def __init__(self, problem: str | None, got: object = _NOTHING) -> None:
        super().__init__(problem)
        self.problem = problem
        self.got = got

    @property
    def has_value(self) -> bool:
        return self.got is not Bad._NOTHING


def join(path: str, key: str) -> str:
    """``pools.pdf`` + ``reports.v2`` -> ``pools.pdf["reports.v2"]``: keys with dots stay whole."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def line_of(node: Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None and node.start_mark else None


def show_tag(tag: str) -> str:
    return "!!" + tag[len(_YAML) :] if tag.startswith(_YAML) else tag


def describe(value: object) -> str:
    """A value as an operator would write it in YAML, shortened."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null (an empty value)"
    elif isinstance(value, MappingNode):
        text = "a mapping"
    elif isinstance(value, SequenceNode):
        text = "a list"
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SyntaxProblem(Exception):
    """The text is not YAML at all; ``issue`` says where."""

    def __init__(self, issue: ConfigIssue) -> None:
        super().__init__(issue.message)
        self.issue = issue


def compose(text: str) -> tuple[Node | None, SafeComposer]:
    """The document's root node (None for an empty file) and the loader that resolves scalars."""
    try:
        loader = SafeComposer(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - text.rfind("\n", 0, exc.position)
        problem = f"unacceptable character #x{exc.character:04x}: {exc.reason}"
        raise SyntaxProblem(ConfigIssue("", problem, line, column)) from None
    try:
        return loader.get_single_node(), loader
    except yaml.MarkedYAMLError as exc:
        raise SyntaxProblem(_syntax_issue(exc)) from None
    except yaml.YAMLError as exc:
        raise SyntaxProblem(ConfigIssue("", f"not valid YAML: {exc}")) from None
    except RecursionError:
        # The composer recurses once per nesting level; no real configuration comes close.
        raise SyntaxProblem(ConfigIssue("", "the YAML is nested too deeply")) from None
    finally:
        loader.dispose()


def _syntax_issue(exc: yaml.MarkedYAMLError) -> ConfigIssue:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "not valid YAML"
    if exc.context and problem.startswith("but "):
        # "expected a single document in the stream" + "but found another document"
        problem = f"{exc.context}, {problem}"
    elif exc.context and exc.problem:
        context_mark = exc.context_mark
        where = f" on line {context_mark.line + 1}" if context_mark is not None else ""
        problem += f" ({exc.context}{where})"
    if mark is None:
        return ConfigIssue("", problem)
    return ConfigIssue("", problem, line=mark.line + 1, column=mark.column + 1)


@dataclass
class Interpolated:
    text: str
    from_env: list[str]  # variables whose value (not a default) went into the text


def interpolate(text: str, env: Mapping[str, str]) -> Interpolated:
    """Replace ``${VAR}``, ``${VAR:-default}`` and ``$$``; raise Bad for a missing variable.

    ``${VAR}`` with VAR set to the empty string gives the empty string, as in a shell;
    ``${VAR:-default}`` uses the default when VAR is unset or empty.
    """
    missing: list[str] = []
    from_env: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        if match.group(1) == "$":
            return "$"
        body = match.group(2)
        variable = _VARIABLE.fullmatch(body) if body is not None else None
        if variable is None:
            shown = match.group(0) or "$"
            raise Bad(
                f"bad interpolation {shown!r}: write ${{NAME}} or ${{NAME:-default}}, "
                "and $$ for a literal '$'"
            )
        name, default = variable.group("name"), variable.group("default")
        value = env.get(name)
        if default is not None and not value:
            return default
        if value is None:
            missing.append(name)
            return ""
        from_env.append(name)
        return value

    result = _INTERPOLATION.sub(substitute, text)
    if missing:
        names = list(dict.fromkeys(missing))
        subject = "environment variables" if len(names) > 1 else "environment variable"
        them = "them" if len(names) > 1 else "it"
        raise Bad(
            f"{subject} {' and '.join(names)} not set; set {them} or give a default like "
            f"${{{names[0]}:-value}}"
        )
    return Interpolated(result, from_env)


class Reader:
    """Turns nodes into values and collects every issue on the way."""

    def __init__(self, loader: SafeComposer, env: Mapping[str, str]) -> None:
        self.loader = loader
        self.env = env
        self.issues: list[ConfigIssue] = []
        self.lines: dict[str, int] = {}
        self._forbidden: set[int] = set()
        self._pairs: dict[int, dict[str, tuple[Node, Node]]] = {}
        self._secret_nodes: dict[int, list[str]] = {}

    def report(self, path: str, problem: str, node: Node | None = None) -> None:
        self.issues.append(ConfigIssue(path, problem, line_of(node)))

    def report_bad(self, path: str, bad: Bad, node: Node | None) -> None:
        if bad.problem is None:
            return
        problem = bad.problem
        if bad.has_value:
            names = self._secret_nodes.get(id(node)) if node is not None else None
            # A value read from the environment may be a secret: name its source instead.
            shown = f"the value of ${names[0]} (not shown)" if names else describe(bad.got)
            problem = f"{problem}, got {shown}"
        self.report(path, problem, node)

    def check_tags(self, root: Node) -> None:
        """Report every tag that is not a plain YAML type, anywhere in the file."""
        seen: set[int] = set()
        stack = [root]
        while stack:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if node.tag not in _ALLOWED_TAGS:
                self._forbidden.add(id(node))
                mark = node.start_mark
                self.issues.append(
                    ConfigIssue(
                        "",
                        f"YAML tag {show_tag(node.tag)!r} is not allowed (only plain values "
                        "are; nothing in this file is ever run)",
                        line=mark.line + 1,
                        column=mark.column + 1,
                    )
                )
            if isinstance(node, MappingNode):
                for key, value in node.value:
                    stack.extend((key, value))
            elif isinstance(node, SequenceNode):
                stack.extend(node.value)

    def forbidden(self, node: Node) -> bool:
        return id(node) in self._forbidden

    def pairs(self, node: MappingNode, path: str) -> dict[str, tuple[Node, Node]]:
        """Key text -> (key node, value node), merges applied, duplicates reported.

        Keys are read as their literal text, never as YAML types: a queue called ``no`` or
        ``1`` stays the string "no" or "1" instead of becoming False or 1.
        """
        cached = self._pairs.get(id(node))
        if cached is not None:
            return cached
        self._pairs[id(node)] = {}  # a merge that includes itself finds nothing, not a loop
        own: dict[str, tuple[Node, Node]] = {}
        merged: dict[str, tuple[Node, Node]] = {}
        for key_node, value_node in node.value:
            if self.forbidden(key_node):
                continue
            if not isinstance(key_node, ScalarNode):
                self.report(path, f"keys must be plain text, got {describe(key_node)}", key_node)
                continue
            if key_node.tag == MERGE:
                for source in self._merge_sources(value_node, path):
                    for key, entry in self.pairs(source, path).items():
                        merged.setdefault(key, entry)
                continue
            key = key_node.value
            if key in own:
                first = line_of(own[key][0])
                self.report(join(path, key), f"duplicate key (first on line {first})", key_node)
                continue
            own[key] = (key_node, value_node)
        result = {**merged, **own}
        self._pairs[id(node)] = result
        return result

    def _merge_sources(self, node: Node, path: str) -> Iterator[MappingNode]:
        nodes = node.value if isinstance(node, SequenceNode) else [node]
        for source in nodes:
            if isinstance(source, MappingNode) and not self.forbidden(source):
                yield source
            elif not self.forbidden(source):
                self.report(path, "'<<' merges only mappings (or a list of them)", source)

    def scalar(self, node: Node, expected: str) -> object:
        """The Python value of a scalar node, after ${VAR} interpolation of text.

        A scalar that is one whole ``${...}`` means what its substituted text would mean
        written there, so ``processes: ${N:-2}`` (or ``"${N:-2}"``, as flow style needs) is the
        int 2. Only the scalar's type is re-resolved, never its structure: "a: b" or "[1]"
        from the environment stay text.
        """
        value = self.text(node, expected)
        if isinstance(value, str) and node.tag == STR and _WHOLE_EXPRESSION.fullmatch(node.value):
            tag = self.loader.resolve(ScalarNode, value, (True, False))
            return self._construct(ScalarNode(tag, value))
        return value

    def text(self, node: Node, expected: str) -> object:
        """Like ``scalar``, but interpolated text stays text (for settings that are strings)."""
        if self.forbidden(node):
            raise Bad(None)
        if not isinstance(node, ScalarNode):
            raise Bad(f"must be {expected}", node)
        if node.tag != STR:
            return self._construct(node)
        if "$" not in node.value:
            return node.value
        result = interpolate(node.value, self.env)
        if result.from_env:
            self._secret_nodes[id(node)] = result.from_env
        return result.text

    def _construct(self, node: ScalarNode) -> object:
        try:
            if node.tag == NULL:
                return None
            if node.tag == BOOL:
                return self.loader.construct_yaml_bool(node)
            if node.tag == INT:
                return self.loader.construct_yaml_int(node)
            if node.tag == FLOAT:
                return self.loader.construct_yaml_float(node)
        except (ValueError, KeyError):
            raise Bad(f"is not a valid {show_tag(node.tag)[2:]}", node.value) from None
        # Text, and timestamps, which no setting here wants as dates: keep what was written.
        return node.value
