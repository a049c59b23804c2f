"""The W3C trace context (``traceparent``) a job is enqueued under: checked when given, taken
from the current OpenTelemetry span when not (supervisor.observability.tracing runs the spans).
OpenTelemetry is optional (the otel extra): without it, nothing is captured."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from functools import cache
from typing import Any

TRACEPARENT = re.compile(r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


@cache
def _api() -> bool:
    """Whether the OpenTelemetry API is importable (the otel extra)."""
    return importlib.util.find_spec("opentelemetry") is not None and (
        importlib.util.find_spec("opentelemetry.trace") is not None
    )


@cache
def _current_span() -> Callable[[], Any] | None:
    """OpenTelemetry's get_current_span, looked up once: every enqueue asks for it."""
    if not _api():
        return None
    from opentelemetry import trace

    return trace.get_current_span


def valid(traceparent: str) -> bool:
    return isinstance(traceparent, str) and TRACEPARENT.fullmatch(traceparent) is not None


def current_traceparent() -> str | None:
    """The W3C trace context of the caller's current span, or None (no OpenTelemetry, no span,
    or a span that is not sampled-in and valid)."""
    current_span = _current_span()
    if current_span is None:
        return None
    context = current_span().get_span_context()
    if not context.is_valid:
        return None
    # What TraceContextTextMapPropagator.inject writes (version 00), without its carrier and
    # setter: a fifth of the cost, on every enqueue made inside a span.
    found = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    return found if valid(found) else None
