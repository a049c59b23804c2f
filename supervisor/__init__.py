"""pgq-supervisor: a Postgres job queue run by a fork-per-worker supervisor.

The library half, used by applications and by the supervisor alike::

    from supervisor import enqueue

    with conn.transaction():
        order_id = create_order(conn, payload)
        enqueue(conn, "deliver_webhook", {"order_id": order_id}, queue="webhooks")
"""

from supervisor.queue.context import JobContext
from supervisor.queue.enqueue import EnqueueError, NewJob, enqueue, enqueue_many
from supervisor.queue.jobs import Fenced, Job, LeaseLost, claim, complete, renew_leases, settle
from supervisor.queue.migrations import migrate
from supervisor.queue.outcomes import Discard, Retry, Snooze

__all__ = [
    "Discard",
    "EnqueueError",
    "Fenced",
    "Job",
    "JobContext",
    "LeaseLost",
    "NewJob",
    "Retry",
    "Snooze",
    "claim",
    "complete",
    "enqueue",
    "enqueue_many",
    "migrate",
    "renew_leases",
    "settle",
]
