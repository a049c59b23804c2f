"""Importing configured handlers: every failure is reported, nothing is imported twice."""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from supervisor.config import Config, ConfigError, parse_config
from supervisor.config.handlers import Handler, ensure_cwd_importable, load_handlers, wants_context
from supervisor.queue.context import JobContext

WriteModule = Callable[[str, str], str]


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WriteModule]:
    """Write a module under a unique name into an importable folder; return that name."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written: list[str] = []

    def write(stem: str, source: str) -> str:
        name = f"{stem}_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def config_for(handlers: dict[str, str]) -> Config:
    lines = "".join(f"  {kind}: '{target}'\n" for kind, target in handlers.items())
    text = f"handlers:\n{lines}pools:\n  p:\n    queues: {{q: 1}}\n"
    return parse_config(text, source="queues.yaml", env={})


def failures(handlers: dict[str, str]) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        load_handlers(config_for(handlers))
    return {issue.path: issue.message for issue in caught.value.issues}


def context() -> JobContext:
    now = datetime.now(timezone.utc)
    return JobContext(1, "k", "q", 1, 5, 7, "w", now)


def test_good_handlers_with_and_without_job_parameter(write_module: WriteModule) -> None:
    module = write_module(
        "good",
        """
        def with_job(order_id, *, job):
            return (order_id, job.id)

        def without_job(order_id):
            return order_id * 2
        """,
    )
    handlers = load_handlers(config_for({"a": f"{module}:with_job", "b": f"{module}:without_job"}))
    assert handlers["a"].wants_context is True
    assert handlers["b"].wants_context is False
    assert handlers["a"].target == f"{module}:with_job"
    assert handlers["a"]({"order_id": 3}, context()) == (3, 1)
    assert handlers["b"]({"order_id": 3}, context()) == 6
    assert handlers["b"]({"order_id": 4}, None) == 8


def test_handler_call_passes_none_as_job_without_context() -> None:
    seen: list[object] = []

    def handler(*, job: object) -> None:
        seen.append(job)

    Handler("k", "m:handler", handler, wants_context(handler))({}, None)
    assert seen == [None]


def _positional_or_keyword(job): ...
def _keyword_only(*, job): ...
def _positional_only(job, /): ...
def _var_keyword(**kwargs): ...
def _other_name(context): ...


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        (_positional_or_keyword, True),
        (_keyword_only, True),
        (_positional_only, False),
        (_var_keyword, False),
        (_other_name, False),
        (len, False),
    ],
)
def test_wants_context(func: Callable[..., object], expected: bool) -> None:
    assert wants_context(func) is expected


def test_every_failure_is_reported_with_its_kind(
    write_module: WriteModule, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    raises = write_module("raises", "raise RuntimeError('no API key in the environment')\n")
    broken = write_module("broken", "def f(:\n    pass\n")
    exits = write_module("exits", "import sys\nsys.exit(3)\n")
    plain = write_module(
        "plain",
        """
        answer = 42

        async def later():
            pass

        def fine():
            pass
        """,
    )
    found = failures(
        {
            "raises": f"{raises}:f",
            "syntax": f"{broken}:f",
            "exits": f"{exits}:f",
            "missing_module": "no_such_module_pgq:f",
            "missing_attribute": f"{plain}:nope",
            "not_callable": f"{plain}:answer",
            "async": f"{plain}:later",
            "fine": f"{plain}:fine",
        }
    )
    assert found == {
        "handlers.raises": (
            f"cannot import module {raises!r}: RuntimeError: no API key in the environment"
        ),
        "handlers.syntax": found["handlers.syntax"],
        "handlers.exits": f"cannot import module {exits!r}: SystemExit: 3",
        "handlers.missing_module": (
            "cannot import module 'no_such_module_pgq': "
            "ModuleNotFoundError: No module named 'no_such_module_pgq' "
            f"(looked in the working directory {os.getcwd()}: start pgq-supervisor from the "
            "project root (WorkingDirectory= in a systemd unit) or add it to PYTHONPATH)"
        ),
        "handlers.missing_attribute": f"module {plain!r} has no attribute 'nope'",
        "handlers.not_callable": f"'{plain}:answer' is not callable (it is a int)",
        "handlers.async": f"'{plain}:later' is an async function; handlers must be plain functions",
    }
    assert found["handlers.syntax"].startswith(f"cannot import module {broken!r}: SyntaxError: ")
    assert f"{broken}.py, line 1" in found["handlers.syntax"]


def test_errors_point_at_the_handler_line(write_module: WriteModule) -> None:
    plain = write_module("plain", "x = 1\n")
    with pytest.raises(ConfigError) as caught:
        load_handlers(config_for({"first": f"{plain}:x", "second": f"{plain}:y"}))
    assert [(i.path, i.line) for i in caught.value.issues] == [
        ("handlers.first", 2),
        ("handlers.second", 3),
    ]
    assert str(caught.value).splitlines()[0] == (
        f"queues.yaml: handlers.first: '{plain}:x' is not callable (it is a int) (line 2)"
    )


def test_dotted_attributes_resolve(write_module: WriteModule) -> None:
    module = write_module(
        "dotted",
        """
        class Jobs:
            @staticmethod
            def render(n):
                return n + 1
        """,
    )
    handlers = load_handlers(config_for({"render": f"{module}:Jobs.render"}))
    assert handlers["render"]({"n": 1}, None) == 2
    assert failures({"render": f"{module}:Jobs.missing"}) == {
        "handlers.render": "type 'Jobs' has no attribute 'missing'"
    }


def test_a_failing_module_is_imported_once_for_all_its_kinds(
    write_module: WriteModule, tmp_path: Path
) -> None:
    log = tmp_path / "imports.log"
    module = write_module(
        "counted",
        f"""
        with open({str(log)!r}, "a") as f:
            f.write("imported\\n")
        raise RuntimeError("boom")
        """,
    )
    found = failures({"a": f"{module}:f", "b": f"{module}:g"})
    assert set(found) == {"handlers.a", "handlers.b"}
    assert log.read_text().splitlines() == ["imported"]


def test_handler_modules_are_found_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"cwd_tasks_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def run():\n    return 'ran'\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    # What a console-script entry point sees: neither '' nor the cwd on sys.path.
    cwd = os.getcwd()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", cwd)])
    try:
        handlers = load_handlers(config_for({"run": f"{name}:run"}))
    finally:
        sys.modules.pop(name, None)
    assert handlers["run"]({}, None) == "ran"
    assert sys.path[0] == cwd


def test_ensure_cwd_importable_adds_the_cwd_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cwd = os.getcwd()
    monkeypatch.setattr(sys, "path", ["/usr/lib/python3/site-packages"])
    ensure_cwd_importable()
    ensure_cwd_importable()
    assert sys.path == [cwd, "/usr/lib/python3/site-packages"]


def test_ensure_cwd_importable_leaves_an_empty_entry_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["", "/lib"])
    ensure_cwd_importable()
    assert sys.path == ["", "/lib"]


def test_a_module_not_found_names_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, write_module: WriteModule
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    # The handler's own module missing: the working directory is the likely cause.
    with pytest.raises(ConfigError) as caught:
        load_handlers(config_for({"k": "myapp_not_here.tasks:run"}))
    assert f"looked in the working directory {elsewhere}" in str(caught.value)
    assert "project root" in str(caught.value)
    # A dependency the module imports is missing: a different problem, no such hint.
    name = write_module("needs_dep", "import some_dependency_not_installed\n")
    with pytest.raises(ConfigError) as caught:
        load_handlers(config_for({"k": f"{name}:run"}))
    assert "some_dependency_not_installed" in str(caught.value)
    assert "working directory" not in str(caught.value)
