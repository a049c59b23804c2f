"""Importing the configured handlers: job kind -> the function that runs it.

The master imports every handler once, before forking, so a missing module or a typo fails
``check`` and startup with exit code 2 instead of failing every job at run time, and children
inherit the imported code instead of importing it again. Only the kinds named in the YAML are
ever imported; nothing is imported because a database row says so.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

from supervisor.config.extras import install_hint
from supervisor.config.model import Config, ConfigError, ConfigIssue
from supervisor.config.reader import join
from supervisor.queue.context import JobContext

_CONTEXT_PARAMETER = "job"
_CONTEXT_KINDS = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@dataclass(frozen=True)
class Handler:
    kind: str
    target: str  # "module:function"
    func: Callable[..., Any]
    wants_context: bool  # the function declares a parameter named `job`

    def __call__(self, args: Mapping[str, Any], context: JobContext | None) -> Any:
        if self.wants_context:
            return self.func(**args, job=context)
        return self.func(**args)

    def mismatch(self, args: Any) -> str | None:
        """Why these arguments cannot be passed to the handler, or None; see argument_mismatch.
        A plain dict whose names bind is told apart here, with the handler's names read once
        (four calls and an ABC isinstance a job, otherwise)."""
        plan = self._binding
        if plan is not None and type(args) is dict:
            required, allowed = plan
            keys = args.keys() | {_CONTEXT_PARAMETER} if self.wants_context else args.keys()
            if required <= keys and (allowed is None or keys <= allowed):
                return None
        return argument_mismatch(self.func, args, wants_context=self.wants_context)

    @cached_property
    def _binding(self) -> tuple[frozenset[str], frozenset[str] | None] | None:
        return _binding(self.func)


def argument_mismatch(func: Callable[..., Any], args: Any, *, wants_context: bool) -> str | None:
    """Why ``func(**args)`` would fail to bind (a missing parameter, an unexpected key), or None.

    Bound before the call, not read from a TypeError after it: a TypeError raised inside the
    handler is an ordinary failure (retried), while arguments that do not fit the signature
    would fail every attempt the same way, so the job is discarded at once.
    """
    if type(args) is not dict and not isinstance(args, Mapping):
        return f"its arguments must be a mapping of parameters, not a JSON {type(args).__name__}"
    plan = _binding(func)
    if plan is not None:
        required, allowed = plan
        keys = args.keys() | {_CONTEXT_PARAMETER} if wants_context else args.keys()
        if required <= keys and (allowed is None or keys <= allowed):
            return None  # binds: the names alone decide, for a signature without positional-only
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return None  # no signature to check against (a builtin): the call will tell
    named = {**args, _CONTEXT_PARAMETER: None} if wants_context else dict(args)
    try:
        signature.bind(**named)
    except TypeError as exc:
        parameters = signature.parameters
        by_keyword = {
            name
            for name, p in parameters.items()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        }
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        unexpected = [] if takes_any else [k for k in named if k not in by_keyword]
        missing = [
            name
            for name, p in parameters.items()
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
            and name not in named
        ]
        said = [f"unexpected argument {k!r}" for k in unexpected]
        said += [f"missing argument {k!r}" for k in missing]
        return f"{'; '.join(said) or exc} (the handler takes {signature})"
    return None


def _binding(func: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str] | None] | None:
    """The names a keyword call of ``func`` must give and may give (None: any), read from its
    signature once; None when the names alone cannot tell (positional-only parameters, no
    signature, an unhashable callable). inspect.signature and bind at every job cost a child
    about 7 us a job (a third of its Python at batch 100)."""
    try:
        return _binding_of(func)
    except TypeError:  # unhashable
        return None


@lru_cache(maxsize=1024)
def _binding_of(func: Callable[..., Any]) -> tuple[frozenset[str], frozenset[str] | None] | None:
    try:
        parameters = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.POSITIONAL_ONLY for p in parameters):
        return None
    named = [p for p in parameters if p.kind in _CONTEXT_KINDS]
    required = frozenset(p.name for p in named if p.default is inspect.Parameter.empty)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    return required, None if takes_any else frozenset(p.name for p in named)


def wants_context(func: Callable[..., Any]) -> bool:
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        # Some builtins and C callables have no signature; they cannot ask for `job`.
        return False
    parameter = parameters.get(_CONTEXT_PARAMETER)
    return parameter is not None and parameter.kind in _CONTEXT_KINDS


def load_handlers(config: Config) -> dict[str, Handler]:
    """Import every configured handler; ConfigError (path ``handlers.<kind>``) lists failures."""
    ensure_cwd_importable()
    # Modules written or changed since the interpreter started (a deploy, then SIGHUP) must be
    # found: the path finders cache directory listings.
    importlib.invalidate_caches()
    modules: dict[str, Any] = {}
    issues: list[ConfigIssue] = []
    handlers: dict[str, Handler] = {}
    for kind, target in config.handlers.items():
        path = join("handlers", kind)
        line = config.lines.get(path)
        try:
            func = _resolve(target, modules)
        except _ImportProblem as problem:
            issues.append(ConfigIssue(path, str(problem), line))
            continue
        handlers[kind] = Handler(kind, target, func, wants_context(func))
    if issues:
        raise ConfigError(issues, config.path)
    return handlers


def load_reconcilers(config: Config) -> dict[str, Callable[..., Any]]:
    """Import every kind's reconcile hook (``jobs.<kind>.reconcile``), like the handlers: a
    missing module or a typo fails ``check`` and startup with exit code 2."""
    ensure_cwd_importable()
    modules: dict[str, Any] = {}
    issues: list[ConfigIssue] = []
    hooks: dict[str, Callable[..., Any]] = {}
    for kind, policy in config.jobs.items():
        if policy.reconcile is None:
            continue
        path = join(join("jobs", kind), "reconcile")
        try:
            hooks[kind] = _resolve(policy.reconcile, modules)
        except _ImportProblem as problem:
            issues.append(ConfigIssue(path, str(problem), config.lines.get(path)))
    if issues:
        raise ConfigError(issues, config.path)
    return hooks


class _ImportProblem(Exception):
    pass


def _resolve(target: str, modules: dict[str, Any]) -> Callable[..., Any]:
    module_name, _, attribute = target.partition(":")
    if module_name not in modules:
        try:
            modules[module_name] = importlib.import_module(module_name)
        # An import runs arbitrary module code; whatever it raises (SystemExit included) is
        # this handler's problem, to be reported with the others, not the supervisor's end.
        except (Exception, SystemExit) as exc:
            modules[module_name] = exc
    module = modules[module_name]
    if isinstance(module, BaseException):
        detail = f"{type(module).__name__}: {module}"
        hint = install_hint(module.name) if isinstance(module, ModuleNotFoundError) else ""
        if hint:
            detail += f" (an optional extra: {hint})"
        elif isinstance(module, ModuleNotFoundError) and _own_module(module, module_name):
            detail += f" ({_where_looked()})"
        raise _ImportProblem(f"cannot import module {module_name!r}: {detail}")
    found: Any = module
    owner = f"module {module_name!r}"
    for name in attribute.split("."):
        try:
            found = getattr(found, name)
        except AttributeError:
            raise _ImportProblem(f"{owner} has no attribute {name!r}") from None
        owner = f"{type(found).__name__} {name!r}"
    if not callable(found):
        raise _ImportProblem(f"{target!r} is not callable (it is a {type(found).__name__})")
    if inspect.iscoroutinefunction(found):
        # Calling it would only create a coroutine; the job would "complete" without running.
        raise _ImportProblem(f"{target!r} is an async function; handlers must be plain functions")
    return found


def _own_module(exc: ModuleNotFoundError, module_name: str) -> bool:
    """Whether the module not found is the handler's own (or a package above it), not
    something the handler's module imports."""
    return exc.name is not None and (module_name + ".").startswith(exc.name + ".")


def _where_looked() -> str:
    """Handlers are imported relative to the working directory: say which one it was, since a
    service manager or another shell often starts us somewhere else."""
    cwd = os.getcwd()
    extra = os.environ.get("PYTHONPATH")
    also = f" and PYTHONPATH={extra}" if extra else ""
    return (
        f"looked in the working directory {cwd}{also}: start pgq-supervisor from the project "
        "root (WorkingDirectory= in a systemd unit) or add it to PYTHONPATH"
    )


def ensure_cwd_importable() -> None:
    """Put the current directory on sys.path if it is not there.

    Operators run ``pgq-supervisor -c queues.yaml`` from their project root and name handlers
    like ``myapp.tasks:send_mail``. ``python -m`` and ``python script.py`` put that directory
    on sys.path, but a console-script entry point puts only its own bin directory there, so the
    project's modules would not be found. It goes first, as ``python -m`` would put it.
    """
    cwd = os.getcwd()
    for entry in sys.path:
        if entry == "" or os.path.abspath(entry) == cwd:
            return
    sys.path.insert(0, cwd)
