"""The columns every bulk enqueue statement takes, one array per field, from checked rows
(enqueue.py's ``_Row``): enqueue_many, enqueue_ordered_rows and enqueue_workflow each add their
own beside these. In a module of its own so that ordered.py, which enqueue.py imports, can use
it too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def job_columns(rows: Sequence[Any]) -> dict[str, Any]:
    return {
        "queues": [r.queue for r in rows],
        "kinds": [r.kind for r in rows],
        "args": "[" + ",".join([r.args for r in rows]) + "]",
        "priorities": [r.priority for r in rows],
        "run_ats": [r.run_at for r in rows],
        "delays": [r.delay for r in rows],
        "max_attempts": [r.max_attempts for r in rows],
        "traceparents": [r.traceparent for r in rows],
        "tenants": [r.tenant for r in rows],
    }
