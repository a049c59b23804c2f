"""The dashboard's workflow page: the graph drawn as an SVG from the steps' rows.

Steps are laid out in layers by their longest path from a root (a step sits one layer below
its deepest parent), left to right in ``add`` order within a layer, each a box coloured by its
state and linked to its job's page. A layer wider than ``LAYER_WIDTH`` shows its first steps
and one box counting the rest by state, so a 10,000-step fan-out still draws in a page.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool

from supervisor.queue.queries import query
from supervisor.queue.workflows import StepStatus, WorkflowStatus
from supervisor.web.reads import fetch, server_now, snapshot

LAYER_WIDTH = 24
BOX_W, BOX_H = 120, 34
GAP_X, GAP_Y = 16, 46
MARGIN = 12
# Edges drawn at most (between drawn boxes); past it the graph shows its boxes alone.
MAX_EDGES = 3_000


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    label: str
    state: str  # a job state, or "more" for a layer's remainder
    job_id: int | None
    title: str


@dataclass(frozen=True)
class Line:
    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Drawing:
    width: int
    height: int
    boxes: list[Box]
    lines: list[Line]
    edges_omitted: bool


@dataclass(frozen=True)
class WorkflowView:
    now: datetime
    status: WorkflowStatus | None
    steps: list[StepStatus]
    drawing: Drawing | None
    states: dict[str, int]


def layers(steps: list[StepStatus]) -> dict[int, int]:
    """Each step's layer: 0 for a root, else one more than its deepest parent's. Parents come
    before their children in ``add`` order (add() takes steps already added), so one pass."""
    depth: dict[int, int] = {}
    for step in steps:
        depth[step.job_id] = 1 + max((depth.get(p, 0) for p in step.parents), default=-1)
    return depth


def draw(steps: list[StepStatus]) -> Drawing:
    depth = layers(steps)
    rows: dict[int, list[StepStatus]] = {}
    for step in steps:
        rows.setdefault(depth[step.job_id], []).append(step)
    boxes: list[Box] = []
    centre: dict[int, tuple[int, int]] = {}
    widest = max((min(len(r), LAYER_WIDTH + 1) for r in rows.values()), default=1)
    width = 2 * MARGIN + widest * BOX_W + (widest - 1) * GAP_X
    for level in sorted(rows):
        row = rows[level]
        shown, rest = row[:LAYER_WIDTH], row[LAYER_WIDTH:]
        count = len(shown) + (1 if rest else 0)
        span = count * BOX_W + (count - 1) * GAP_X
        x = (width - span) // 2
        y = MARGIN + level * (BOX_H + GAP_Y)
        for step in shown:
            title = f"job {step.job_id}: {step.kind} on {step.queue}, {step.state}"
            boxes.append(Box(x, y, step.kind, step.state, step.job_id, title))
            centre[step.job_id] = (x + BOX_W // 2, y)
            x += BOX_W + GAP_X
        if rest:
            tally = Counter(s.state for s in rest)
            title = ", ".join(f"{n} {state}" for state, n in sorted(tally.items()))
            boxes.append(Box(x, y, f"+{len(rest)} more", "more", None, title))
            for step in rest:
                centre[step.job_id] = (x + BOX_W // 2, y)
    lines: list[Line] = []
    seen: set[tuple[int, int, int, int]] = set()
    omitted = False
    for step in steps:
        if step.job_id not in centre:
            continue
        cx, cy = centre[step.job_id]
        for parent in step.parents:
            if parent not in centre:
                continue
            px, py = centre[parent]
            key = (px, py + BOX_H, cx, cy)
            if key in seen:  # a collapsed remainder's edges are drawn once
                continue
            if len(lines) >= MAX_EDGES:
                omitted = True
                break
            seen.add(key)
            lines.append(Line(*key))
    height = 2 * MARGIN + (max(rows, default=0) + 1) * (BOX_H + GAP_Y) - GAP_Y
    return Drawing(width, height, boxes, lines, omitted)


async def read(pool: AsyncConnectionPool[Any], workflow_id: int) -> WorkflowView:
    async with snapshot(pool) as conn:
        now = await server_now(conn)
        found = await fetch(conn, query("workflow_status"), {"id": workflow_id})
        if not found:
            return WorkflowView(now, None, [], None, {})
        status = WorkflowStatus(*found[0].values())
        rows = await fetch(conn, query("workflow_steps"), {"id": workflow_id})
    steps = [StepStatus(*r.values()) for r in rows]
    states = dict(sorted(Counter(s.state for s in steps).items()))
    return WorkflowView(now, status, steps, draw(steps), states)


async def recent(
    pool: AsyncConnectionPool[Any], limit: int = 50
) -> tuple[datetime, list[WorkflowStatus]]:
    async with snapshot(pool) as conn:
        now = await server_now(conn)
        rows = await fetch(conn, query("recent_workflows"), {"limit": limit})
    return now, [WorkflowStatus(*r.values()) for r in rows]
