"""A PostgreSQL server of the test's own, for tests that stop, restart or reconfigure it.

The machine's shared server must never be stopped or reconfigured; these servers live in a
scratch folder of their own (not pytest's tmp_path: a concurrent pytest session run as root
resets /tmp/pytest-of-root to 0700, cutting the server's unprivileged user off mid-test).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from psycopg import conninfo, sql

from supervisor import migrate
from supervisor.embedded.server import EmbeddedPostgres
from tests.handlers import LEDGER

# Password authentication for every role but the superuser, who keeps trust on the socket so
# the test can always administer its server.
HBA_PASSWORD = """\
local all postgres trust
local all all scram-sha-256
host all all 127.0.0.1/32 scram-sha-256
"""


@contextmanager
def own_server(*, password_auth: bool = False) -> Iterator[EmbeddedPostgres]:
    """A started embedded server with the schema and the test ledger; stopped at the end."""
    with tempfile.TemporaryDirectory(prefix="pgq-own-server-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pgdata", durable=False)
        try:
            dsn = server.start()
            migrate(dsn)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute(LEDGER)
                if password_auth:
                    # Rewritten in place, so the file keeps the server user as its owner.
                    (server.data_dir / "pg_hba.conf").write_text(HBA_PASSWORD)
                    conn.execute("SELECT pg_reload_conf()")
            yield server
        finally:
            server.stop("immediate", timeout=30)


def create_login(server: EmbeddedPostgres, role: str, password: str, *grants: str) -> str:
    """A LOGIN role with a password (and membership in `grants`); returns its DSN."""
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
        for granted in grants:
            conn.execute(
                sql.SQL("GRANT {} TO {}").format(sql.Identifier(granted), sql.Identifier(role))
            )
    return conninfo.make_conninfo(server.dsn, user=role, password=password)
