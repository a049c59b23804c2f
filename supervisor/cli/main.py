"""`pgq-supervisor -c FILE [verb]`: run the supervisor, or operate the queue it runs.

Verbs share one config file, given before or after the verb. Exit codes
(supervisor.shared.exits.MasterExit): 0 clean stop, 1 anything else, 2 bad config or usage, 3
children could not boot; each verb's are in its help and in docs/reference/cli.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from supervisor.cli.verbs import VERBS, Context, UsageError, explicit_dsn, verb
from supervisor.queue.dsn import DatabaseError, connect, describe
from supervisor.shared import proctitle
from supervisor.shared.exits import MasterExit
from supervisor.shared.words import plural

if TYPE_CHECKING:
    from supervisor.config import Config
    from supervisor.embedded.server import EmbeddedPostgres

log = logging.getLogger("pgq.cli")


def build_parser() -> argparse.ArgumentParser:
    from supervisor import __version__

    parser = argparse.ArgumentParser(
        prog="pgq-supervisor",
        description="A Postgres job queue run by a fork-per-worker supervisor.",
    )
    parser.add_argument("--version", action="version", version=f"pgq-supervisor {__version__}")
    shared_arguments(parser, default=None)
    parser.add_argument(
        "--embedded",
        action="store_true",
        help="with no DSN (--dsn, PGQ_DSN, database.dsn), start an embedded PostgreSQL "
        "(the same as database.embedded: true)",
    )
    parser.add_argument("--log-format", choices=("text", "json"), help="override log.format")
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), help="override log.level"
    )
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    _load_verbs()
    for name, (_, arguments, help_text) in VERBS.items():
        verb_parser = sub.add_parser(name, help=help_text, description=help_text)
        arguments(verb_parser)
        for leaf in leaves(verb_parser):
            # After the verb too (`status -c FILE`); SUPPRESS keeps a value given before it.
            shared_arguments(leaf, default=argparse.SUPPRESS)
        explain_all(verb_parser, name, help_text)
    return parser


def explain_all(parser: argparse.ArgumentParser, words: str, help_text: str | None) -> None:
    """A description and examples on the verb's parser and every sub-command's."""
    from supervisor.cli.examples import explain

    explain(parser, words, help_text)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                explain_all(sub, f"{words} {name}", helps.get(name))


def shared_arguments(parser: argparse.ArgumentParser, *, default: object) -> None:
    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        default=default,
        help="the YAML configuration (pools, queues, handlers); before or after the verb",
    )
    parser.add_argument(
        "--dsn",
        default=default,
        help="database to use instead of the config's "
        "(prefer the PGQ_DSN environment variable: a flag shows in `ps` "
        "until the process renames itself)",
    )


def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that end a command line: the verb's, or each of its sub-commands'."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser]
    return [leaf for a in subs for p in dict.fromkeys(a.choices.values()) for leaf in leaves(p)]


def parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """Parse, with errors in the words of the verb that was typed: an option the verb does not
    take (say --json on `run`) is reported with that verb's usage, not the top-level one."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        leaf, words = command_parser(parser, args)
        unknown = " ".join(extra)
        if "--json" in extra:
            with_json = ", ".join(verbs_with_json(parser))
            leaf.error(f"`{words}` has no --json option (verbs with one: {with_json})")
        leaf.error(f"unrecognized arguments: {unknown}")
    if args.config is None:
        parser.error("-c FILE is required (the YAML configuration), before or after the verb")
    return args


def command_parser(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[argparse.ArgumentParser, str]:
    """The deepest parser the command line reached, and its words (``jobs cancel``)."""
    words: list[str] = []
    current = parser
    while True:
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if current is parser and chosen is None:
            chosen = "run"  # the default verb
        if chosen is None:
            return current, " ".join(words)
        words.append(chosen)
        current = subs[0].choices[chosen]


def verbs_with_json(parser: argparse.ArgumentParser) -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if any("--json" in a.option_strings for a in sub._actions):
                    found.append(name)
                found += [f"{name} {inner}" for inner in verbs_with_json(sub)]
    return found


def _load_verbs() -> None:
    # Verb modules register themselves with @verb when imported.
    from supervisor.cli import (  # noqa: F401
        batches,
        doctor,
        jobs,
        keys,
        operator,
        queues,
        schedules,
        web,
        workflows,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # inside the try: a reader gone (`| head`) shows here
        return code
    except BrokenPipeError:
        # The reader of our output left (`jobs list --json | head`): not worth a traceback.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return MasterExit.ERROR


def _main(argv: list[str] | None) -> int:
    # First thing: replace the command line shown by `ps`, which may hold a --dsn password.
    proctitle.set_title("starting")
    parser = build_parser()
    args = parse(parser, argv)
    from supervisor.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"pgq-supervisor: invalid configuration\n{exc}", file=sys.stderr)
        return MasterExit.CONFIG
    except OSError as exc:
        print(f"pgq-supervisor: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return MasterExit.CONFIG
    problem = given_dsn_problem(args)
    if problem:
        print(f"pgq-supervisor: {problem}", file=sys.stderr)
        return MasterExit.CONFIG
    from supervisor.observability.logs import setup_logging

    setup_logging(
        args.log_format or config.log.format,
        args.log_level or config.log.level,
        dsn=explicit_dsn(args, config),
    )
    name = args.verb or "run"
    fn = VERBS[name][0]
    try:
        return fn(Context(args, config))
    except ConfigError as exc:  # a handler that does not import, say
        print(f"pgq-supervisor: invalid configuration\n{exc}", file=sys.stderr)
        return MasterExit.CONFIG
    except UsageError as exc:
        print(f"pgq-supervisor {name}: {exc}", file=sys.stderr)
        return MasterExit.CONFIG
    except DatabaseError as exc:
        print(f"pgq-supervisor {name}: {exc}", file=sys.stderr)
        return MasterExit.ERROR


def given_dsn_problem(args: argparse.Namespace) -> str | None:
    """One line when the DSN given outside the config (whose own is checked with its key) is
    one libpq cannot parse, naming where it came from; before any verb runs."""
    from supervisor.queue.dsn import parse_problem

    for source, dsn in (("--dsn", args.dsn), ("PGQ_DSN", os.environ.get("PGQ_DSN"))):
        if dsn:
            problem = parse_problem(dsn)
            return f"{source}: {problem}" if problem else None
    return None


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document, for scripts")


@verb(
    "check",
    "validate the config, import every handler, look for missing extras; "
    "exit 0, or 2 with every problem",
    json_flag,
)
def check(ctx: Context) -> int:
    from supervisor.config import ConfigError
    from supervisor.config.handlers import load_handlers, load_reconcilers

    # Both imported before either is reported, so one run lists every broken target.
    problems: list[ConfigError] = []
    handlers: dict[str, object] = {}
    try:
        handlers = dict(load_handlers(ctx.config))
    except ConfigError as exc:
        problems.append(exc)
    try:
        load_reconcilers(ctx.config)
    except ConfigError as exc:
        problems.append(exc)
    # A missing extra the config needs (the embedded server without its package), in the same
    # shape as every other problem: path, line, what to do.
    from supervisor.config.extras import missing_extras

    missing = missing_extras(ctx.config, dsn_given=explicit_dsn(ctx.args, ctx.config) is not None)
    if missing:
        problems.append(ConfigError(missing, ctx.config.path))
    if problems:
        raise ConfigError([i for p in problems for i in p.issues], ctx.config.path)
    pools = ctx.config.pools
    summary = {
        "config": str(ctx.config.path),
        "ok": True,
        "pools": len(pools),
        "children": sum(p.processes for p in pools.values()),
        "handlers": len(handlers),
        "schedules": len(ctx.config.schedules),
    }
    if ctx.args.json:
        print(json.dumps(summary, indent=2))
        return MasterExit.OK
    counts = [
        plural(len(pools), "pool"),
        plural(sum(p.processes for p in pools.values()), "child"),
        plural(len(handlers), "handler"),
        plural(len(ctx.config.schedules), "schedule"),
    ]
    print(f"{ctx.config.path}: OK: {', '.join(counts)}")
    return MasterExit.OK


@verb(
    "migrate",
    "apply pending schema migrations (idempotent; safe from several hosts); exit 0, 1 on a "
    "database error, 2 on a migration numbered below one already applied",
    json_flag,
)
def migrate_verb(ctx: Context) -> int:
    from supervisor.queue.migrations import MigrationOrderError, migrate

    applied = None
    # The verb prints each migration it applied; the library's own log line for each would
    # say it a second time on the same terminal.
    logging.getLogger("pgq.migrate").setLevel(logging.WARNING)
    # TERM/INT while the embedded server starts or the migrations run stop it cleanly, instead
    # of leaving the server we started running.
    with stoppable_startup(), database(ctx) as dsn:
        try:
            applied = migrate(dsn, pooled=ctx.config.database.pooled)
        except MigrationOrderError as exc:
            # A migration numbered into a gap: the tree's mistake, not the database's.
            print(f"pgq-supervisor: {describe(dsn)}: {exc}", file=sys.stderr)
            return MasterExit.CONFIG
    if applied is None:
        return MasterExit.ERROR  # interrupted; a migration that was running is rolled back
    if ctx.args.json:
        names = [f"{m.version:04d}_{m.name}" for m in applied]
        print(json.dumps({"applied": names, "up_to_date": True}, indent=2))
        return MasterExit.OK
    if applied:
        for m in applied:
            print(f"applied {m.version:04d}_{m.name}")
    else:
        print("schema is up to date")
    return MasterExit.OK


@verb(
    "run",
    "run the supervisor in the foreground (the default verb); exit 0 on a clean stop, 1 on an "
    "error, 2 on a bad config (before anything forks), 3 when a pool's children cannot boot",
)
def run(ctx: Context) -> int:
    from supervisor.config.handlers import load_handlers, load_reconcilers
    from supervisor.master.loop import Master
    from supervisor.queue.migrations import MigrationOrderError, migrate

    handlers = load_handlers(ctx.config)  # before anything connects or forks
    load_reconcilers(ctx.config)  # the master's reconciler imports them again, from the cache
    metrics = None
    if ctx.config.metrics.port is not None:
        # Bound before anything else starts, so a port in use fails at once, not after the
        # wait for the database.
        from supervisor.observability.metrics import MetricsError, MetricsServer

        try:
            metrics = MetricsServer(ctx.config.metrics)
        except MetricsError as exc:
            print(f"pgq-supervisor: {exc}", file=sys.stderr)
            return MasterExit.ERROR
    with stoppable_startup(), database(ctx) as dsn:
        wait_for_database(dsn, ctx.config.database.connect_timeout)
        if ctx.config.database.auto_migrate:
            try:
                for m in migrate(dsn, pooled=ctx.config.database.pooled):
                    log.info("applied migration %04d_%s", m.version, m.name)
            except MigrationOrderError as exc:
                print(f"pgq-supervisor: {describe(dsn)}: {exc}", file=sys.stderr)
                return MasterExit.CONFIG
        else:
            problem = schema_problem(dsn, pooled=ctx.config.database.pooled)
            if problem:
                # Before anything forks: children would fail every claim, the master every
                # service, and the operator would read an outage instead of the cause.
                print(
                    f"pgq-supervisor: {describe(dsn)} {problem} and database.auto_migrate is "
                    f"false: run `pgq-supervisor -c {ctx.config.path} migrate` first",
                    file=sys.stderr,
                )
                return MasterExit.CONFIG
        from supervisor.config.encryption import ring
        from supervisor.queue import keyring as keys

        # The keys file's ring for every process forked from here: handlers that enqueue
        # Secrets, the reconciler's hooks (PGQ_KEYS is read by each process itself).
        keys.install(ring(ctx.config.encryption) if ctx.config.encryption.keys_file else None)
        return Master(ctx.config, handlers, dsn, metrics=metrics).run()


def schema_problem(dsn: str, *, pooled: bool) -> str | None:
    """What is missing from the database's pgq schema, or None when it is up to date."""
    from supervisor.queue.migrations import applied_versions, functions_due, pending

    with connect(dsn, application_name="pgq-supervisor run", pooled=pooled) as conn:
        if not applied_versions(conn):
            return "has no pgq schema"
        todo = pending(conn)
        stale = functions_due(conn)
    if not todo and stale:
        names = ", ".join(f"pgq.{f.name}" for f in stale)
        return f"has out-of-date pgq functions ({names})"
    if not todo:
        return None
    names = ", ".join(f"{m.version:04d}_{m.name}" for m in todo)
    return f"has an old pgq schema ({len(todo)} migration(s) not applied: {names})"


class StartupInterrupted(Exception):
    pass


# While not None, TERM/INT during start-up are recorded here instead of raising at once.
_held_signals: list[str] | None = None


@contextlib.contextmanager
def stoppable_startup() -> Iterator[None]:
    """Before the master's loop owns the signals, TERM/INT during start-up (waiting for the
    database, say) stops cleanly, stopping an embedded server we started."""

    def interrupt(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if _held_signals is not None:
            _held_signals.append(name)
            return
        raise StartupInterrupted(name)

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    except StartupInterrupted as exc:
        log.info("%s during start-up: stopped", exc)
    finally:
        for s, handler in previous.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(s, handler)


@contextlib.contextmanager
def signals_held() -> Iterator[list[str]]:
    """Hold TERM/INT back until the block is done. An exception raised by the handler while
    pg_ctl is starting the server would kill pg_ctl but not the postmaster it launched, which
    runs in a session of its own: nobody would ever stop it."""
    global _held_signals
    _held_signals = []
    try:
        yield _held_signals
    finally:
        _held_signals = None


@contextlib.contextmanager
def database(ctx: Context) -> Iterator[str]:
    """The DSN to use; with none given and the embedded server chosen, that server: one
    already running on the data folder, or one started here that lives as long as this."""
    dsn = explicit_dsn(ctx.args, ctx.config)
    if dsn:
        yield dsn
        return
    if not (ctx.args.embedded or ctx.config.database.embedded):
        raise UsageError(
            "no database: set PGQ_DSN, pass --dsn, or set database.dsn in "
            f"{ctx.config.path}; or, for a local database started and stopped with the "
            "supervisor, set database.embedded: true or pass --embedded"
        )
    server = _embedded(ctx.config)
    running = server.find_running(ctx.config.database.embedded_dir)
    if running is not None:
        yield running  # another process started it, and stops it
        return
    log.info(
        "no DSN given, embedded server chosen: starting an embedded PostgreSQL in %s",
        ctx.config.database.embedded_dir,
    )
    with signals_held() as held:
        dsn = server.start()
    try:
        if held:
            raise StartupInterrupted(held[0])
        yield dsn
    finally:
        log.info("stopping the embedded PostgreSQL")
        server.stop()


def _embedded(config: Config) -> EmbeddedPostgres:
    from supervisor.embedded.server import EmbeddedPostgres, EmbeddedUnavailable, available

    if not available():
        # The extra is missing: one line and exit 2, before anything starts.
        raise UsageError(str(EmbeddedUnavailable()))
    try:
        return EmbeddedPostgres(config.database.embedded_dir)
    except EmbeddedUnavailable as exc:
        raise UsageError(str(exc)) from None


def wait_for_database(dsn: str, connect_timeout: float) -> None:
    """Block until the database answers; a wrong password or database fails at once."""
    delay, first = 0.5, True
    while True:
        try:
            with connect(dsn, connect_timeout=connect_timeout) as conn:
                conn.execute("SELECT 1")
            if not first:
                log.info("database %s is up", describe(dsn))
            return
        except DatabaseError as exc:
            if exc.permanent:
                raise
            log.warning("%s; retrying in %.0fs", exc, delay)
            first = False
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
