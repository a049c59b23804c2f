"""The package's rooms keep their walls: no import cycles, and no import across a wall.

Read from the source with ``ast``, so every import counts: at the top, inside functions and under
``TYPE_CHECKING`` alike (a type-only import still ties two modules' designs together).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "supervisor"
SCRIPTS = ROOT / "scripts"

LIBRARY = "supervisor.queue"
# The rooms of the processes, by side of the fork: the child's (its loop and what it runs), the
# master's (its loop, slots, wake-ups) with its services, and what both sides read.
CHILD = "supervisor.child"
MASTER = "supervisor.master"
SERVICES = "supervisor.services"
SHARED = "supervisor.shared"
# The master's database sessions: below the master and its services, which both use them.
SESSIONS = "supervisor.sessions"
# The command line, and what it shows that the dashboard shows too (below both).
CLI = "supervisor.cli"
VIEWS = "supervisor.views"


def module_names(top: Path, prefix: str) -> dict[str, Path]:
    """Every module under ``top``: dotted name -> file (a package is its __init__)."""
    found = {}
    for path in sorted(top.rglob("*.py")):
        parts = list(path.relative_to(top).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([prefix, *parts] if prefix else parts)] = path
    return found


def imports_of(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The known modules that the module ``name`` imports, anywhere in its text."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` names a module when pkg/mod.py exists, else a name in pkg.
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph(top: Path, prefix: str) -> dict[str, set[str]]:
    known = module_names(top, prefix)
    return {name: imports_of(path, name, known) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def reachable(edges: dict[str, set[str]], start: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        v = todo.pop()
        for w in edges.get(v, ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def within(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


@pytest.fixture(scope="module")
def package() -> dict[str, set[str]]:
    return graph(PACKAGE, "supervisor")


def test_the_package_has_no_import_cycle(package: dict[str, set[str]]) -> None:
    assert cycles(package) == []


def test_the_scripts_have_no_import_cycle() -> None:
    # Each kind of script (benchmarks, drills, demo, model, tools) is run from its own folder,
    # which is on its path: its modules import each other by their names there.
    kinds = sorted(
        path for path in SCRIPTS.iterdir() if path.is_dir() and path.name != "__pycache__"
    )
    assert [kind.name for kind in kinds] == ["benchmarks", "demo", "drills", "model", "tools"]
    for kind in kinds:
        edges = graph(kind, "")
        assert any(edges.values()) or kind.name in ("model", "tools"), f"{kind}: no import seen"
        assert cycles(edges) == []


def test_the_library_imports_nothing_but_itself(package: dict[str, set[str]]) -> None:
    library = [name for name in package if within(name, LIBRARY)]
    assert library, "the library room moved: update LIBRARY"
    outside = {
        f"{name} -> {target}"
        for name in library
        for target in package[name]
        if not within(target, LIBRARY)
    }
    assert outside == set()


def room(package: dict[str, set[str]], *names: str) -> set[str]:
    found = {name for name in package if any(within(name, r) for r in names)}
    assert found, f"a room moved: update {names}"
    return found


def crossings(package: dict[str, set[str]], source: str, *walls: str) -> set[str]:
    """Every module of the room ``source`` reaches, directly or not, inside ``walls``."""
    return reachable(package, room(package, source)) & room(package, *walls)


def test_a_child_imports_nothing_of_the_master_or_its_services(
    package: dict[str, set[str]],
) -> None:
    assert crossings(package, CHILD, MASTER, SERVICES, SESSIONS) == set()


def test_the_masters_sessions_see_neither_the_master_nor_its_services(
    package: dict[str, set[str]],
) -> None:
    assert crossings(package, SESSIONS, MASTER, SERVICES, CHILD) == set()


def test_nothing_below_the_command_line_imports_it(package: dict[str, set[str]]) -> None:
    # The command line is the top room: the master (which runs the doctor's checks), the
    # dashboard and every room they stand on import nothing of it; what both the command line
    # and the dashboard show lives in views/, below both.
    others = {name for name in package if not within(name, CLI)}
    reaching = {
        f"{name} -> {target}" for name in others for target in package[name] if within(target, CLI)
    }
    assert reaching == set()


def test_the_views_see_neither_the_command_line_nor_the_dashboard(
    package: dict[str, set[str]],
) -> None:
    assert crossings(package, VIEWS, CLI, "supervisor.web", MASTER, SERVICES, CHILD) == set()


def test_the_services_see_the_master_only_through_their_host(
    package: dict[str, set[str]],
) -> None:
    assert crossings(package, SERVICES, MASTER, CHILD) == set()


def test_what_both_sides_share_imports_neither_side(package: dict[str, set[str]]) -> None:
    assert crossings(package, SHARED, CHILD, MASTER, SERVICES) == set()


def test_the_metrics_read_a_view_not_the_master(package: dict[str, set[str]]) -> None:
    assert crossings(package, "supervisor.observability", MASTER, SERVICES, CHILD) == set()


def test_the_dashboard_reads_the_database_not_the_processes(package: dict[str, set[str]]) -> None:
    # The web dashboard is a separate process: what it knows of supervisors and children comes
    # from the registry in the database, never from the master's or the child's code.
    assert crossings(package, "supervisor.web", MASTER, SERVICES, CHILD) == set()


def test_the_walls_would_be_seen(tmp_path: Path) -> None:
    """The checks above can fail: a cycle and a forbidden import are found when present."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    known = {"supervisor.queue.jobs": Path(), "supervisor.master.loop": Path()}
    source = tmp_path / "jobs.py"
    source.write_text("def f():\n    from supervisor.master import loop\n")
    assert imports_of(source, "supervisor.queue.jobs", known) == {"supervisor.master.loop"}
    # A child module reaching the master through a shared one is a crossing too.
    leaky = {
        "supervisor.child.a": {"supervisor.shared.b"},
        "supervisor.shared.b": {"supervisor.master.c"},
        "supervisor.master.c": set(),
    }
    assert crossings(leaky, CHILD, MASTER, SERVICES) == {"supervisor.master.c"}


def test_the_scripts_index_names_every_script() -> None:
    """scripts/README.md says what each script prints: a new one is listed there too."""
    index = (SCRIPTS / "README.md").read_text(encoding="utf-8")
    scripts = [
        path
        for path in sorted(SCRIPTS.glob("*/*"))
        if path.suffix in (".py", ".sh") and not path.name.startswith("__")
    ]
    assert scripts, "no script found"
    assert [p.name for p in scripts if f"`{p.name}`" not in index] == []
