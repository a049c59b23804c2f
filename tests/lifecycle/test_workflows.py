"""A workflow across two supervisors on one database while their children are SIGKILLed: every
step completes, none starts before its parents finished, and the fan-in runs once with every
parent's result (issue 32)."""

from __future__ import annotations

import contextlib
import random
import signal
import time
from collections.abc import Callable

import psutil
import psycopg
import pytest

from supervisor import NewJob, Workflow, enqueue_workflow, workflow_status
from tests.lifecycle.harness import Supervisor, query, wait_for

CONFIG = """
handlers:
  step: tests.workflow_handlers:step
  join: tests.workflow_handlers:join
pools:
  main:
    processes: 2
    batch: 2
    queues: {default: 1}
shutdown_timeout: 10s
"""

FAN = 80


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_workflow_across_two_supervisors_with_children_killed(
    supervisor: Callable[..., Supervisor], dsn: str
) -> None:
    sups = [supervisor(CONFIG, extra_env={"PGQ_HOST": f"host{i}"}).start() for i in range(2)]
    for sup in sups:
        sup.wait_children(2, timeout=60)
    wf = Workflow("drill")
    root = wf.add(NewJob("step", {"seconds": 0.05}))
    fan = [wf.add(NewJob("step", {"seconds": 0.1}), after=[root]) for _ in range(FAN)]
    joined = wf.add(NewJob("join"), after=fan)
    wf.add(NewJob("step"), after=[joined])
    with psycopg.connect(dsn, autocommit=True) as conn:
        handle = enqueue_workflow(conn, wf)
    join_id = handle.job_ids[FAN + 1]

    # SIGKILL a child of each supervisor in turn while the fan-out runs.
    kills = 0
    rng = random.Random(32)
    deadline = time.monotonic() + 60
    while kills < 6 and time.monotonic() < deadline:
        done = query(dsn, "SELECT count(DISTINCT job_id) FROM test_ledger WHERE event='finished'")
        if done[0][0] > FAN - 10:
            break
        children = sups[kills % 2].children()
        if children:
            with contextlib.suppress(psutil.NoSuchProcess):
                rng.choice(children).send_signal(signal.SIGKILL)
                kills += 1
        time.sleep(0.4)
    assert kills >= 2

    with psycopg.connect(dsn, autocommit=True) as conn:
        status = wait_for(
            lambda: (s := workflow_status(conn, handle.id)).finished and s,
            timeout=120,
            what="the workflow to finish\n" + sups[0].log()[-3000:],
        )
    assert (status.completed, status.discarded, status.cancelled) == (FAN + 3, 0, 0)

    runs = dict(query(dsn, "SELECT job_id, count(*) FROM test_ledger GROUP BY job_id"))
    assert set(runs) == set(handle.job_ids)  # every step ran
    # The join ran once, after all its parents, and saw every one completed with its result.
    joins = query(dsn, "SELECT event FROM test_ledger WHERE job_id = %s", (join_id,))
    assert joins == [(f"join:{FAN}:{FAN}:{FAN}",)]
    # No step started before each of its parents had finished (a killed run does not count).
    early = query(
        dsn,
        """
        SELECT e.child_id
        FROM pgq.workflow_edges AS e
        JOIN pgq.workflow_steps AS s ON s.job_id = e.child_id
        WHERE s.workflow_id = %s
          AND (SELECT min(at) FROM test_ledger WHERE job_id = e.child_id)
              < (SELECT max(at) FROM test_ledger
                 WHERE job_id = e.parent_id AND event = 'finished')
        """,
        (handle.id,),
    )
    assert early == []
    # Work happened on both hosts.
    pids = query(dsn, "SELECT count(DISTINCT pid) FROM test_ledger")
    assert pids[0][0] >= 3
    for sup in sups:
        assert sup.stop() == 0
