"""Runs the families of checks, each bounded by a statement timeout.

Every family reads through a ``Probe``: one autocommit session whose statement_timeout (and
lock_timeout) is the doctor's, so no check can run long or queue behind a lock. A family whose
statement was cut short becomes one check that says it timed out; one that was refused a
privilege says what it could not see and which grant lifts it. Nothing a check does is kept:
a family that opens a transaction ends it with a rollback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

from supervisor.config import Config
from supervisor.config.units import format_duration
from supervisor.doctor.check import Check
from supervisor.doctor.sql import doctor_query
from supervisor.queue.queries import query

log = logging.getLogger("pgq.doctor")


@dataclass
class Probe:
    """What a family of checks reads through: the session, the config, and the server."""

    conn: psycopg.Connection[Any]
    config: Config

    @property
    def thresholds(self) -> Any:
        return self.config.doctor

    @property
    def server_version(self) -> int:
        return self.conn.info.server_version

    def document(self, name: str, params: dict[str, Any] | None = None) -> Any:
        """A query of sql/doctor.sql that returns one JSON document."""
        row = self.conn.execute(doctor_query(name), params).fetchone()
        if row is None:
            return None
        value = row[0]
        return json.loads(value) if isinstance(value, str) else value

    def rows(self, name: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return self.conn.execute(doctor_query(name), params).fetchall()


@dataclass(frozen=True)
class Family:
    """A family of checks: a name (for a timeout or refusal) and what runs them."""

    name: str
    run: Callable[[Probe], list[Check]]


def bound(conn: psycopg.Connection[Any], timeout: float) -> None:
    """The doctor's session: no statement, nor wait for a lock, longer than ``timeout``. The
    lock wait gives up a little earlier, so a lock is reported as a lock."""
    statement = f"{max(1, round(timeout * 1000))}ms"
    lock = f"{max(1, round(timeout * 900))}ms"
    conn.execute(query("session_timeouts"), {"statement_timeout": statement, "lock_timeout": lock})


def run_families(probe: Probe, families: Sequence[Family]) -> list[Check]:
    checks: list[Check] = []
    timeout = format_duration(probe.thresholds.statement_timeout)
    for family in families:
        try:
            checks += family.run(probe)
        except psycopg.errors.QueryCanceled:
            checks.append(
                Check(
                    family.name,
                    "warn",
                    f"timed out: a statement ran longer than doctor.statement_timeout "
                    f"({timeout}) and was cancelled",
                    "run it again; if it keeps timing out the server is overloaded, or raise "
                    "doctor.statement_timeout",
                )
            )
        except psycopg.errors.LockNotAvailable:
            checks.append(
                Check(
                    family.name,
                    "warn",
                    f"timed out: waited longer than doctor.statement_timeout ({timeout}) for a "
                    "lock on one of pgq's tables, and gave up",
                    "someone holds a strong lock on pgq's tables (ALTER, VACUUM FULL, LOCK "
                    "TABLE): see pressure.locks and pg_locks",
                )
            )
        except psycopg.errors.InsufficientPrivilege as exc:
            checks.append(
                Check(
                    family.name,
                    "warn",
                    f"cannot see: {exc.diag.message_primary or exc}",
                    "run the doctor as a role that may read this (see docs/doctor.md, "
                    "'Privileges')",
                )
            )
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            raise  # no pgq schema: the verb's session says to run `migrate`
        except psycopg.DatabaseError as exc:
            # Whatever else the server refuses (a relation renamed, an extension half
            # installed): this family says so and the others still run.
            log.debug("doctor: %s failed", family.name, exc_info=True)
            checks.append(
                Check(
                    family.name,
                    "warn",
                    f"could not run: {(exc.diag.message_primary or str(exc)).strip()}",
                    "run `pgq-supervisor migrate` if the schema is behind; otherwise report it",
                )
            )
        finally:
            _end_transaction(probe.conn)
    return checks


def _end_transaction(conn: psycopg.Connection[Any]) -> None:
    if conn.info.transaction_status != TransactionStatus.IDLE:
        conn.rollback()
