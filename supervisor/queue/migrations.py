"""Numbered schema migrations from sql/migrations, applied once each, in order, on a live
database.

Safe when several hosts run it at once: each migration runs in its own transaction, together
with the row that records it, under a transaction-scoped advisory lock; a second runner waits,
then finds that version recorded and moves on (or does nothing). No session state, so it works
through a transaction-mode pooler too.

Polite under load. A migration that alters pgq.jobs needs a lock that conflicts with the claims
and lease renewals of every host; queued behind an application's open transaction, it would
hold all of them up behind itself. So each try waits at most ``lock_timeout`` for its locks,
then rolls back and tries again after a growing, jittered pause; between tries the claims flow.
After ``lock_wait`` seconds of tries it gives up and names the sessions holding the locks.

A migration whose first line is ``-- pgq:no-transaction`` runs outside a transaction, one
statement at a time (each ending with ``;`` at the end of a line), for what cannot run inside
one: ``CREATE INDEX CONCURRENTLY``, which builds a large index without blocking writes. Its
statements must be idempotent (``IF NOT EXISTS``); an index that an interrupted concurrent build
left invalid is dropped before the migration runs again. Its version is recorded after its last
statement.

In order. A migration runs only if its number is above every migration already applied on the
database: one numbered into a gap (a branch's, merged after a higher one ran) is refused, naming
its file, instead of running after the higher ones. Databases that came from a release before
this rule (their highest migration at most ``LAST_UNORDERED``) still fill their gaps: those
numbers were allotted to branches and filled in later, and every release since ships them all.

Then the functions: each in its own file of sql/functions/, applied after the migrations
(supervisor.queue.functions).
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

import psycopg
import psycopg.errors
from psycopg import sql

from supervisor.queue import functions, locks
from supervisor.queue.dsn import connect
from supervisor.queue.queries import parse, sql_dir, sql_text

log = logging.getLogger("pgq.migrate")

_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")
NO_TRANSACTION = "-- pgq:no-transaction"
# One try's wait for a lock (a claim queued behind it waits as long), and how long to keep trying.
LOCK_TIMEOUT = 0.2
LOCK_WAIT = 600.0
# The pause between tries: doubling from the first, at most the last, with jitter.
RETRY_FIRST = 0.2
RETRY_MAX = 5.0
# The highest migration shipped before migrations had to come in order (issue 29).
LAST_UNORDERED = 36

T = TypeVar("T")


class MigrationBlocked(RuntimeError):
    """A migration could not get its locks within the wait it was given."""


class MigrationOrderError(RuntimeError):
    """A pending migration is numbered below one already applied on the database."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str = field(repr=False)

    @property
    def transactional(self) -> bool:
        return not self.sql.lstrip().startswith(NO_TRANSACTION)

    def statements(self) -> list[str]:
        """The statements of a no-transaction migration: each ends with ';' at a line's end."""
        found, current = [], []
        for line in self.sql.splitlines():
            if line.lstrip().startswith("--") and not current:
                continue
            current.append(line)
            if line.rstrip().endswith(";"):
                found.append("\n".join(current).strip().rstrip(";"))
                current = []
        if "\n".join(current).strip():
            found.append("\n".join(current).strip())
        return found


# What _next returns when the migration it found was a concurrent build that another runner
# finished while this one waited for it: nothing applied here, but more may be pending.
_ANOTHER_RUNNER = Migration(0, "applied_by_another_runner", "")


@cache
def _queries() -> dict[str, str]:
    return parse(sql_text("migrate.sql"))


def _q(name: str) -> str:
    return _queries()[name]


def available() -> list[Migration]:
    """Every migration shipped with the package, by version."""
    found = []
    for entry in (sql_dir() / "migrations").iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(
                Migration(int(match["version"]), match["name"], entry.read_text(encoding="utf-8"))
            )
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"sql/migrations: duplicate version numbers in {versions}")
    return found


def applied_versions(conn: psycopg.Connection[Any]) -> set[int]:
    exists = conn.execute(_q("migrations_table_exists")).fetchone()
    if not exists or not exists[0]:
        return set()
    return {row[0] for row in conn.execute(_q("applied_migrations"))}


def pending(
    conn: psycopg.Connection[Any], shipped: Sequence[Migration] | None = None
) -> list[Migration]:
    done = applied_versions(conn)
    return [m for m in (available() if shipped is None else shipped) if m.version not in done]


def release_version() -> int:
    """The highest migration of the tree (sql/migrations/, read directly): the release's place
    in the schema's history, which its function files belong to."""
    found = (_FILE.match(entry.name) for entry in (sql_dir() / "migrations").iterdir())
    return max((int(match["version"]) for match in found if match), default=0)


def functions_due(conn: psycopg.Connection[Any]) -> list[functions.FunctionFile]:
    """The function files whose text is not the one in place (read only); none while the
    database lacks the release's migrations (they are what is due)."""
    if max(applied_versions(conn), default=0) < release_version():
        return []
    return functions.due(conn, _queries(), release_version())


def check_order(todo: Sequence[Migration], done: set[int]) -> None:
    """Refuses a pending migration numbered below the highest one applied (see the module)."""
    highest = max(done, default=0)
    if highest <= LAST_UNORDERED:
        return
    for m in todo:
        if m.version < highest:
            raise MigrationOrderError(
                f"sql/migrations/{m.version:04d}_{m.name}.sql: migration {m.version:04d} is "
                f"numbered below {highest:04d}, which is already applied on this database; a "
                f"migration runs only above every applied one: renumber it above {highest:04d}"
            )


def migrate(
    target: str | psycopg.Connection[Any],
    *,
    pooled: bool = False,
    lock_timeout: float = LOCK_TIMEOUT,
    lock_wait: float = LOCK_WAIT,
    shipped: Sequence[Migration] | None = None,
) -> list[Migration]:
    """Apply every pending migration; returns the ones applied (empty when up to date).
    ``pooled``: ``target`` is a DSN through a transaction-mode pooler. ``shipped``: the
    migrations to apply instead of the package's (tests)."""
    runner = _Runner(lock_timeout, lock_wait, pooled, shipped)
    if isinstance(target, str):
        with connect(target, application_name="pgq-supervisor migrate", pooled=pooled) as conn:
            return runner.run(conn)
    return runner.run(target)


@dataclass
class _Runner:
    lock_timeout: float
    lock_wait: float
    pooled: bool
    shipped: Sequence[Migration] | None

    def run(self, conn: psycopg.Connection[Any]) -> list[Migration]:
        if not conn.autocommit:
            raise ValueError(
                "migrate needs an autocommit connection: each migration is its own transaction"
            )
        todo = pending(conn, self.shipped)
        check_order(todo, applied_versions(conn))
        if applied_versions(conn) and not todo and not functions_due(conn):
            # Up to date: touch nothing, so a role without CREATE rights can run this too.
            return []
        applied = []
        while True:
            migration = self._polite(conn, "the next migration", lambda: self._next(conn))
            if migration is None:
                break
            if migration is _ANOTHER_RUNNER:
                continue  # a concurrent build another runner finished while we waited
            log.info("applied migration %04d_%s", migration.version, migration.name)
            applied.append(migration)
        self._polite(conn, "the functions", lambda: self._functions(conn, every=bool(applied)))
        return applied

    def _functions(self, conn: psycopg.Connection[Any], *, every: bool) -> None:
        """One try: the function files due, applied and recorded in one transaction."""
        with conn.transaction():
            conn.execute(_q("migration_lock_timeout"), {"timeout": self._timeout()})
            conn.execute(_q("migration_xact_lock"), {"key": locks.MIGRATE})
            conn.execute(_q("migrations_bootstrap"))
            release = release_version()
            if max(applied_versions(conn), default=0) < release:
                # Brought only to an earlier migration (``shipped`` ends early: a test standing
                # in for an older release): the bodies cannot be checked against tables that
                # come later, so PostgreSQL creates them unchecked (as pg_dump's output does).
                conn.execute(_q("functions_unchecked"))
            todo = functions.due(conn, _queries(), release, every=every)
            functions.apply(conn, _queries(), todo, release)
        if todo:
            log.info("applied functions %s", ", ".join(f.name for f in todo))

    def _next(self, conn: psycopg.Connection[Any]) -> Migration | None:
        """One try: the next pending migration applied and recorded (None: none left)."""
        with conn.transaction():
            conn.execute(_q("migration_lock_timeout"), {"timeout": self._timeout()})
            conn.execute(_q("migration_xact_lock"), {"key": locks.MIGRATE})
            conn.execute(_q("migrations_bootstrap"))
            todo = pending(conn, self.shipped)
            if not todo:
                return None
            # Again under the lock: another runner may have applied a higher one meanwhile.
            check_order(todo, applied_versions(conn))
            migration = todo[0]
            if migration.transactional:
                conn.execute(migration.sql)
                _record(conn, migration)
                return migration
        if not self._outside_transaction(conn, migration):
            return _ANOTHER_RUNNER
        return migration

    def _outside_transaction(self, conn: psycopg.Connection[Any], migration: Migration) -> bool:
        """Runs a no-transaction migration; False when another runner did it meanwhile."""
        # A session lock (a transaction's would end with each statement); through a
        # transaction pooler none is possible: the statements' IF NOT EXISTS and the record's
        # ON CONFLICT keep two runners harmless there.
        if not self.pooled:
            conn.execute(_q("migration_session_lock"), {"key": locks.MIGRATE})
        try:
            if migration.version in applied_versions(conn):
                return False  # another runner did it while we waited for the lock
            for schema, index in conn.execute(_q("invalid_pgq_indexes")).fetchall():
                log.info("dropping %s.%s, left invalid by an interrupted build", schema, index)
                drop = sql.SQL(_q("drop_invalid_index"))
                conn.execute(drop.format(index=sql.Identifier(schema, index)))
            # A concurrent build waits for older transactions without blocking anyone's
            # writes: it may wait as long as they last.
            conn.execute(_q("migration_session_lock_timeout"), {"timeout": "0"})
            for statement in migration.statements():
                conn.execute(statement)
            _record(conn, migration)
            return True
        finally:
            if not conn.closed:
                conn.execute(_q("migration_session_lock_timeout"), {"timeout": "0"})
                if not self.pooled:
                    conn.execute(_q("migration_session_unlock"), {"key": locks.MIGRATE})

    def _timeout(self) -> str:
        return f"{max(1, round(self.lock_timeout * 1000))}ms"

    def _polite(self, conn: psycopg.Connection[Any], what: str, attempt: Callable[[], T]) -> T:
        """``attempt`` until it gets its locks, pausing between tries; gives up after
        ``lock_wait`` seconds, naming who holds the locks."""
        deadline = time.monotonic() + self.lock_wait
        pause, tries = RETRY_FIRST, 0
        while True:
            try:
                return attempt()
            except (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected):
                tries += 1
                blockers = _blockers(conn)
                if time.monotonic() + pause > deadline:
                    raise MigrationBlocked(
                        f"{what} could not get its locks in {self.lock_wait:.0f}s ({tries} tries "
                        f"of {self._timeout()} each); held by {blockers}"
                    ) from None
                if tries == 1 or tries % 10 == 0:
                    log.warning(
                        "%s waits for locks held by %s; trying again (try %d, every %.1fs at "
                        "most, claims flow meanwhile)",
                        what,
                        blockers,
                        tries,
                        RETRY_MAX,
                    )
                time.sleep(pause * random.uniform(0.5, 1.0))
                pause = min(pause * 2, RETRY_MAX)


def _record(conn: psycopg.Connection[Any], migration: Migration) -> None:
    conn.execute(_q("record_migration"), {"version": migration.version, "name": migration.name})


def _blockers(conn: psycopg.Connection[Any]) -> str:
    rows = conn.execute(_q("lock_blockers")).fetchall()
    if not rows:
        return "a session that has since let go"
    return "; ".join(
        f"pid {pid} (user {user}, application {app or '-'}, transaction open {held}s)"
        for pid, user, app, held in rows
    )
