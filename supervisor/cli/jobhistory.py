"""What `jobs show` says beyond the row: which attempt limit rules, and a finished job's history.

A job's row keeps the max_attempts it was enqueued with, but a kind's policy in the config
(jobs.KIND.max_attempts) overrides it when the supervisor decides whether to retry: the line
says which one rules. A completed job's row is deleted at once; pgq.job_history (when
history.enabled) is all that remains of it, and `jobs show` prints that instead of "no job".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from supervisor.cli import costs_view
from supervisor.cli.session import cli_query
from supervisor.cli.verbs import Context
from supervisor.queue.control import errors_of
from supervisor.queue.costs import AttemptCost
from supervisor.queue.progress import Progress
from supervisor.shared.exits import MasterExit
from supervisor.views.text import age, clock_time, iso, listing, safe, safe_block

# By choice: a finished job's arguments leave with its row (they may hold personal data or
# secrets, and the history stays small); the dashboard's page says the same.
ARGS_NOT_KEPT = "not kept once a job has finished (its row is deleted; the history keeps none)"
HISTORY_ROWS = 10  # one row per time the job finished (a replayed dead letter finishes again)


@dataclass(frozen=True)
class AttemptLimit:
    effective: int
    row: int
    source: str  # "config": jobs.KIND.max_attempts; "row": the job's own, set at enqueue
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"effective": self.effective, "row": self.row, "source": self.source}


def attempt_limit(ctx: Context, kind: str, row_limit: int) -> AttemptLimit:
    configured = ctx.config.attempt_limit(kind, row_limit)
    policy = ctx.config.jobs.get(kind)
    if policy is None or policy.max_attempts is None:
        return AttemptLimit(row_limit, row_limit, "row", "the job's own limit, set at enqueue")
    where = f"jobs.{safe(kind)}.max_attempts in {ctx.config.path}"
    if configured == row_limit:
        return AttemptLimit(configured, row_limit, "config", where)
    return AttemptLimit(
        configured, row_limit, "config", f"{where} rules; the row's {row_limit} does not"
    )


def read(conn: psycopg.Connection[Any], job_id: int) -> list[dict[str, Any]]:
    cursor = conn.cursor(row_factory=dict_row)
    return cursor.execute(
        cli_query("cli_job_history"), {"id": job_id, "limit": HISTORY_ROWS}
    ).fetchall()


def show(
    ctx: Context,
    job_id: int,
    history: list[dict[str, Any]],
    now: datetime,
    result: Any = None,
    step: dict[str, Any] | None = None,
    spent: list[AttemptCost] | None = None,
    said: Progress | None = None,
) -> int:
    """A job gone from pgq.jobs, from its history rows (newest first), with what its handler
    returned when that is kept (``result``) and the workflow it is a step of (``step``)."""
    if ctx.args.json:
        document = {
            "id": job_id,
            "state": history[0]["outcome"],
            "kind": history[0]["kind"],
            "queue": history[0]["queue"],
            "history": [
                {
                    **{k: iso(v) if isinstance(v, datetime) else v for k, v in h.items()},
                    "errors": h["errors"] or [],
                }
                for h in history
            ],
            "result": result,
            "args": None,
            "args_kept": False,
            "workflow": step,
            **costs_view.to_json(spent or []),
            "progress": said.to_json() if said is not None else None,
        }
        print(json.dumps(document, indent=2, ensure_ascii=False))
        return MasterExit.OK
    last = history[0]

    def when(moment: datetime | None) -> str:
        if moment is None:
            return "-"
        return f"{clock_time(moment)} ({age((now - moment).total_seconds())} ago)"

    lines = [
        f"job {job_id}: {safe(last['kind'])} on queue {safe(last['queue'])}, {last['outcome']} "
        "(gone from pgq.jobs; from pgq.job_history)",
        f"  attempts    {last['attempts']}",
        f"  created     {when(last['created_at'])}",
        f"  last run    {when(last['started_at'])}",
        f"  finished    {when(last['finished_at'])}",
        f"  args        {ARGS_NOT_KEPT}",
        *workflow_lines(step),
    ]
    if len(history) > 1:
        lines.append(f"finished {len(history)} times (a replayed dead letter finishes again):")
        lines += [
            f"  {when(h['finished_at'])}: {h['outcome']} after {h['attempts']} attempts"
            for h in history
        ]
    errors = errors_of(last["errors"]).newest_first
    if errors:
        lines.append(f"errors ({len(errors)} kept):")
        for e in errors:
            first = (e.error or "").strip().splitlines()[-1:] or [""]
            lines.append(f"  attempt {e.attempt} at {clock_time(e.at)}: {safe(first[0])}")
    lines += costs_view.progress_lines(said, now)
    lines += costs_view.lines(spent or [])
    if result is not None:
        text = json.dumps(result, indent=2, ensure_ascii=False, sort_keys=True)
        lines += ["result:", *(f"  {line}" for line in safe_block(text).splitlines())]
    print("\n".join(lines))
    return MasterExit.OK


def workflow_lines(step: dict[str, Any] | None) -> list[str]:
    """`jobs show`'s lines for a workflow step: its workflow and the parents it came after."""
    if step is None:
        return []
    name = f" ({safe(step['name'])})" if step["name"] else ""
    parents = listing(step["parents"]) if step["parents"] else "none"
    return [
        f"  workflow    {step['id']}{name}, step {step['position']}"
        f" (on parent failure: {step['on_parent_failure']})",
        f"  after       {parents}",
    ]
