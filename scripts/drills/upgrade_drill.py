"""Rolling-upgrade drill: the previous release's supervisors drain a steady stream while the
new release migrates and starts beside them, an application transaction holding a lock on
pgq.jobs meanwhile; then the old ones are stopped one by one.

    python scripts/drills/upgrade_drill.py [--old-ref fbdc53d] [--rate 40] [--hold 4] [--dsn DSN]

The old release runs from a git worktree of --old-ref (a temporary folder, removed after),
with the same virtualenv: its folder comes first on PYTHONPATH, before the editable install.
A database of its own is created on the server of --dsn (or PGQ_DSN) and dropped after. The
new release migrates with the package's migrations plus two of the drill's own, shaped like
this round's: one that alters pgq.jobs (it needs a brief exclusive lock) and one that builds
an index CONCURRENTLY. Checks: every job enqueued ran exactly once, none is left, and no job
waited more than --max-wait seconds (1 s) from its enqueue to its start, the migration
included. The last line on stdout is one JSON object; exit 0 only if every check held.
"""

from __future__ import annotations

# ruff: noqa: E402 (the imports below need the path set up first)
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts" / "drills")]

from upgrade_drill_jobs import LEDGER_SQL

from supervisor.queue.migrations import Migration, available, migrate

DRILL_MIGRATIONS = [
    Migration(9901, "drill_add_column", "ALTER TABLE pgq.jobs ADD COLUMN drill_note text;"),
    Migration(
        9902,
        "drill_index_concurrently",
        "-- pgq:no-transaction\nCREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_drill_kind "
        "ON pgq.jobs (kind, created_at);\n",
    ),
]
CONFIG = """
database: {auto_migrate: false}
handlers: {drill: upgrade_drill_jobs:record}
pools: {main: {processes: 2, queues: {default: 1}, batch: 2, poll_interval: 200ms}}
shutdown_timeout: 20s
"""


def start(tree: Path, dsn: str, config: Path, release: str, log: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PGQ_DSN": dsn,
        "PGQ_DRILL_RELEASE": release,
        "PYTHONPATH": f"{tree}:{ROOT / 'scripts' / 'drills'}",
    }
    out = open(log, "ab")  # noqa: SIM115 - kept open for the process's life
    return subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "-c", str(config), "run"],
        cwd=tree,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def run_old(tree: Path, dsn: str, *argv: str) -> str:
    env = {**os.environ, "PGQ_DSN": dsn, "PYTHONPATH": f"{tree}:{ROOT / 'scripts' / 'drills'}"}
    done = subprocess.run(
        [sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-ref", default="fbdc53d")
    parser.add_argument("--rate", type=float, default=40.0, help="jobs a second")
    parser.add_argument("--seconds", type=float, default=16.0, help="how long the stream runs")
    parser.add_argument("--hold", type=float, default=4.0, help="the app transaction's length")
    parser.add_argument("--max-wait", type=float, default=1.0)
    parser.add_argument(
        "--dsn", default=os.environ.get("PGQ_DSN", "postgresql://postgres@127.0.0.1:5432/test")
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="pgq-upgrade-"))
    old = work / "old"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old), args.old_ref],
        check=True,
        capture_output=True,
    )
    name = f"pgq_upgrade_drill_{os.getpid()}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(args.dsn, dbname=name)
    config = work / "queues.yaml"
    config.write_text(CONFIG)
    procs: list[subprocess.Popen[bytes]] = []
    figures: dict[str, Any] = {"old_ref": args.old_ref}
    try:
        run_old(old, dsn, "-m", "supervisor.cli", "-c", str(config), "migrate")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(LEDGER_SQL)
            figures["old_schema"] = max(
                v for (v,) in conn.execute("SELECT version FROM pgq.schema_migrations")
            )
        old_sups = [start(old, dsn, config, "old", work / f"old{i}.log") for i in range(2)]
        procs += old_sups
        produced: list[int] = []
        producer = threading.Thread(
            target=lambda: produced.append(
                int(
                    run_old(
                        old,
                        dsn,
                        str(ROOT / "scripts" / "drills" / "upgrade_drill_jobs.py"),
                        "produce",
                        str(args.rate),
                        str(args.seconds),
                    )
                )
            )
        )
        producer.start()
        time.sleep(3)  # steady state on the old release

        # An application's transaction holding a lock on pgq.jobs while the new release migrates.
        app = psycopg.connect(dsn)
        app.execute("LOCK TABLE pgq.jobs IN ROW EXCLUSIVE MODE")
        threading.Timer(args.hold, app.commit).start()
        migrated_from = time.monotonic()
        applied = migrate(dsn, shipped=[*available(), *DRILL_MIGRATIONS])
        figures["migrate_s"] = round(time.monotonic() - migrated_from, 2)
        figures["migrations_applied"] = [f"{m.version:04d}_{m.name}" for m in applied]
        figures["app_transaction_s"] = args.hold
        time.sleep(0.5)
        app.close()

        new_sups = [start(ROOT, dsn, config, "new", work / f"new{i}.log") for i in range(2)]
        procs += new_sups
        time.sleep(2)
        for proc in old_sups:  # the rolling part: one old host after the other
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
            time.sleep(1)
        figures["old_exit_codes"] = [p.returncode for p in old_sups]
        producer.join(args.seconds + 60)
        deadline = time.monotonic() + 60
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                (left,) = conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()
                if left == 0:
                    break
                time.sleep(0.2)
            figures.update(measure(conn, produced[0] if produced else 0, args.max_wait))
        for proc in new_sups:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        figures["new_exit_codes"] = [p.returncode for p in new_sups]
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)],
            check=False,
            capture_output=True,
        )
    checks = {
        "none_lost": figures.get("lost") == 0,
        "none_run_twice": figures.get("run_twice") == 0,
        "none_left": figures.get("left") == 0,
        "no_wait_over_max": figures.get("max_wait_s", 99) <= args.max_wait,
        "both_releases_ran_jobs": all(
            figures.get("runs_by_release", {}).get(r) for r in ("old", "new")
        ),
        "clean_exits": figures.get("old_exit_codes") == [0, 0]
        and figures.get("new_exit_codes") == [0, 0],
        "migrations_applied": len(figures.get("migrations_applied", [])) >= len(DRILL_MIGRATIONS),
    }
    figures["checks"] = checks
    figures["ok"] = all(checks.values())
    print(
        f"{figures.get('enqueued')} jobs enqueued at {args.rate:g}/s; migrate took "
        f"{figures.get('migrate_s')}s behind a {figures.get('app_transaction_s')}s app "
        f"transaction; wait p50 {figures.get('p50_wait_s')}s p99 {figures.get('p99_wait_s')}s "
        f"max {figures.get('max_wait_s')}s (around the migration: max "
        f"{figures.get('max_wait_during_migrate_s')}s); "
        f"lost {figures.get('lost')}, run twice {figures.get('run_twice')}; runs by release "
        f"{figures.get('runs_by_release')}"
    )
    print(json.dumps(figures, sort_keys=True))
    return 0 if figures["ok"] else 1


def measure(conn: psycopg.Connection[Any], produced: int, max_wait: float) -> dict[str, Any]:
    (enqueued,) = conn.execute("SELECT count(*) FROM drill_enqueued").fetchone()
    (left,) = conn.execute("SELECT count(*) FROM pgq.jobs").fetchone()
    (lost,) = conn.execute(
        "SELECT count(*) FROM drill_enqueued e WHERE NOT EXISTS"
        " (SELECT 1 FROM drill_ledger l WHERE l.job_id = e.job_id)"
    ).fetchone()
    (twice,) = conn.execute(
        "SELECT count(*) FROM (SELECT job_id FROM drill_ledger GROUP BY job_id"
        " HAVING count(*) > 1) AS d"
    ).fetchone()
    waits = [
        float(w)
        for (w,) in conn.execute(
            "SELECT extract(epoch FROM min(l.at) - e.at) FROM drill_enqueued e"
            " JOIN drill_ledger l USING (job_id) GROUP BY e.job_id, e.at ORDER BY 1"
        )
    ]
    by_release = dict(
        conn.execute("SELECT release, count(*) FROM drill_ledger GROUP BY release").fetchall()
    )
    (during,) = conn.execute(
        "SELECT max(extract(epoch FROM l.at - e.at)) FROM drill_enqueued e JOIN drill_ledger l"
        " USING (job_id) WHERE e.at BETWEEN (SELECT applied_at - interval '10 seconds' FROM"
        " pgq.schema_migrations WHERE version = 9901) AND (SELECT applied_at FROM"
        " pgq.schema_migrations WHERE version = 9902)"
    ).fetchone()

    def pct(p: float) -> float | None:
        return round(waits[min(len(waits) - 1, int(p * len(waits)))], 3) if waits else None

    return {
        "enqueued": enqueued,
        "produced": produced,
        "left": left,
        "lost": lost,
        "run_twice": twice,
        "p50_wait_s": pct(0.5),
        "p99_wait_s": pct(0.99),
        "max_wait_s": round(max(waits), 3) if waits else None,
        "max_wait_during_migrate_s": round(float(during), 3) if during is not None else None,
        "runs_by_release": by_release,
        "over_max_wait": sum(w > max_wait for w in waits),
    }


if __name__ == "__main__":
    sys.exit(main())
