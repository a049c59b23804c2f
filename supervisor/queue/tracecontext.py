"""The W3C trace context (``traceparent``) a job is enqueued under: checked when given, taken
from the current OpenTelemetry span when not (supervisor.observability.tracing runs the spans).
OpenTelemetry is optional (the otel extra): without it, nothing is captured."""

from __future__ import annotations

import importlib.util
import re
from functools import cache

TRACEPARENT = re.compile(r"[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


@cache
def _api() -> bool:
    """Whether the OpenTelemetry API is importable (the otel extra)."""
    return importlib.util.find_spec("opentelemetry") is not None and (
        importlib.util.find_spec("opentelemetry.trace") is not None
    )


def valid(traceparent: str) -> bool:
    return isinstance(traceparent, str) and TRACEPARENT.fullmatch(traceparent) is not None


def current_traceparent() -> str | None:
    """The W3C trace context of the caller's current span, or None (no OpenTelemetry, no span,
    or a span that is not sampled-in and valid)."""
    if not _api():
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    found = carrier.get("traceparent")
    return found if found and valid(found) else None
