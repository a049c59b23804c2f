"""Bulk enqueue of jobs with order keys (migration 0066): the jobs of a key start one at a time,
in enqueue order, so each ordered job is written as its key's head or as a follower waiting
behind it, by the count of the key's unfinished jobs in pgq.order_keys.

One job goes through ``pgq.enqueue`` itself (enqueue.py's ``enqueue_ordered``). Many go in three
set-based statements, not a function call each: the keys' rows taken (and so locked) in key
order with their counts raised, the jobs written head or follower from the counts before, then
the new keys' heads named. A debounced ordered job, or one with a unique key, goes alone
through ``pgq.enqueue``, since it may replace a job or meet the holder of its key instead of
adding one; so do the other jobs of its key in the same call, in input order, and the keys so
written go in key order.

enqueue.py hands in its step type and its two other paths (``Paths``): this module builds on
them, and importing them would make the two modules a cycle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from supervisor.queue.columns import job_columns

# enqueue.py's generators: each yields statements to run and returns what they produced.
_Steps = Generator[Any, Any, Any]


class Paths(NamedTuple):
    """What enqueue.py lends this module: its statement step (name, params, fetch), the path
    of one job (``_enqueue_steps``) and the bulk path of jobs without an order key."""

    step: Callable[..., Any]
    one: Callable[[Any, bool], _Steps]
    unordered: Callable[[list[Any], bool], _Steps]


def with_order_keys(rows: list[Any], notify: bool, paths: Paths) -> _Steps:
    """The ids of ``rows`` (enqueue.py's checked rows) in input order, the ordered ones written
    as their keys' heads or followers (the others as enqueue_many writes them, first)."""
    others = [row for row in rows if row.order_key is None]
    other_ids = iter((yield from paths.unordered(others, notify)) if others else [])
    # A key with such a row goes through pgq.enqueue row by row, all of its rows in input
    # order, so that its jobs' ids (the order they run in) follow the input.
    alone = {
        (row.queue, row.order_key) for row in rows if row.order_key is not None and _alone(row)
    }
    plain = [r for r in rows if r.order_key is not None and (r.queue, r.order_key) not in alone]
    plain_ids = iter((yield from _plain_ordered(plain, notify, paths.step)) if plain else [])
    single = [r for r in rows if r.order_key is not None and (r.queue, r.order_key) in alone]
    by_row: dict[int, int] = {}
    for at in sorted(
        range(len(single)),
        key=lambda i: (single[i].queue.encode(), str(single[i].order_key).encode(), i),
    ):
        by_row[at] = yield from paths.one(single[at], notify)
    single_ids = iter([by_row[i] for i in range(len(single))])
    ids = []
    for row in rows:
        if row.order_key is None:
            ids.append(next(other_ids))
        elif (row.queue, row.order_key) in alone:
            ids.append(next(single_ids))
        else:
            ids.append(next(plain_ids))
    return ids


def _alone(row: Any) -> bool:
    """Whether an ordered row goes through ``pgq.enqueue`` by itself: debounced, or with a
    unique key (its holder's id comes back instead of a new job's)."""
    return bool(row.debounced or row.unique_key is not None)


def _plain_ordered(rows: list[Any], notify: bool, step: Callable[..., Any]) -> _Steps:
    follows = yield from join_keys(rows, step)
    returned = yield step(
        "enqueue_ordered_rows",
        {
            **job_columns(rows),
            "order_keys": [r.order_key for r in rows],
            "follows": follows,
            "notify": notify,
        },
        "all",
    )
    ids = [int(job_id) for job_id, _, _ in returned]
    yield from name_heads(rows, ids, follows, step)
    if notify and any(wakes for _, wakes, _ in returned):
        yield step("notify_scheduled", {}, "none")
    return ids


def join_keys(rows: list[Any], step: Callable[..., Any]) -> _Steps:
    """Takes the keys of ``rows`` (each with an order key, about to be written in this order)
    and returns, per row, whether it follows its key's head (it is written 'waiting'). Also the
    first half of a workflow's steps without parents (workflows.py)."""
    counts = Counter((row.queue, row.order_key) for row in rows)
    keys = list(counts)
    after = yield step(
        "order_keys_join",
        {
            "queues": [q for q, _ in keys],
            "keys": [k for _, k in keys],
            "counts": [counts[key] for key in keys],
        },
        "all",
    )
    # How many of each key's jobs were unfinished before these: a key's first job here follows
    # unless that is none, its later ones always do.
    ahead = {
        (queue, key): int(unfinished) - counts[(queue, key)] for queue, key, unfinished in after
    }
    follows, seen = [], Counter[tuple[str, str | None]]()
    for row in rows:
        key = (row.queue, row.order_key)
        follows.append(ahead[key] + seen[key] > 0)
        seen[key] += 1
    return follows


def name_heads(
    rows: list[Any], ids: list[int], follows: list[bool], step: Callable[..., Any]
) -> _Steps:
    """The keys that ``rows`` (written as ``ids``) opened get their heads: the rows that do not
    follow."""
    heads = [(row, job_id) for row, job_id, f in zip(rows, ids, follows, strict=True) if not f]
    if heads:
        yield step(
            "order_heads",
            {
                "queues": [row.queue for row, _ in heads],
                "keys": [row.order_key for row, _ in heads],
                "ids": [job_id for _, job_id in heads],
            },
            "none",
        )
