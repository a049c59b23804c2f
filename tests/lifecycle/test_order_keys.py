"""Order keys across two supervisors (issue 33): 40 keys of 25 jobs each, a tenth of them
failing once. Per key, attempts start in enqueue order and never overlap (a retry holds the
key's followers until it has run again); different keys run at the same time."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable

import psycopg
import pytest

from supervisor import NewJob, enqueue_many
from tests.lifecycle.harness import Supervisor, query, wait_for

CONFIG = """
handlers:
  hook: tests.order_handlers:hook
pools:
  main:
    processes: 2
    batch: 2
    queues: {default: 1}
jobs:
  hook:
    backoff: {base: 0.2s, cap: 0.5s}
shutdown_timeout: 10s
"""

KEYS = 40
PER_KEY = 25


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_forty_keys_across_two_supervisors_keep_their_order(
    supervisor: Callable[..., Supervisor], dsn: str
) -> None:
    rng = random.Random(33)
    jobs, failing = [], 0
    for _ in range(PER_KEY):
        for k in range(KEYS):
            fail = rng.random() < 0.1
            failing += fail
            # Random priorities: order inside a key must win over them.
            jobs.append(
                NewJob(
                    "hook",
                    {"seconds": 0.01, "fail_once": fail},
                    order_key=f"k{k:02}",
                    priority=rng.randint(0, 5),
                )
            )
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = enqueue_many(conn, jobs)
    key_of = {job_id: job.order_key for job_id, job in zip(ids, jobs, strict=True)}
    assert failing >= 50

    sups = [supervisor(CONFIG, extra_env={"PGQ_HOST": f"host{i}"}).start() for i in range(2)]
    wait_for(
        lambda: query(dsn, "SELECT count(*) FROM pgq.jobs")[0][0] == 0,
        timeout=240,
        what="every ordered job to complete\n" + sups[0].log()[-3000:],
    )
    for sup in sups:
        assert sup.stop() == 0

    events = query(dsn, "SELECT job_id, attempt, event, at, pid FROM test_ledger ORDER BY at")
    by_key: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    for job_id, attempt, event, _, _ in events:
        by_key[key_of[job_id]].append((job_id, attempt, event))
    assert len(by_key) == KEYS
    for key, seen in by_key.items():
        # Per key: start, end, start, end... (never two attempts at once), the jobs in id order
        # (enqueue order), and a failed attempt followed by the same job's retry.
        starts = [(j, a) for j, a, e in seen if e == "started"]
        assert [e == "started" for _, _, e in seen] == [True, False] * len(starts), key
        assert [j for j, _ in starts] == sorted(j for j, _ in starts), key
        for (job_id, attempt, event), following in zip(seen[1::2], seen[2::2], strict=False):
            if event == "failed":
                assert following[:2] == (job_id, attempt + 1), key
        finished = [j for j, _, e in seen if e == "finished"]
        assert finished == sorted(i for i in ids if key_of[i] == key), key
    # Keys ran in parallel: at some moment attempts of different keys ran at once.
    running: set[int] = set()
    most = 0
    for job_id, _, event, _, _ in events:
        if event == "started":
            running.add(job_id)
            most = max(most, len(running))
        else:
            running.discard(job_id)
    assert most >= 3
    # Both hosts did work, and nothing is left of the keys.
    assert len({pid for *_, pid in events}) >= 3
    assert query(dsn, "SELECT count(*) FROM pgq.order_keys") == [(0,)]
