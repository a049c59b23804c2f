"""What each attempt costs, on a real supervisor: CPU seconds and peak memory on every finished
attempt (retried ones too), in the history and in `jobs show --json`; an inline child's peak
is the attempt's own, a threaded child's CPU is its handler thread's and its memory unknown."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import psycopg

from supervisor import NewJob, enqueue_many
from tests.commands import run_cli
from tests.lifecycle.harness import Supervisor, scalar, wait_for

CONFIG = """
handlers:
  spin: tests.handlers:spin
  hog: tests.handlers:hog
  fail: tests.handlers:fail
history: {enabled: true}
jobs:
  fail: {backoff: {base: 100ms}}
pools:
  inline:
    queues: {inline: 1}
  threaded:
    queues: {threaded: 1}
    threads: 2
"""


# About 0.25 s of CPU on a fast machine: well above what the hog's 96 MiB of page faults cost
# (0.14 s seen under load), so the hog's own CPU stays the smaller one.
LOOPS = 6_000_000


def show(sup: Supervisor, job_id: int) -> dict[str, Any]:
    env = {**os.environ, "PGQ_DSN": sup.dsn}
    done = run_cli(sup.config, "jobs", "show", str(job_id), "--json", env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_every_finished_attempt_keeps_its_cpu_and_peak_memory(
    supervisor: Callable[..., Supervisor], ledger: str
) -> None:
    sup = supervisor(CONFIG).start()
    with psycopg.connect(ledger) as conn:
        ids = enqueue_many(
            conn,
            [
                NewJob("spin", {"loops": LOOPS}, queue="inline"),
                NewJob("hog", {"megabytes": 96, "seconds": 0.2}, queue="inline"),
                NewJob("fail", {"times": 1}, queue="inline"),
                NewJob("spin", {"loops": LOOPS}, queue="threaded"),
            ],
        )
    wait_for(
        lambda: scalar(ledger, "SELECT count(*) FROM pgq.job_history") == 4,
        60,
        what="four jobs finished\n" + sup.log(),
    )
    busy, hog, failed, threaded = (show(sup, i) for i in ids)
    # The same work here, for scale (CPU time: the machine's load stretches only wall time).
    started = time.process_time()
    sum(i * i for i in range(LOOPS))
    work = time.process_time() - started
    assert work / 3 <= busy["cpu_seconds"] <= work * 3
    assert busy["peak_memory"] > 0 and busy["peak_memory"] < hog["peak_memory"]
    assert hog["peak_memory"] >= 96 << 20  # the attempt's own peak: it wrote 96 MiB
    assert hog["cpu_seconds"] < busy["cpu_seconds"]
    assert [(c["attempt"], c["outcome"]) for c in failed["costs"]] == [
        (1, "retried"),
        (2, "completed"),
    ]
    assert work / 3 <= threaded["cpu_seconds"] <= work * 3 and threaded["peak_memory"] is None
    assert scalar(ledger, "SELECT count(*) FROM pgq.attempt_costs") == 5
    # The busy job after the hog, in the same child, is not charged the hog's peak.
    with psycopg.connect(ledger) as conn:
        later = enqueue_many(conn, [NewJob("spin", {"loops": 1000}, queue="inline")])
    wait_for(lambda: scalar(ledger, "SELECT count(*) FROM pgq.job_history") == 5, 30)
    assert show(sup, later[0])["peak_memory"] < 64 << 20
