"""Tracing across a real fork, with the OpenTelemetry SDK's in-memory exporters.

The test process is the application: it enqueues inside a span of its own. It then forks; the
child builds its own providers (as a supervisor's child does, after the fork) and runs the job
through the child's real executor and outcome writer (Completer) on the real database: the first
attempt fails, the second completes, and a third job's result is refused by the fence. The
child sends its finished spans and metrics back through a pipe. The first attempt's span is the
enqueuer's child; the retry's starts a trace of its own and links to the enqueuer's span.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psycopg
import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from supervisor import enqueue
from supervisor.queue.control import retry_now

CONFIG = """
handlers:
  charge: tests.lifecycle.test_tracing:charge
pools:
  main: {processes: 1, queues: {billing: 1}}
history: {enabled: true}
web: {redact: [card]}
"""
SECRET = "4111-SPAN-SECRET"


def charge(amount: int, *, job: Any, card: str = "") -> None:
    """Fails its first attempt, like a payment API that timed out, quoting the card."""
    if job.attempt == 1:
        raise RuntimeError(f"the payment API timed out for card {card}")


def _child(dsn: str, config_path: Path, job_ids: list[int], out: int) -> None:
    """The supervisor's child, in miniature: its own providers, its executor, its writer."""
    from supervisor import claim
    from supervisor.child.completer import Completer
    from supervisor.child.executor import Executor
    from supervisor.config import load_config
    from supervisor.config.handlers import load_handlers
    from supervisor.observability.tracing import Attempts, Telemetry
    from supervisor.shared.board import Board

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=Resource.create({"service.name": "worker"}))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    telemetry = Telemetry.of(tracer_provider, MeterProvider(metric_readers=[reader]))
    config = load_config(config_path)
    board = Board(1)
    executor = Executor(
        config=config,
        pool="main",
        worker_id="w:1:1",
        handlers=load_handlers(config),
        kinds=["charge"],
        board=board,
        lease_check=lambda job: True,
        cancel_check=lambda job: False,
        interruptible_thread=None,
    )
    executor.attempts, executor.telemetry = Attempts(telemetry), telemetry
    seen: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        # The child's own outcome writer, on this connection (it reads only session.conn).
        results = Completer(SimpleNamespace(conn=conn), board, "main", history=True)  # type: ignore[arg-type]
        results.on_written = executor.written
        first, stolen = job_ids
        (job,) = claim(conn, "billing", worker="w:1:1")
        seen["context_traceparent"] = job.traceparent
        results.add(job, executor.run(job))  # fails: retried later
        results.write()
        retry_now(conn, first)
        (job,) = claim(conn, "billing", worker="w:1:1")
        results.add(job, executor.run(job))  # completes
        results.write()
        # A third attempt whose lease another worker took before its result was written.
        (job,) = claim(conn, "refunds", worker="w:1:1")
        assert job.id == stolen
        conn.execute("UPDATE pgq.jobs SET lease_id = lease_id + 1000 WHERE id = %s", (stolen,))
        results.add(job, executor.run(job))
        results.write()
    spans = [json.loads(s.to_json()) for s in exporter.get_finished_spans()]
    metrics = json.loads(reader.get_metrics_data().to_json())
    os.write(out, json.dumps({"spans": spans, "metrics": metrics, **seen}).encode())


def test_an_attempt_continues_the_enqueuers_trace_across_a_fork(
    dsn: str, conn: psycopg.Connection[Any], tmp_path: Path
) -> None:
    config = tmp_path / "q.yaml"
    config.write_text(CONFIG)
    app_exporter = InMemorySpanExporter()
    app_provider = TracerProvider()
    app_provider.add_span_processor(SimpleSpanProcessor(app_exporter))
    tracer = app_provider.get_tracer("the application")
    with tracer.start_as_current_span("POST /orders") as request_span:
        first = enqueue(conn, "charge", {"amount": 10, "card": SECRET}, queue="billing")
    explicit = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    stolen = enqueue(conn, "charge", {"amount": 11}, queue="refunds", traceparent=explicit)
    parent = request_span.get_span_context()
    stored = conn.execute("SELECT traceparent FROM pgq.jobs WHERE id = %s", (first,)).fetchone()
    assert stored == (f"00-{parent.trace_id:032x}-{parent.span_id:016x}-{parent.trace_flags:02x}",)

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 1
        try:
            os.close(read)
            _child(dsn, config, [first, stolen], write)
            code = 0
        except BaseException:
            import traceback

            os.write(write, json.dumps({"error": traceback.format_exc()}).encode())
        finally:
            os._exit(code)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    got = json.loads(b"".join(chunks))
    assert os.waitstatus_to_exitcode(status) == 0, got.get("error")
    assert got["context_traceparent"] == stored[0]  # JobContext.traceparent, from the row

    spans = {
        (s["attributes"]["messaging.message.id"], s["attributes"]["pgq.job.attempt"]): s
        for s in got["spans"]
    }
    assert set(spans) == {(str(first), 1), (str(first), 2), (str(stolen), 1)}
    one, two, fenced = spans[(str(first), 1)], spans[(str(first), 2)], spans[(str(stolen), 1)]
    for span in (one, two, fenced):
        assert span["name"] == "charge process" and span["kind"] == "SpanKind.CONSUMER"
        assert span["attributes"]["messaging.system"] == "pgq"
        assert span["attributes"]["messaging.destination.name"] in ("billing", "refunds")
        assert span["resource"]["attributes"]["service.name"] == "worker"  # the child's own
    trace_id, span_id = f"0x{parent.trace_id:032x}", f"0x{parent.span_id:016x}"
    # First attempt: the enqueuer's child, in the enqueuer's trace.
    assert one["context"]["trace_id"] == trace_id and one["parent_id"] == span_id
    assert one["links"] == []
    assert [e["name"] for e in one["events"]] == ["queue-wait", "attempt", "outcome"]
    assert one["attributes"]["pgq.outcome"] == "retried"
    assert one["status"]["status_code"] == "ERROR"
    # web.redact: the handler's message quoted the card; the span says [redacted] instead.
    assert "for card [redacted]" in one["status"]["description"]
    assert SECRET not in json.dumps(got["spans"])
    # The retry: a trace of its own, linked to the enqueuer's span.
    assert two["parent_id"] is None and two["context"]["trace_id"] != trace_id
    assert [(link["context"]["trace_id"], link["context"]["span_id"]) for link in two["links"]] == [
        (trace_id, span_id)
    ]
    assert two["attributes"]["pgq.outcome"] == "completed"
    # The explicit traceparent was continued, and the fence's refusal is on its span.
    assert fenced["context"]["trace_id"] == "0x" + "ab" * 16
    assert [e["name"] for e in fenced["events"]][-1] == "fence-rejected"
    # Metrics per kind: three attempts of charge, by outcome (the fenced one failed too).
    points: dict[tuple[str, str], int] = {}
    for rm in got["metrics"]["resource_metrics"]:
        for sm in rm["scope_metrics"]:
            for m in (m for m in sm["metrics"] if m["name"] == "pgq.jobs"):
                for p in m["data"]["data_points"]:
                    key = (p["attributes"]["pgq.job.kind"], p["attributes"]["pgq.outcome"])
                    points[key] = points.get(key, 0) + p["value"]
    assert points == {("charge", "retried"): 2, ("charge", "completed"): 1}
    assert trace.get_current_span() is trace.INVALID_SPAN  # nothing leaked into the test


def test_a_bad_traceparent_is_refused_before_anything_is_written(
    conn: psycopg.Connection[Any],
) -> None:
    from supervisor import EnqueueError

    with pytest.raises(EnqueueError, match="traceparent must be a W3C trace context"):
        enqueue(conn, "charge", traceparent="not-a-trace")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="traceparent"):
        conn.execute("SELECT pgq.enqueue('charge', traceparent => 'nope')")
    conn.rollback() if not conn.autocommit else None
    good = "00-" + "12" * 16 + "-" + "34" * 8 + "-01"
    (job_id,) = conn.execute("SELECT pgq.enqueue('charge', traceparent => %s)", (good,)).fetchone()
    assert conn.execute("SELECT traceparent FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone() == (
        good,
    )
    assert conn.execute("SELECT count(*) FROM pgq.jobs").fetchone() == (1,)


def test_without_a_current_span_nothing_is_kept(conn: psycopg.Connection[Any]) -> None:
    job_id = enqueue(conn, "charge")
    assert conn.execute("SELECT traceparent FROM pgq.jobs WHERE id = %s", (job_id,)).fetchone() == (
        None,
    )


def test_telemetry_is_off_unless_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    from supervisor.observability.tracing import configured

    assert not configured({})
    assert configured({"OTEL_TRACES_EXPORTER": "console"})
    assert configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"})
    assert not configured({"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"})
    assert not configured({"OTEL_TRACES_EXPORTER": "none"})
