"""Trace continuity from the request that enqueued a job to each attempt that runs it.

At enqueue, the W3C trace context of the current span (OpenTelemetry's, when it is installed
and a span is recording) is kept with the job (pgq.jobs.traceparent, migration 0024); an
explicit ``traceparent=`` wins. In the child, each attempt runs in a span named ``KIND process``
(the OpenTelemetry messaging conventions: kind CONSUMER, ``messaging.system`` ``pgq``, the queue
as destination, the job id as message id). On the first attempt its parent is the enqueuer's
span; on a retry it starts a trace of its own with a link to the enqueuer's, so a trace does
not grow by every retry and the retries still lead back. Events: ``queue-wait`` (how long the
job waited for this attempt), ``attempt``, ``outcome`` and ``fence-rejected`` (the attempt lost
its lease: its result was dropped).

Configured by OpenTelemetry's own environment variables (OTEL_SERVICE_NAME,
OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_EXPORTER, OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*,
OTEL_SDK_DISABLED); nothing is on unless an exporter is named or an OTLP endpoint is set.
Safe across fork: nothing of the SDK is built in the master; each child builds its own
providers after the fork (exporters hold threads and sockets that must not cross it).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from supervisor.queue.tracecontext import current_traceparent, valid

log = logging.getLogger("pgq.tracing")

__all__ = ["Attempts", "Telemetry", "configured", "current_traceparent", "valid"]

SYSTEM = "pgq"


def configured(env: dict[str, str] | os._Environ[str] | None = None) -> bool:
    """Whether the environment asks for telemetry: an exporter named, or an OTLP endpoint."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    keys = (
        "OTEL_TRACES_EXPORTER",
        "OTEL_METRICS_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    )
    named = [env.get(k, "") for k in keys]
    return any(v and v.lower() != "none" for v in named)


def _exporters(group: str, names: str) -> list[Any]:
    """Exporters registered under the SDK's entry points (console, otlp, ...)."""
    from importlib.metadata import entry_points

    found = []
    for name in (n.strip() for n in names.split(",")):
        if not name or name == "none":
            continue
        points = list(entry_points(group=group, name=name))
        if not points:
            log.warning(
                "OpenTelemetry exporter %r (%s) is not installed; it is skipped "
                "(pip install opentelemetry-exporter-otlp for otlp)",
                name,
                group,
            )
            continue
        found.append(points[0].load()())
    return found


@dataclass
class Telemetry:
    """The child's tracer and meter: built once per child, after the fork."""

    tracer: Any
    meter: Any
    providers: list[Any] = field(default_factory=list)

    @classmethod
    def from_env(cls) -> Telemetry | None:
        """Providers from the OTEL_* variables, or None when telemetry is off or the otel
        extra is missing (said once in the log, not per job)."""
        if not configured():
            return None
        if importlib.util.find_spec("opentelemetry.sdk") is None:
            log.warning(
                "OTEL_* variables are set but the OpenTelemetry SDK is not installed: "
                "pip install 'pgq-supervisor[otel]'; jobs run untraced"
            )
            return None
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", SYSTEM)})
        tracing = TracerProvider(resource=resource)
        traces = os.environ.get("OTEL_TRACES_EXPORTER", "otlp")
        for exporter in _exporters("opentelemetry_traces_exporter", traces):
            tracing.add_span_processor(BatchSpanProcessor(exporter))
        metrics = os.environ.get("OTEL_METRICS_EXPORTER", "none")
        readers = [
            PeriodicExportingMetricReader(e)
            for e in _exporters("opentelemetry_metrics_exporter", metrics)
        ]
        metering = MeterProvider(resource=resource, metric_readers=readers)
        return cls.of(tracing, metering)

    @classmethod
    def of(cls, tracer_provider: Any, meter_provider: Any) -> Telemetry:
        from supervisor import __version__

        return cls(
            tracer_provider.get_tracer("pgq-supervisor", __version__),
            meter_provider.get_meter("pgq-supervisor", __version__),
            [tracer_provider, meter_provider],
        )

    def shutdown(self) -> None:
        """Flush what is buffered: a child's last spans must not die with it."""
        for provider in self.providers:
            try:
                provider.shutdown()
            except Exception as exc:  # an exporter that cannot reach its collector
                log.warning("OpenTelemetry shutdown: %s", exc)


class Attempts:
    """Spans and per-kind metrics of the attempts one child runs."""

    def __init__(self, telemetry: Telemetry) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.telemetry = telemetry
        self.propagator = TraceContextTextMapPropagator()
        meter = telemetry.meter
        self.runs = meter.create_counter(
            "pgq.jobs", unit="{job}", description="attempts run, by kind, queue and outcome"
        )
        self.duration = meter.create_histogram(
            "pgq.job.duration", unit="s", description="how long an attempt ran, by kind"
        )
        self.wait = meter.create_histogram(
            "pgq.job.wait", unit="s", description="how long a job waited for its attempt"
        )
        # Spans of attempts whose outcome is not written yet, by job id: ended once it is.
        self.open: dict[int, tuple[Any, str]] = {}

    @contextmanager
    def attempt(
        self, job: Any, pool: str, worker: str, now: Callable[[], float] = time.time
    ) -> Iterator[Any]:
        """The span of one attempt, current while the handler runs. Left open when the block
        ends: ``written`` ends it once the outcome is recorded (or refused by the fence)."""
        from opentelemetry import trace
        from opentelemetry.trace import Link, SpanKind

        parent = None
        links = []
        if job.traceparent:
            remote = trace.get_current_span(
                self.propagator.extract({"traceparent": job.traceparent})
            )
            remote_context = remote.get_span_context()
            if remote_context.is_valid:
                if job.attempts <= 1:
                    parent = trace.set_span_in_context(remote)
                else:
                    links = [Link(remote_context, {"pgq.link": "enqueued"})]
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": job.queue,
            "messaging.message.id": str(job.id),
            "messaging.consumer.group.name": pool,
            "pgq.job.kind": job.kind,
            "pgq.job.attempt": job.attempts,
            "pgq.job.max_attempts": job.max_attempts,
            "pgq.worker": worker,
        }
        span = self.telemetry.tracer.start_span(
            f"{job.kind} process",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )
        waited = max(0.0, now() - _epoch(job.run_at))
        span.add_event("queue-wait", {"pgq.wait_seconds": waited})
        span.add_event("attempt", {"pgq.job.attempt": job.attempts})
        self.wait.record(
            waited, {"pgq.job.kind": job.kind, "messaging.destination.name": job.queue}
        )
        started = time.monotonic()
        with trace.use_span(span, end_on_exit=False, record_exception=True):
            yield span
        self.duration.record(
            time.monotonic() - started,
            {"pgq.job.kind": job.kind, "messaging.destination.name": job.queue},
        )

    def outcome(self, job: Any, span: Any, outcome: str, error: str | None) -> None:
        """What the attempt came to, before it is written: the span stays open for that."""
        from opentelemetry.trace import Status, StatusCode

        span.add_event("outcome", {"pgq.outcome": outcome})
        span.set_attribute("pgq.outcome", outcome)
        if outcome != "completed":
            span.set_status(Status(StatusCode.ERROR, (error or outcome).strip()[-200:]))
        self.runs.add(
            1,
            {
                "pgq.job.kind": job.kind,
                "messaging.destination.name": job.queue,
                "pgq.outcome": outcome,
            },
        )
        self.open[job.id] = (span, outcome)

    def written(self, kept: list[Any], lost: list[Any]) -> None:
        """The outcomes the database recorded (``kept``) and the ones the fence refused: the
        attempt had lost its lease, so its result was dropped."""
        for job in lost:
            found = self.open.pop(job.id, None)
            if found is not None:
                span, _ = found
                span.add_event("fence-rejected", {"pgq.lease_id": job.lease_id})
                span.set_attribute("pgq.fence_rejected", True)
                span.end()
        for job in kept:
            found = self.open.pop(job.id, None)
            if found is not None:
                found[0].end()

    def end_all(self) -> None:
        """A child leaving with outcomes unwritten: end their spans as they are."""
        for span, _ in self.open.values():
            span.end()
        self.open.clear()


def _epoch(moment: datetime) -> float:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()
