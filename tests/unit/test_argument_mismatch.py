"""argument_mismatch's quick check by names (read from the signature once) says what binding
the arguments to the signature says, for every kind of parameter."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from supervisor.config.handlers import argument_mismatch


def plain(a: int, b: int = 2) -> None: ...
def keyword_only(*, a: int, b: int = 2) -> None: ...
def any_keyword(a: int, **rest: Any) -> None: ...
def positional_only(a: int, /, b: int = 2) -> None: ...
def with_job(a: int, *, job: Any) -> None: ...
def star_args(*values: int, a: int = 1) -> None: ...


CASES = [{}, {"a": 1}, {"a": 1, "b": 2}, {"b": 2}, {"a": 1, "c": 3}, {"c": 3}]


@pytest.mark.parametrize(
    "func", [plain, keyword_only, any_keyword, positional_only, with_job, star_args]
)
@pytest.mark.parametrize("args", CASES)
def test_the_quick_check_agrees_with_binding(func: Any, args: dict[str, Any]) -> None:
    wants = func is with_job
    named = {**args, "job": None} if wants else args
    try:
        inspect.signature(func).bind(**named)
        binds = True
    except TypeError:
        binds = False
    said = argument_mismatch(func, args, wants_context=wants)
    assert (said is None) == binds, (func.__name__, args, said)
    if not binds:
        assert "the handler takes" in said
