"""Our side of the benchmark: the real supervisor (`python -m supervisor.cli -c FILE`), driven
the same way as the peers: fresh database, jobs enqueued first, times from the database clock.

Drain is timed two ways, both from the database:

- with history off (the default configuration), by polling the database every few
  milliseconds with ``clock_timestamp()``: from the first poll that sees a claim (the claim
  sequence has moved) to the first that sees no job available or running (resolution: the poll
  interval, under 1% of a drain; each poll is two index probes and a sequence read);
- with history on, from ``pgq.job_history``: the first job's claim to the last one's
  completion, like PgQueuer's log, at the cost of one history row per job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from benchlib.common import (
    DSN_ENV,
    create_side_tables,
    fresh_database,
    install_enqueue_marker,
    latency_summary_ms,
    measure_pickup,
    paced,
    rate,
    wait_until,
)
from supervisor import NewJob, enqueue, enqueue_many, migrate
from supervisor.queue.jobs import claim_params
from supervisor.queue.queries import native

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "scripts" / "benchmarks"

# Polled every few milliseconds during a drain, so it must cost the database next to nothing
# (a count(*) of the table every 2 ms took most of a core from the system being measured): the
# claim sequence says whether anything was claimed yet, and the partial indexes of available
# and running jobs say whether anything is left.
PROGRESS = """
SELECT (SELECT is_called FROM pgq.lease_seq) AS claimed,
       NOT EXISTS (SELECT 1 FROM pgq.jobs WHERE state = 'available')
           AND NOT EXISTS (SELECT 1 FROM pgq.jobs WHERE state = 'running') AS done,
       clock_timestamp()
"""
REMAINING = "SELECT count(*) FROM pgq.jobs WHERE state <> 'discarded'"
HISTORY_SPAN = """
SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at))::float8
FROM pgq.job_history
WHERE outcome = 'completed'
"""


def explained_claim(
    conn: psycopg.Connection[Any],
    *,
    variant: str = "claim",
    limit: int = 10,
    worker: str = "bench:explain",
) -> tuple[float, int]:
    """A claim of ``limit`` from queue ``default`` (claim variant ``variant``) under EXPLAIN
    (ANALYZE, BUFFERS), rolled back, so that it takes nothing: the server's execution time (ms)
    and the buffers it touched, which do not depend on the machine's load."""
    text, names = native(variant)
    params = claim_params("default", worker=worker, limit=limit)
    with conn.transaction(force_rollback=True):
        cur = psycopg.RawCursor(conn)
        cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text, [params[n] for n in names])
        (plan,) = cur.fetchone()  # type: ignore[misc]
    return plan_cost(plan)


def plan_cost(plan: list[dict[str, Any]]) -> tuple[float, int]:
    """An EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) result's execution time (ms) and the shared
    buffers its top node touched (hit or read), which include its children's."""
    top = plan[0]
    buffers = sum(top["Plan"].get(k, 0) for k in ("Shared Hit Blocks", "Shared Read Blocks"))
    return float(top["Execution Time"]), int(buffers)


def config_text(
    processes: int,
    batch: int,
    *,
    history: bool = False,
    kind: str = "noop",
    handler: str = "benchlib.ours_handlers:noop",
    metrics_port: int | None = None,
    vacuum: bool = True,
) -> str:
    metrics = f"metrics: {{port: {metrics_port}}}\n" if metrics_port else ""
    return (
        textwrap.dedent(f"""\
        handlers:
          {kind}: {handler}
        pools:
          bench:
            processes: {processes}
            batch: {batch}
            queues: {{default: 1}}
        history: {{enabled: {str(history).lower()}}}
        vacuum: {{enabled: {str(vacuum).lower()}}}
        log: {{level: warning}}
        """)
        + metrics
    )


class Supervisor:
    """One supervisor process for one scenario; stopped (drained) however the block ends."""

    def __init__(
        self, dsn: str, config: str, log_dir: Path, name: str, host: str | None = None
    ) -> None:
        """``host``: its host identity (PGQ_HOST), for several supervisors acting as hosts."""
        log_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = log_dir / f"{name}.yaml"
        self.config_path.write_text(config)
        self.log_path = log_dir / f"{name}.log"
        env = {
            **os.environ,
            "PGQ_DSN": dsn,
            DSN_ENV: dsn,
            "PYTHONPATH": os.pathsep.join([str(SCRIPTS), str(ROOT)]),
        }
        if host is not None:
            env["PGQ_HOST"] = host
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor.cli", "-c", str(self.config_path)],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"supervisor exited with {self.proc.returncode}; see "
                f"{self.log_path}:\n{self.log_path.read_text()[-3000:]}"
            )

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _wait(condition: Any, sup: Supervisor, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        sup.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def _fill(db: str, jobs: int, kind: str = "noop", args: Any = None) -> None:
    migrate(db)
    with psycopg.connect(db, autocommit=True) as conn:
        for start in range(0, jobs, 10_000):
            count = min(10_000, jobs - start)
            enqueue_many(
                conn,
                [NewJob(kind, args(start + i) if args else {}) for i in range(count)],
                notify=False,
            )
        conn.execute("VACUUM ANALYZE pgq.jobs")


def time_drain(
    conn: psycopg.Connection[Any],
    *,
    timeout: float,
    on_timeout: Callable[[], str],
    each_poll: Callable[[int], None],
    poll: float = 0.002,
) -> float:
    """Poll PROGRESS until the queue is empty; seconds from the first claim seen to the first
    poll that saw nothing left (both the database's clock). ``each_poll`` gets the poll's number
    (check the supervisors are alive, sample what else the caller measures); past ``timeout``,
    TimeoutError with what ``on_timeout`` says."""
    first = None
    deadline = time.monotonic() + timeout
    polls = 0
    while True:
        claimed, done, now = conn.execute(PROGRESS).fetchone()  # type: ignore[misc]
        if first is None and claimed:
            first = now
        if done:
            assert first is not None, "the queue emptied before any claim was seen"
            return (now - first).total_seconds()
        if time.monotonic() > deadline:
            raise TimeoutError(on_timeout())
        each_poll(polls)
        polls += 1
        time.sleep(poll)


def drain_with(
    db: str,
    jobs: int,
    config: str,
    *,
    log_dir: Path,
    name: str,
    history: bool,
    timeout: float = 600.0,
    poll: float = 0.002,
    metrics_scrape: Any = None,
) -> dict[str, Any]:
    """Start a supervisor on an already filled database and time it emptying the queue.
    ``metrics_scrape``, if given, is called once drained, before the stop (as "scraped")."""
    with psycopg.connect(db, autocommit=True) as conn, Supervisor(db, config, log_dir, name) as sup:

        def left() -> str:
            (count,) = conn.execute(REMAINING).fetchone()  # type: ignore[misc]
            return f"{name}: {count} of {jobs} jobs left after {timeout:.0f}s"

        seconds = time_drain(
            conn,
            timeout=timeout,
            on_timeout=left,
            each_poll=lambda _: sup.check_alive(),
            poll=poll,
        )
        scraped = metrics_scrape() if metrics_scrape is not None else None
        code = sup.stop()
        if code != 0:
            raise RuntimeError(f"{name}: supervisor exited {code}; see {sup.log_path}")
        timed_by = f"polling every {poll * 1000:g} ms: first claim to none left (clock_timestamp())"
        if history:
            done, span = conn.execute(HISTORY_SPAN).fetchone()  # type: ignore[misc]
            if done != jobs:
                raise RuntimeError(f"{name}: {done} of {jobs} jobs in the history")
            seconds, timed_by = span, "pgq.job_history: first claim to last completion"
    result = {
        "seconds": round(seconds, 4),
        "jobs_per_s": rate(jobs, seconds),
        "timed_by": timed_by,
        "log": str(sup.log_path),
    }
    if metrics_scrape is not None:
        result["scraped"] = scraped
    return result


def drain(
    dsn: str,
    jobs: int,
    processes: int,
    batch: int,
    *,
    history: bool = False,
    log_dir: Path,
) -> dict[str, Any]:
    """Enqueue `jobs` no-op jobs, then time the supervisor's `processes` children emptying it."""
    system = "pgq-supervisor" + (" +history" if history else "")
    with fresh_database(dsn, f"ours_drain_{batch}") as db:
        _fill(db, jobs)
        result = drain_with(
            db,
            jobs,
            config_text(processes, batch, history=history),
            log_dir=log_dir,
            name=f"drain-b{batch}{'-h' if history else ''}",
            history=history,
        )
    return {
        "system": system,
        "scenario": "drain",
        "jobs": jobs,
        "processes": processes,
        "batch": batch,
        **result,
    }


VACUUMS = """
SELECT vacuum_count, autovacuum_count FROM pg_stat_user_tables
WHERE relid = 'pgq.jobs'::regclass
"""


def long_drain(dsn: str, jobs: int, processes: int, batch: int, *, log_dir: Path) -> dict[str, Any]:
    """A drain long enough for consumed jobs to pile up as dead entries at the head of the
    claim index, with the master's vacuum service on (the default) and off, back to back."""
    runs: dict[str, Any] = {}
    for vacuum in (True, False):
        label = "vacuum" if vacuum else "no_vacuum"
        with fresh_database(dsn, f"ours_long_{label}") as db:
            _fill(db, jobs)
            with psycopg.connect(db, autocommit=True) as conn:
                before = conn.execute(VACUUMS).fetchone() or (0, 0)  # the fill's own VACUUM
            result = drain_with(
                db,
                jobs,
                config_text(processes, batch, vacuum=vacuum),
                log_dir=log_dir,
                name=f"long-drain-{label}",
                history=False,
                timeout=3600.0,
                poll=0.02,
            )
            with psycopg.connect(db, autocommit=True) as conn:
                row = conn.execute(VACUUMS).fetchone()
            after = row or before
            result["vacuums"] = after[0] - before[0]
            result["autovacuums"] = after[1] - before[1]
        runs[label] = result
    return {
        "jobs": jobs,
        "processes": processes,
        "batch": batch,
        **runs,
        "ratio": round(runs["vacuum"]["jobs_per_s"] / runs["no_vacuum"]["jobs_per_s"], 3),
    }


def wait_idle_children(
    conn: psycopg.Connection[Any], sup: Supervisor, processes: int, timeout: float
) -> None:
    """Until the bench pool's children are connected and have settled into their idle wait."""
    _wait(
        lambda: (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                "'pgq-supervisor bench#%%' AND datname = current_database()"
            ).fetchone()[0]
            >= processes
        ),
        sup,
        timeout,
        "children connected",
    )
    time.sleep(0.5)


def pickup(
    dsn: str,
    jobs: int = 200,
    interval: float = 0.020,
    processes: int = 2,
    *,
    batch: int = 10,
    warmup: int = 20,
    log_dir: Path,
    timeout: float = 120.0,
) -> dict[str, Any]:
    """Idle children; one job every `interval`; enqueue-commit to handler-start latency, by the
    same side tables and trigger as the peers."""
    with fresh_database(dsn, "ours_pickup") as db:
        migrate(db)
        create_side_tables(db)
        install_enqueue_marker(db, "pgq", "jobs")
        config = config_text(
            processes, batch, kind="record_start", handler="benchlib.ours_handlers:record_start"
        )
        with (
            psycopg.connect(db, autocommit=True) as conn,
            Supervisor(db, config, log_dir, "pickup") as sup,
        ):
            wait_idle_children(conn, sup, processes, timeout)

            _, latencies = measure_pickup(
                conn,
                lambda count: [enqueue(conn, "record_start") for _ in paced(count, interval)],
                warmup=warmup,
                jobs=jobs,
                wait=lambda ok, what: _wait(ok, sup, timeout, what),
            )
    return {
        "system": "pgq-supervisor",
        "scenario": "pickup",
        "jobs": jobs,
        "interval_s": interval,
        "processes": processes,
        "batch": batch,
        **latency_summary_ms(latencies),
        "timed_by": "bench_enqueued (insert trigger) to bench_started (handler's first statement)",
    }


__all__ = [
    "Supervisor",
    "config_text",
    "drain",
    "drain_with",
    "pickup",
    "wait_idle_children",
    "wait_until",
]
