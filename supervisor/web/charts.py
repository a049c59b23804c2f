"""The overview's small chart: jobs finished per minute over the last hour, as inline SVG.

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
