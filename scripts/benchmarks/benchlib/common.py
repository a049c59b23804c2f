"""What the peer and limit benchmarks share: databases, worker processes, clocks, statistics.

Times come from the database clock (``clock_timestamp()`` or a library's own ``now()``
columns), never from this process's clock, so every system is timed by the same clock, and a
slow benchmark process cannot make a system look slower than it is.

Side tables. Pick-up latency needs "enqueue committed" and "handler started" on one clock,
and neither peer records both, so two small UNLOGGED tables do, the same way for every system:

- ``bench_enqueued``: an AFTER INSERT trigger on the system's job table
  (``install_enqueue_marker``) stamps ``clock_timestamp()`` inside the enqueue's own
  transaction. The enqueue is a single autocommitted statement, so all that follows the stamp
  is the rest of that statement and the commit's WAL flush (~0.1 ms here): the figure
  overstates the true latency by that much, never understates it. (A reading taken by the
  enqueuer after COMMIT returned was tried first: it races the workers the commit just woke
  for the two cores, and came out up to 0.6 ms *after* the claim.)
- ``bench_started``: the handler's first statement stamps ``clock_timestamp()``.

Pick-up latency is ``started - enqueued`` per job.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import psycopg
from psycopg import conninfo, sql

#: Every database a scenario creates starts with this, so a leftover one is easy to spot.
DB_PREFIX = "bench_peers_"

#: The environment variable that hands a worker process its DSN (kept out of argv and `ps`).
DSN_ENV = "BENCH_PEER_DSN"

#: The folder that holds the ``benchlib`` package: worker processes import from it.
SCRIPTS_DIR = Path(__file__).resolve().parent.parent

SIDE_TABLES = """
CREATE UNLOGGED TABLE IF NOT EXISTS bench_enqueued (
    job_id  bigint      PRIMARY KEY,
    at      timestamptz NOT NULL
);
CREATE UNLOGGED TABLE IF NOT EXISTS bench_started (
    job_id  bigint      NOT NULL,
    at      timestamptz NOT NULL
);
CREATE UNLOGGED TABLE IF NOT EXISTS bench_ready (
    pid     integer     NOT NULL,
    at      timestamptz NOT NULL
)
"""

ENQUEUE_MARKER_FUNCTION = """
CREATE OR REPLACE FUNCTION bench_mark_enqueued() RETURNS trigger
LANGUAGE plpgsql
-- Its own search_path: an insert from inside a function with a pinned one (pgq.enqueue)
-- must still find the side table.
SET search_path = public, pg_catalog
AS $$
BEGIN
    INSERT INTO bench_enqueued (job_id, at) VALUES (NEW.id, clock_timestamp());
    RETURN NULL;
END;
$$
"""

ENQUEUE_MARKER_TRIGGER = """
CREATE TRIGGER bench_mark_enqueued
AFTER INSERT ON {table}
FOR EACH ROW EXECUTE FUNCTION bench_mark_enqueued()
"""

#: For the worker side; asyncpg spells its placeholders $1.
MARK_STARTED_ASYNCPG = "INSERT INTO bench_started (job_id, at) VALUES ($1, clock_timestamp())"
MARK_READY_ASYNCPG = "INSERT INTO bench_ready (pid, at) VALUES ($1, clock_timestamp())"

#: Seconds from each measured job's enqueue to its first start, warm-up jobs left out.
PICKUP_LATENCIES = """
SELECT extract(epoch FROM s.at - e.at)::float8
FROM bench_enqueued AS e
JOIN (
    SELECT job_id, min(at) AS at
    FROM bench_started
    GROUP BY job_id
) AS s USING (job_id)
WHERE e.job_id <> ALL(%(warmup)s::bigint[])
ORDER BY e.at
"""

STARTED_COUNT = "SELECT count(DISTINCT job_id) FROM bench_started WHERE job_id = ANY(%s::bigint[])"

READY_SPREAD = "SELECT count(*), extract(epoch FROM max(at) - min(at))::float8 FROM bench_ready"


# -- statistics ---------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    """The median; NaN for no values."""
    return percentile(values, 50.0)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), interpolated linearly between ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_summary_ms(seconds: Sequence[float]) -> dict[str, float | int]:
    """p50/p95/p99/max/mean in milliseconds of latencies given in seconds."""
    ms = [s * 1000.0 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 3),
        "p95_ms": round(percentile(ms, 95), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "max_ms": round(max(ms), 3) if ms else math.nan,
        "mean_ms": round(sum(ms) / len(ms), 3) if ms else math.nan,
    }


def rate(jobs: int, seconds: float) -> float:
    return round(jobs / seconds, 1) if seconds > 0 else math.nan


# -- databases ----------------------------------------------------------------------------------


def with_dbname(dsn: str, dbname: str) -> str:
    """The same server and credentials, another database (key=value form)."""
    return conninfo.make_conninfo(dsn, dbname=dbname)


def as_uri(dsn: str) -> str:
    """A postgresql:// URI for the same connection (asyncpg takes no key=value DSNs)."""
    params = conninfo.conninfo_to_dict(dsn)
    user = quote(str(params.pop("user", "")), safe="")
    password = params.pop("password", None)
    host = str(params.pop("host", "") or "")
    port = params.pop("port", None)
    dbname = quote(str(params.pop("dbname", "") or ""), safe="")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    if host.startswith("/"):
        params["host"] = host
        host = ""
    netloc = f"{auth}{host}{f':{port}' if port else ''}"
    query = f"?{urlencode({k: str(v) for k, v in params.items()})}" if params else ""
    return f"postgresql://{netloc}/{dbname}{query}"


def connect(dsn: str, *, autocommit: bool = True) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=autocommit, application_name="pgq-bench")


def _database_name(scenario: str, prefix: str) -> str:
    name = re.sub(r"[^a-z0-9_]", "_", f"{prefix}{scenario}_{os.getpid()}".lower())
    return name[:63]


@contextmanager
def fresh_database(dsn: str, scenario: str, *, prefix: str = DB_PREFIX) -> Iterator[str]:
    """Create an empty database for one scenario on dsn's server; drop it afterwards.

    Yields the new database's DSN. The name carries the scenario and this process's pid, so
    two benchmark runs on one server do not collide. With PGQ_BENCH_KEEP=1 in the environment
    the database is kept (its name printed), to look into what a run left.
    """
    name = _database_name(scenario, prefix)
    ident = sql.Identifier(name)
    with connect(dsn) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    try:
        yield with_dbname(dsn, name)
    finally:
        if os.environ.get("PGQ_BENCH_KEEP") == "1":
            print(f"kept database {name}", file=sys.stderr)
        else:
            with connect(dsn) as admin:
                admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))


def create_side_tables(dsn: str) -> None:
    with connect(dsn) as conn:
        conn.execute(SIDE_TABLES)


def install_enqueue_marker(dsn: str, *table: str) -> None:
    """Stamp every job inserted into table (schema, name) in bench_enqueued; its key is `id`."""
    with connect(dsn) as conn:
        conn.execute(ENQUEUE_MARKER_FUNCTION)
        conn.execute(sql.SQL(ENQUEUE_MARKER_TRIGGER).format(table=sql.Identifier(*table)))


def pickup_latencies(conn: psycopg.Connection[Any], warmup: Sequence[int]) -> list[float]:
    return [row[0] for row in conn.execute(PICKUP_LATENCIES, {"warmup": list(warmup)})]


def measure_pickup(
    conn: psycopg.Connection[Any],
    enqueue_paced: Callable[[int], list[int]],
    *,
    warmup: int,
    jobs: int,
    wait: Callable[[Callable[[], bool], str], None],
) -> tuple[list[int], list[float]]:
    """The pick-up measurement every system shares: `warmup` paced jobs to wake every worker,
    its connections and plans, then `jobs` measured ones; waits until each batch has started.
    Returns the warm-up ids (left out of every figure) and the measured latencies."""

    def all_started(ids: list[int]) -> bool:
        return conn.execute(STARTED_COUNT, (ids,)).fetchone()[0] == len(ids)  # type: ignore[index]

    warm = enqueue_paced(warmup)
    wait(lambda: all_started(warm), "warm-up jobs")
    measured = enqueue_paced(jobs)
    wait(lambda: all_started(measured), "measured jobs")
    return warm, pickup_latencies(conn, warm)


def claim_latencies(
    conn: psycopg.Connection[Any], query: str, warmup: Sequence[int]
) -> list[float]:
    """Seconds from enqueue to claim, by a peer's own claim-time query over bench_enqueued."""
    return [row[0] for row in conn.execute(query, {"warmup": list(warmup)})]


def ready_spread(conn: psycopg.Connection[Any]) -> tuple[int, float | None]:
    """How many worker processes said they were ready, and the seconds between first and last."""
    count, spread = conn.execute(READY_SPREAD).fetchone() or (0, None)
    return int(count), spread


# -- waiting and pacing -------------------------------------------------------------------------


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    workers: WorkerProcesses | None = None,
    interval: float = 0.05,
) -> None:
    """Poll condition until it holds; fail early if a worker process died."""
    deadline = time.monotonic() + timeout
    while not condition():
        if workers is not None:
            workers.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def paced(count: int, interval: float) -> Iterator[int]:
    """Yield 0..count-1, the i-th at start + i*interval: a fixed schedule that does not drift."""
    start = time.perf_counter()
    for i in range(count):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        yield i


# -- worker processes ---------------------------------------------------------------------------


class WorkerProcesses:
    """Worker processes this benchmark started: their logs, liveness and a clean stop.

    Output goes to a log file per process (a pipe nobody reads would fill and block it). Only
    these processes are ever signalled, each by its own pid.
    """

    def __init__(self, name: str, log_dir: Path) -> None:
        self.name = name
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(
        self,
        argv: Sequence[str],
        *,
        dsn: str,
        count: int,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        env = dict(os.environ)
        env.update(extra_env or {})
        env[DSN_ENV] = dsn
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SCRIPTS_DIR), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            log = self.log_dir / f"{self.name}-{i}.log"
            with open(log, "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        list(argv),
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=SCRIPTS_DIR,
                    )
                )
            self.logs.append(log)

    def check_alive(self) -> None:
        for proc, log in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} worker pid {proc.pid} exited with {proc.returncode}; "
                    f"last lines of {log}:\n{tail(log)}"
                )

    def stop(self, timeout: float = 15.0) -> list[int]:
        """SIGTERM every process, wait up to timeout, SIGKILL what is left; the exit codes."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(
                    f"{self.name} worker pid {proc.pid} ignored SIGTERM for {timeout:.0f}s; "
                    "killing it",
                    file=sys.stderr,
                )
                proc.kill()
                proc.wait()
        return [proc.returncode for proc in self.procs]


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read {path}: {exc})"


@contextmanager
def worker_processes(name: str, log_dir: Path) -> Iterator[WorkerProcesses]:
    """Worker processes that are stopped however the block ends."""
    workers = WorkerProcesses(name, log_dir)
    try:
        yield workers
    finally:
        workers.stop()


def default_log_dir() -> Path:
    return Path(os.environ.get("BENCH_LOG_DIR", "/tmp/pgq-bench-logs")) / str(os.getpid())


# The last commit whose migrations still carried the functions' bodies (before sql/functions/,
# issue 29): where a benchmark finds an earlier release's definition of a function.
BODIES_IN_MIGRATIONS = "16bc6bb"


def migration_at(name: str, ref: str = BODIES_IN_MIGRATIONS) -> str:
    """The text of sql/migrations/``name`` as commit ``ref`` had it (needs the git history)."""
    root = Path(__file__).resolve().parents[3]
    return subprocess.run(
        ["git", "-C", str(root), "show", f"{ref}:sql/migrations/{name}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
