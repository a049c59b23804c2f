"""What a job's order key holds it to (`jobs show`, the dashboard's job page): the job it waits
for, or that it holds its key, read from pgq.order_keys (migration 0066); a workflow step
waiting for its parents joins its key only once they have ended (0068)."""

from __future__ import annotations

from typing import Any

from supervisor.queue.queries import query
from supervisor.views.text import safe

# The statement both readers run (sql/history.sql); its row goes to ``order_of``.
ORDER_QUERY = "job_order"


def job_order(conn: Any, job_id: int) -> dict[str, Any] | None:
    """The order key of job ``job_id``, or None when it has none (or is gone)."""
    return order_of(job_id, conn.execute(query(ORDER_QUERY), {"id": job_id}).fetchone())


def order_of(job_id: int, row: Any) -> dict[str, Any] | None:
    """The order key of job ``job_id`` from its ``job_order`` row (None: no key)."""
    if row is None:
        return None
    key, state, head_id, head_state, unfinished, for_parents = row
    # A workflow step waiting for its parents has not joined its key yet (0068).
    parents_first = bool(for_parents) and state == "waiting"
    waiting = state == "waiting" and not for_parents
    return {
        "key": key,
        "waits_for_parents": parents_first,
        # A follower waits for its key's head; the head (or a job already ended) waits for none.
        "waits_for": head_id if waiting and head_id != job_id else None,
        "waits_for_state": head_state if waiting and head_id != job_id else None,
        "holds_key": head_id == job_id and not for_parents,
        "unfinished": unfinished or 0,
    }


def order_words(order: dict[str, Any]) -> str:
    """What the order key holds the job to, in the words `jobs show` prints after its label."""
    key = safe(order["key"])
    if order.get("waits_for_parents"):
        return f"{key}: joins its key once its parents have ended"
    if order["waits_for"] is not None:
        return (
            f"{key}: waits for job {order['waits_for']} ({order['waits_for_state']}) to end; "
            f"{order['unfinished']} unfinished in the key"
        )
    if order["holds_key"]:
        behind = max(order["unfinished"] - 1, 0)
        return f"{key}: holds its key; {behind} waiting behind it"
    return key


def order_lines(order: dict[str, Any] | None) -> list[str]:
    if order is None:
        return []
    return [f"  order key   {order_words(order)}"]
