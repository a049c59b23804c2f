"""The supervisor's process lifecycle: real processes, real signals, real PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from tests.commands import run_cli
from tests.lifecycle.harness import Supervisor, query, scalar, wait_for

BASIC = """
handlers:
  sleep: tests.handlers:sleep
  record: tests.handlers:record
  crash: tests.handlers:crash
pools:
  main:
    processes: 2
    queues: {default: 1}
shutdown_timeout: 20s
"""


def _enqueue(dsn: str, jobs: list[NewJob]) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return enqueue_many(conn, jobs)


def _ran(dsn: str, event: str = "ran") -> dict[int, int]:
    rows = query(
        dsn, "SELECT job_id, count(*) FROM test_ledger WHERE event = %s GROUP BY job_id", (event,)
    )
    return dict(rows)


def _left(dsn: str) -> int:
    return scalar(dsn, "SELECT count(*) FROM pgq.jobs")


def test_sigterm_during_work_loses_nothing_and_exits_0(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 0.3}) for _ in range(30)])
    sup = supervisor(BASIC).start()
    wait_for(lambda: len(_ran(ledger, "finished")) >= 4, what="some jobs done")
    started = time.monotonic()
    sup.send(signal.SIGTERM)
    assert sup.wait(30) == 0
    assert time.monotonic() - started < 20
    finished = _ran(ledger, "finished")
    begun = _ran(ledger, "started")
    # Every job that started also finished (the job in hand completes), and nothing is left
    # running or was lost: the rest are back in the queue with no attempt spent.
    assert set(begun) == set(finished)
    rows = query(ledger, "SELECT id, state, attempts FROM pgq.jobs")
    assert all(state == "available" and attempts == 0 for _, state, attempts in rows)
    assert len(rows) + len(finished) == len(ids)
    assert "draining 2 children" in sup.log()

    # A second supervisor finishes the rest; every job ran to completion exactly once.
    sup2 = supervisor(BASIC).start()
    wait_for(lambda: _left(ledger) == 0, what="queue drained")
    assert sup2.stop() == 0
    finished = _ran(ledger, "finished")
    assert sorted(finished) == sorted(ids)
    assert set(finished.values()) == {1}


def test_child_killed_mid_job_is_replaced_and_the_job_runs_again(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("sleep", {"seconds": 3})])
    sup = supervisor(BASIC).start()
    victim = wait_for(
        lambda: query(ledger, "SELECT pid FROM test_ledger WHERE job_id = %s", (job_id,)),
        what="job started",
    )[0][0]
    os.kill(victim, signal.SIGKILL)
    # The master requeues the job at once (attempt counted) and a new child runs it.
    rerun = wait_for(
        lambda: query(
            ledger,
            "SELECT pid, attempt FROM test_ledger WHERE job_id = %s AND attempt = 2",
            (job_id,),
        ),
        timeout=15,
        what="job run again",
    )
    assert rerun[0][0] != victim
    sup.wait_children(2)
    sup.wait_log(f"(pid {victim}) killed by SIGKILL (perhaps out of memory?)")
    sup.wait_log(f"job {job_id} (sleep) on queue default requeued after attempt 1")
    assert sup.stop() == 0


def test_master_session_survives_children_starting_and_dying(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(BASIC).start()
    sup.wait_children(2)

    def master_backend() -> list[tuple[int]]:
        return query(
            ledger,
            "SELECT pid FROM pg_stat_activity WHERE application_name = "
            "'pgq-supervisor master' AND datname = current_database()",
        )

    backend = wait_for(master_backend, what="master session")[0][0]
    for _ in range(3):
        victims = {c.pid for c in sup.children()}
        for child in sup.children():
            child.kill()
        wait_for(
            lambda old=victims: (
                {c.pid for c in sup.children()}.isdisjoint(old) and len(sup.children()) == 2
            ),
            what="children replaced",
        )
    # Children that exit cleanly (os._exit after a drain) must not close it either.
    (job_id,) = _enqueue(ledger, [NewJob("crash", {"how": "exit"}, max_attempts=1)])
    wait_for(
        lambda: (
            scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (job_id,)) == "discarded"
        ),
        what="crashing job discarded",
    )
    assert master_backend() == [(backend,)]
    # The session still works: it just requeued a job for the crashed child.
    sup.wait_log("discarded after attempt 1 (no attempts left)")
    assert sup.stop() == 0


def test_sigkill_of_the_master_leaves_no_orphan(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    ids = _enqueue(ledger, [NewJob("sleep", {"seconds": 60}) for _ in range(2)])
    sup = supervisor(BASIC).start()
    wait_for(lambda: len(_ran(ledger, "started")) == 2, what="both children busy")
    children = sup.children()
    assert len(children) == 2
    sup.send(signal.SIGKILL)
    sup.wait(10)

    def gone(p: psutil.Process) -> bool:
        try:
            return p.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    wait_for(lambda: all(gone(p) for p in children), timeout=10, what="children gone")
    # They gave their jobs back on the way out (attempt spent: the job was interrupted).
    rows = query(ledger, "SELECT state, attempts FROM pgq.jobs WHERE id = ANY(%s)", (ids,))
    assert sorted(rows) == [("available", 1), ("available", 1)]


def test_crash_loop_exits_3_with_the_reason(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor("""
        handlers:
          boom: tests.crash_at_fork:handler
        pools:
          doomed:
            processes: 2
            queues: {default: 1}
    """).start()
    assert sup.wait(60) == 3
    log = sup.log()
    assert "pool doomed cannot boot" in log
    assert "exited with code 66" in log


def test_reload_replaces_only_the_changed_pool(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    yaml_text = """
        handlers:
          record: tests.handlers:record
        pools:
          alpha:
            processes: 2
            queues: {a: 1, b: 1}
          beta:
            processes: 1
            queues: {c: 1}
    """
    sup = supervisor(yaml_text).start()
    sup.wait_children(3)

    def pool_pids() -> dict[str, set[int]]:
        pids: dict[str, set[int]] = {"alpha": set(), "beta": set()}
        for child in sup.children():
            try:
                title = " ".join(child.cmdline())
            except psutil.Error:
                continue  # exited since it was listed
            for name in pids:
                if f"{name}#" in title:
                    pids[name].add(child.pid)
        return pids

    before = wait_for(
        lambda: (p := pool_pids()) and len(p["alpha"]) == 2 and len(p["beta"]) == 1 and p,
        what="titled children",
    )
    # Weights alone: the same children take them, nothing respawns.
    sup.config.write_text(sup.config.read_text().replace("{a: 1, b: 1}", "{a: 5, b: 1}"))
    sup.send(signal.SIGHUP)
    sup.wait_log("reload: pool alpha changed (queue a weight 1 -> 5): 2 running children")
    assert pool_pids() == before
    # A queue added: alpha's children are replaced, beta's kept.
    sup.config.write_text(sup.config.read_text().replace("{a: 5, b: 1}", "{a: 5, b: 1, d: 1}"))
    sup.send(signal.SIGHUP)
    after = wait_for(
        lambda: (
            (p := pool_pids())
            and len(p["alpha"]) == 2
            and p["alpha"].isdisjoint(before["alpha"])
            and p
        ),
        what="alpha replaced",
    )
    assert after["beta"] == before["beta"]

    # A broken file is rejected and nothing changes.
    sup.config.write_text("pools: [this is: not valid")
    sup.send(signal.SIGHUP)
    sup.wait_log("reload rejected, keeping the running configuration")
    time.sleep(0.5)
    assert pool_pids() == after
    assert sup.stop() == 0


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "pools: {p: {processes: 0, queues: {q: 1}}}\nhandlers: {k: tests.handlers:noop}",
            "pools.p.processes",
        ),
        ("pools: {p: {queues: {q: 0}}}\nhandlers: {k: tests.handlers:noop}", "pools.p.queues.q"),
        (
            "pools: {p: {queues: {q: 1}, proceses: 2}}\nhandlers: {k: tests.handlers:noop}",
            "did you mean 'processes'",
        ),
        ("pools: {p: {queues: {q: 1}}}\nhandlers: {k: tests.nope:noop}", "handlers.k"),
        ("pools: {p: {queues: {q: 1}}\nhandlers: {k: tests.handlers:noop}", "line"),
    ],
)
def test_bad_config_exits_2_with_the_key_path(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml_text)
    for verb in ([], ["check"]):
        result = run_cli(
            path, *verb, env={**os.environ, "PGQ_DSN": "postgresql://nobody@127.0.0.1:1/none"}
        )
        assert result.returncode == 2, result.stderr
        assert expected in result.stderr


def test_password_never_shows_in_titles_or_logs(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    secret = "s3cr3t-Pa55word"
    # Trust authentication ignores the password, so the DSN still connects.
    params = psycopg.conninfo.conninfo_to_dict(ledger)
    params["password"] = secret
    with_password = psycopg.conninfo.make_conninfo(**params)
    _enqueue(ledger, [NewJob("crash", {"how": "exit"}, max_attempts=1)])
    sup = supervisor(BASIC, args=["--dsn", with_password])
    sup.start()
    sup.wait_children(2)
    wait_for(lambda: "discarded" in sup.log(), what="a logged failure")
    titles = []
    for proc in [psutil.Process(sup.pid), *sup.children()]:
        with contextlib.suppress(psutil.Error):  # a child that exited since it was listed
            titles.append(" ".join(proc.cmdline()))
    assert titles and all(t.startswith("pgq-supervisor: ") for t in titles), titles
    assert not any(secret in t for t in titles)
    assert sup.stop() == 0
    assert secret not in sup.log()


def test_a_leaking_handler_is_recycled_at_the_soft_limit_between_jobs(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    leaks = [NewJob("leak", {"megabytes_per_job": 24, "pause": 0.3}) for _ in range(8)]
    ids = _enqueue(ledger, leaks)
    sup = supervisor("""
        handlers:
          leak: tests.handlers:leak
        pools:
          main:
            processes: 1
            queues: {default: 1}
            memory_limit: 64MiB
            memory_hard_limit: 1GiB
    """).start()
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.jobs") == 0,
        timeout=60,
        what="all jobs done",
    )
    log = sup.log()
    assert "recycling: memory" in log and "above the soft limit of 64 MiB" in log
    assert "recycled: soft memory limit reached" in log
    # Recycled between jobs: every job ran exactly once, first time, across several children.
    runs = query(ledger, "SELECT job_id, attempt, pid FROM test_ledger")
    assert sorted(j for j, _, _ in runs) == sorted(ids)
    assert {a for _, a, _ in runs} == {1}
    assert len({p for _, _, p in runs}) >= 2
    assert sup.stop() == 0


def test_a_child_starts_with_the_masters_heap_frozen(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    """The child's collections leave alone what the master loaded before the fork (the
    supervisor, psycopg, the handlers): without the freeze each full collection examined (and
    copied, page by page) tens of thousands of the master's objects."""
    (job_id,) = _enqueue(ledger, [NewJob("gc_frozen")])
    sup = supervisor("""
        handlers:
          gc_frozen: tests.handlers:gc_frozen
        pools:
          main:
            processes: 1
            queues: {default: 1}
    """).start()
    event = wait_for(
        lambda: scalar(ledger, "SELECT event FROM test_ledger WHERE job_id = %s", (job_id,)),
        timeout=30,
        what="the job to run",
    )
    assert int(event.split()[1]) > 10_000, event
    assert sup.stop() == 0


def test_json_logs_carry_the_job_fields(supervisor: Callable[..., Supervisor], ledger: str) -> None:
    (job_id,) = _enqueue(ledger, [NewJob("crash", {"how": "exit"}, max_attempts=1)])
    sup = supervisor(BASIC, args=["--log-format", "json"]).start()
    wait_for(
        lambda: (
            scalar(ledger, "SELECT state FROM pgq.jobs WHERE id = %s", (job_id,)) == "discarded"
        ),
        what="job discarded",
    )
    assert sup.stop() == 0
    lines = [json.loads(line) for line in sup.log().splitlines() if line.startswith("{")]
    assert lines and all({"ts", "level", "logger", "pid", "msg"} <= set(e) for e in lines)
    about_job = [e for e in lines if e.get("job_id") == job_id]
    assert about_job, lines
    assert {(e["kind"], e["queue"], e["attempt"], e["pool"]) for e in about_job} == {
        ("crash", "default", 1, "main")
    }
