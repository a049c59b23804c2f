"""pgq-supervisor: a Postgres job queue run by a fork-per-worker supervisor.

The library half, used by applications and by the supervisor alike::

    from supervisor import enqueue

    with conn.transaction():
        order_id = create_order(conn, payload)
        enqueue(conn, "deliver_webhook", {"order_id": order_id}, queue="webhooks")
"""

from supervisor import clash
from supervisor.crypto import Secret
from supervisor.queue.batches import (
    Batch,
    BatchStatus,
    batch_status,
    batch_status_async,
    enqueue_batch,
    enqueue_batch_async,
)
from supervisor.queue.context import JobContext, Parent
from supervisor.queue.control import (
    cancel,
    list_jobs,
    pause_queue,
    paused_queues,
    resume_queue,
    retry_now,
    show_job,
)
from supervisor.queue.enqueue import (
    EnqueueError,
    NewJob,
    enqueue,
    enqueue_async,
    enqueue_many,
    enqueue_many_async,
)
from supervisor.queue.jobs import Fenced, Job, LeaseLost, claim, complete, renew_leases, settle
from supervisor.queue.migrations import migrate
from supervisor.queue.outcomes import Discard, Retry, Snooze
from supervisor.queue.unknown import UnknownOutcome, resolve, result, result_async
from supervisor.queue.workflows import (
    Step,
    Workflow,
    WorkflowHandle,
    WorkflowStatus,
    cancel_workflow,
    enqueue_workflow,
    enqueue_workflow_async,
    workflow_status,
)

# The one place the version is written; pyproject.toml reads it from here.
__version__ = "0.1.0"
# Our mark on the package, which supervisord's __init__ (same import name) lacks.
PGQ_SUPERVISOR = True
clash.check()

__all__ = [
    "Batch",
    "BatchStatus",
    "Discard",
    "EnqueueError",
    "Fenced",
    "Job",
    "JobContext",
    "LeaseLost",
    "NewJob",
    "Parent",
    "Retry",
    "Secret",
    "Snooze",
    "Step",
    "UnknownOutcome",
    "Workflow",
    "WorkflowHandle",
    "WorkflowStatus",
    "batch_status",
    "batch_status_async",
    "cancel",
    "cancel_workflow",
    "claim",
    "complete",
    "enqueue",
    "enqueue_async",
    "enqueue_batch",
    "enqueue_batch_async",
    "enqueue_many",
    "enqueue_many_async",
    "enqueue_workflow",
    "enqueue_workflow_async",
    "list_jobs",
    "migrate",
    "pause_queue",
    "paused_queues",
    "renew_leases",
    "resolve",
    "result",
    "result_async",
    "resume_queue",
    "retry_now",
    "settle",
    "show_job",
    "workflow_status",
]
