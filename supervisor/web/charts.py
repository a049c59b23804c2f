"""The dashboard's charts as inline SVG: the overview's jobs per minute over the last hour, and
the history page's bars per hour over the last 24 hours.

Drawn on the server (no charting library, nothing to load): one bar per minute, completions in
one colour with discards stacked on top, scaled to the busiest minute.
"""

from __future__ import annotations

from markupsafe import Markup, escape

WIDTH = 180
HEIGHT = 28


def sparkline(completed: list[int], discarded: list[int], label: str) -> Markup:
    """An SVG bar chart of ``completed`` and ``discarded`` per minute, oldest first."""
    minutes = max(len(completed), 1)
    peak = max((c + d for c, d in zip(completed, discarded, strict=True)), default=0) or 1
    step = WIDTH / minutes
    bars = []
    for i, (done, dead) in enumerate(zip(completed, discarded, strict=True)):
        x = round(i * step, 1)
        w = round(max(step - 0.6, 0.6), 1)
        done_h = round(HEIGHT * done / peak, 1)
        dead_h = round(HEIGHT * dead / peak, 1)
        if done_h:
            bars.append(
                f'<rect class="done" x="{x}" y="{HEIGHT - done_h}" width="{w}" height="{done_h}"/>'
            )
        if dead_h:
            y = round(HEIGHT - done_h - dead_h, 1)
            bars.append(f'<rect class="dead" x="{x}" y="{y}" width="{w}" height="{dead_h}"/>')
    return Markup(
        f'<svg class="spark" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<line x1="0" y1="{HEIGHT - 0.5}" x2="{WIDTH}" y2="{HEIGHT - 0.5}"/>'
        f"{''.join(bars)}</svg>"
    )


BAR_WIDTH = 720
BAR_HEIGHT = 120


def bars(values: list[float], labels: list[str], label: str, unit: str = "") -> Markup:
    """One bar per value (an hour), scaled to the largest, each with a tooltip, and the first,
    middle and last labels under the axis."""
    count = max(len(values), 1)
    peak = max(values, default=0) or 1
    step = BAR_WIDTH / count
    parts = []
    for i, (value, name) in enumerate(zip(values, labels, strict=True)):
        h = round((BAR_HEIGHT - 14) * value / peak, 1)
        x = round(i * step, 1)
        tip = escape(f"{name}: {value:,.3g}{unit}" if unit else f"{name}: {value:,.0f}")
        parts.append(
            f'<rect x="{x}" y="{BAR_HEIGHT - 14 - h}" width="{round(step - 2, 1)}" '
            f'height="{h}"><title>{tip}</title></rect>'
        )
    for i in sorted({0, count // 2, count - 1}) if values else []:
        parts.append(
            f'<text x="{round(i * step, 1)}" y="{BAR_HEIGHT - 2}">{escape(labels[i])}</text>'
        )
    top = escape(f"{peak:,.3g}{unit}" if unit else f"{peak:,.0f}")
    return Markup(
        f'<svg class="bars" viewBox="0 0 {BAR_WIDTH} {BAR_HEIGHT}" width="100%" '
        f'height="{BAR_HEIGHT}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>"
        f'<line x1="0" y1="{BAR_HEIGHT - 14.5}" x2="{BAR_WIDTH}" y2="{BAR_HEIGHT - 14.5}"/>'
        f'<text class="peak" x="{BAR_WIDTH}" y="10" text-anchor="end">max {top}</text>'
        f"{''.join(parts)}</svg>"
    )
