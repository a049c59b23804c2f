from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests import pgbouncer
from tests.handlers import LEDGER
from tests.lifecycle.harness import Supervisor


@pytest.fixture
def ledger(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(LEDGER)
    return dsn


@pytest.fixture
def supervisor(tmp_path: Path, ledger: str) -> Iterator[Callable[..., Supervisor]]:
    """Make supervisors on the test database; every one is stopped at teardown."""
    made: list[Supervisor] = []

    def make(yaml_text: str, **kwargs: Any) -> Supervisor:
        sup = Supervisor(tmp_path, ledger, yaml_text, name=f"sup{len(made)}", **kwargs)
        made.append(sup)
        return sup

    yield make
    for sup in made:
        sup.kill_everything()


@pytest.fixture(scope="session")
def bouncer_port(pg_server: str) -> Iterator[int]:
    """A PgBouncer in transaction mode in front of the test server (any test database is
    reachable through it by name); its port."""
    if not pgbouncer.available():
        missing = f"pgbouncer is not installed ({pgbouncer.BINARY}); apt-get install pgbouncer"
        # CI installs it: there a missing PgBouncer fails the pooler tests instead of skipping.
        if os.environ.get("PGQ_REQUIRE_PGBOUNCER") == "1":
            pytest.fail(f"PGQ_REQUIRE_PGBOUNCER=1 but {missing}")
        pytest.skip(missing)
    with pgbouncer.pgbouncer(pg_server) as port:
        yield port
