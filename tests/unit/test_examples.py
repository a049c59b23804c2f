"""The example handlers, called directly with a hand-built JobContext (no database)."""

from __future__ import annotations

import contextlib
import email.utils
import multiprocessing
import os
import re
import signal
import time
import zlib
from datetime import datetime, timezone
from pathlib import Path

import psutil
import pytest

from examples import flaky, noop, pdf, webhooks
from examples.invoice_layout import InvoicePDF
from examples.sink import Delivery, WebhookSink
from supervisor.queue.context import JobContext
from supervisor.queue.outcomes import Discard, Outcome, Retry


def make_job(job_id: int = 42, attempt: int = 1, *, deadline_in: float | None = None) -> JobContext:
    return JobContext(
        id=job_id,
        kind="test",
        queue="default",
        attempt=attempt,
        max_attempts=5,
        lease_id=1,
        worker="test-worker",
        created_at=datetime.now(timezone.utc),
        deadline=None if deadline_in is None else time.monotonic() + deadline_in,
    )


# --- PDF ---------------------------------------------------------------------------------------


def page_texts(document: bytes) -> list[str]:
    """The text drawn on each page, one line per text object (fpdf2 compresses each page)."""
    pages = []
    for stream in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", document, re.S):
        content = zlib.decompress(stream.group(1)).decode("latin-1")
        lines = [
            "".join(re.findall(r"\((.*?)\) Tj", block))
            for block in re.findall(r"BT(.*?)ET", content, re.S)
        ]
        pages.append("\n".join(lines).replace("\\(", "(").replace("\\)", ")"))
    return pages


def page_count(document: bytes) -> int:
    return len(re.findall(rb"/Type /Page\b(?!s)", document))


def test_invoice_is_a_complete_pdf(tmp_path: Path) -> None:
    pdf.render_invoice(42, "Acme Widgets Ltd", out_dir=str(tmp_path), job=make_job())
    document = (tmp_path / "invoice-42.pdf").read_bytes()
    assert document.startswith(b"%PDF-")
    assert document.rstrip().endswith(b"%%EOF")
    texts = page_texts(document)
    assert len(texts) == page_count(document) == 2
    assert "Acme Widgets Ltd" in texts[0]
    assert "INV-000042" in texts[0]
    assert "Total due" in texts[-1]
    assert os.listdir(tmp_path) == ["invoice-42.pdf"]


def test_a_long_invoice_spans_many_numbered_pages(tmp_path: Path) -> None:
    pdf.render_invoice(42, "Acme Widgets Ltd", lines=300, out_dir=str(tmp_path))
    document = (tmp_path / "invoice-42.pdf").read_bytes()
    # About 25 table rows fit on a page (rows wrap when a description is long): the layout
    # puts invoice 42's 300 lines and its totals on 12 pages.
    assert page_count(document) == 12
    assert b"/Count 12" in document
    texts = page_texts(document)
    for number, text in enumerate(texts, start=1):
        assert f"Page {number} of 12" in text
        # The table's headings repeat on every page.
        assert "Unit price" in text
    assert "\n300\n" in texts[-1]
    assert sum("Total due" in text for text in texts) == 1


def test_the_same_invoice_renders_to_the_same_bytes(tmp_path: Path) -> None:
    # Two attempts of the same job, as after a retry.
    for attempt, directory in ((1, "first"), (2, "second")):
        job = make_job(7, attempt)
        pdf.render_invoice(7, "Zoë's Café", out_dir=str(tmp_path / directory), job=job)
    first = (tmp_path / "first" / "invoice-7.pdf").read_bytes()
    second = (tmp_path / "second" / "invoice-7.pdf").read_bytes()
    assert first == second
    pdf.render_invoice(8, "Zoë's Café", out_dir=str(tmp_path / "other"))
    assert (tmp_path / "other" / "invoice-8.pdf").read_bytes() != first


def test_a_retry_overwrites_the_previous_file(tmp_path: Path) -> None:
    target = tmp_path / "invoice-5.pdf"
    target.write_bytes(b"left over from an older render")
    pdf.render_invoice(5, "Acme", out_dir=str(tmp_path))
    assert target.read_bytes().startswith(b"%PDF-")
    assert os.listdir(tmp_path) == ["invoice-5.pdf"]


def test_a_render_that_fails_midway_leaves_the_old_file_and_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pdf.render_invoice(5, "Acme", out_dir=str(tmp_path))
    before = (tmp_path / "invoice-5.pdf").read_bytes()

    def crash(self: InvoicePDF) -> None:
        raise RuntimeError("renderer crashed after the table")

    monkeypatch.setattr(InvoicePDF, "_closing", crash)
    with pytest.raises(RuntimeError, match="renderer crashed"):
        pdf.render_invoice(5, "Acme", lines=40, out_dir=str(tmp_path))
    assert os.listdir(tmp_path) == ["invoice-5.pdf"]
    assert (tmp_path / "invoice-5.pdf").read_bytes() == before


def test_a_write_that_fails_removes_its_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pdf.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        pdf.render_invoice(6, "Acme", out_dir=str(tmp_path))
    assert os.listdir(tmp_path) == []


def _render_big_invoice(out_dir: str) -> None:
    pdf.render_invoice(9, "Acme", lines=3000, out_dir=out_dir)
    os._exit(0)


def test_a_killed_render_leaves_no_file(tmp_path: Path) -> None:
    # A real SIGKILL in the middle of rendering, as a memory limit or a timeout would send.
    # 3,000 lines take several seconds of CPU, so the kill lands while the PDF is being drawn.
    child = multiprocessing.get_context("fork").Process(
        target=_render_big_invoice, args=(str(tmp_path),)
    )
    child.start()
    assert child.pid is not None
    process = psutil.Process(child.pid)
    deadline = time.monotonic() + 60
    while process.cpu_times().user < 0.5 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    assert child.exitcode == -signal.SIGKILL
    assert os.listdir(tmp_path) == []


def _kill_while_publishing(out_dir: str) -> None:
    # Dies at the worst moment of the write: the new bytes are in the temporary file, not yet
    # renamed over the old invoice.
    pdf.os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)
    pdf.render_invoice(5, "Acme", lines=40, out_dir=out_dir)
    os._exit(0)


def test_a_kill_during_the_write_leaves_the_old_invoice_whole(tmp_path: Path) -> None:
    pdf.render_invoice(5, "Acme", out_dir=str(tmp_path))
    before = (tmp_path / "invoice-5.pdf").read_bytes()
    child = multiprocessing.get_context("fork").Process(
        target=_kill_while_publishing, args=(str(tmp_path),)
    )
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    assert (tmp_path / "invoice-5.pdf").read_bytes() == before
    # The temporary file stays behind, hidden, next to the intact invoice.
    leftover, invoice = sorted(p.name for p in tmp_path.iterdir())
    assert invoice == "invoice-5.pdf"
    assert leftover.startswith(".invoice-5.pdf.")


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        ({"invoice_id": -1, "customer": "Acme"}, "invoice_id"),
        ({"invoice_id": True, "customer": "Acme"}, "invoice_id"),
        ({"invoice_id": "12", "customer": "Acme"}, "invoice_id"),
        ({"invoice_id": 1, "customer": "  "}, "customer"),
        ({"invoice_id": 1, "customer": "x" * 500}, "customer"),
        ({"invoice_id": 1, "customer": "Łódź Printing"}, "cannot draw"),
        ({"invoice_id": 1, "customer": "Acme\nLtd"}, "control"),
        ({"invoice_id": 1, "customer": "Acme", "lines": -3}, "lines"),
        ({"invoice_id": 1, "customer": "Acme", "lines": 0}, "lines"),
        ({"invoice_id": 1, "customer": "Acme", "lines": 2.5}, "lines"),
        ({"invoice_id": 1, "customer": "Acme", "lines": pdf.MAX_LINES + 1}, "lines"),
        ({"invoice_id": 1, "customer": "Acme", "out_dir": ""}, "out_dir"),
    ],
)
def test_bad_invoice_arguments_are_discarded(
    tmp_path: Path, args: dict[str, object], reason: str
) -> None:
    args.setdefault("out_dir", str(tmp_path))
    with pytest.raises(Discard, match=reason):
        pdf.render_invoice(**args)  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())


def test_an_invoice_is_not_published_once_the_lease_is_lost(tmp_path: Path) -> None:
    job = make_job()
    job._check_lease = lambda: False
    pdf.render_invoice(42, "Acme", out_dir=str(tmp_path), job=job)
    assert os.listdir(tmp_path) == []


# --- Webhooks ----------------------------------------------------------------------------------


@pytest.fixture
def sink() -> WebhookSink:
    with WebhookSink() as running:
        yield running


def test_a_delivery_reaches_the_receiver_with_its_idempotency_key(sink: WebhookSink) -> None:
    job = make_job(42, attempt=3)
    webhooks.deliver_webhook(sink.url, "invoice.paid", {"invoice": 42, "amount": "9.50"}, job=job)
    assert sink.deliveries == [
        Delivery("pgq-job-42", "invoice.paid", {"invoice": 42, "amount": "9.50"})
    ]
    assert [(r.status, r.key, r.attempt) for r in sink.received] == [(200, "pgq-job-42", "3")]


def test_every_attempt_sends_the_same_key_so_the_receiver_deduplicates(sink: WebhookSink) -> None:
    for attempt in (1, 2):
        webhooks.deliver_webhook(sink.url, "order.shipped", {"n": 1}, job=make_job(9, attempt))
    webhooks.deliver_webhook(sink.url, "order.shipped", {"n": 2}, job=make_job(10))
    assert [r.attempt for r in sink.received] == ["1", "2", "1"]
    assert len(sink.deliveries) == 3
    assert [d.key for d in sink.unique_deliveries()] == ["pgq-job-9", "pgq-job-10"]
    assert sink.wait_for(2, timeout=0)
    assert not sink.wait_for(3, timeout=0.01)


def test_503_asks_for_a_retry_after_the_receivers_delay() -> None:
    with WebhookSink(fail_rate=1.0, retry_after=7) as busy:
        with pytest.raises(Retry) as raised:
            webhooks.deliver_webhook(busy.url, "e", {}, job=make_job())
        assert busy.deliveries == []
        assert [r.status for r in busy.received] == [503]
    assert raised.value.delay == 7.0
    assert "503" in raised.value.reason


def test_429_asks_for_a_retry_too(sink: WebhookSink) -> None:
    with pytest.raises(Retry) as raised:
        webhooks.deliver_webhook(f"{sink.url}/status/429", "e", {}, job=make_job())
    assert raised.value.delay == sink.retry_after


@pytest.mark.parametrize("status", [400, 404, 410, 422])
def test_a_rejection_is_discarded(sink: WebhookSink, status: int) -> None:
    with pytest.raises(Discard, match=f"answered {status}"):
        webhooks.deliver_webhook(f"{sink.url}/status/{status}", "e", {}, job=make_job())


@pytest.mark.parametrize("status", [500, 502, 408])
def test_a_server_error_is_a_failure_for_backoff(sink: WebhookSink, status: int) -> None:
    with pytest.raises(webhooks.DeliveryFailed, match=f"answered {status}") as raised:
        webhooks.deliver_webhook(f"{sink.url}/status/{status}", "e", {}, job=make_job())
    assert not isinstance(raised.value, Outcome)


def test_a_redirect_is_not_followed(sink: WebhookSink) -> None:
    with pytest.raises(Discard, match="redirected"):
        webhooks.deliver_webhook(f"{sink.url}/status/302", "e", {}, job=make_job())
    assert [r.status for r in sink.received] == [302]


def test_a_refused_connection_is_a_failure() -> None:
    with WebhookSink() as stopped:
        url = stopped.url
    with pytest.raises(webhooks.DeliveryFailed, match="refused") as raised:
        webhooks.deliver_webhook(f"{url}/hook?token=s3cret", "e", {}, job=make_job())
    assert not isinstance(raised.value, Outcome)
    assert "s3cret" not in str(raised.value)


def test_a_slow_receiver_times_out_within_the_jobs_time() -> None:
    with WebhookSink(delay=10) as slow:
        started = time.monotonic()
        with pytest.raises(webhooks.DeliveryFailed, match="timed out"):
            webhooks.deliver_webhook(slow.url, "e", {}, job=make_job(deadline_in=0.2))
        # The job had 0.2 s left: the request waited the minimum timeout, not the default 10 s.
        assert time.monotonic() - started < webhooks.DEFAULT_TIMEOUT / 2


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/hook", "http"),
        ("file:///etc/passwd", "http"),
        ("example.com/hook", "http"),
        ("http:///no-host", "http"),
        ("http://example.com:99999/", "malformed"),
        ("http://user:secret@example.com/", "credentials"),
        ("http://127.0.0.1:9/a b", "malformed"),
        (None, "string"),
    ],
)
def test_bad_urls_are_discarded(url: object, reason: str) -> None:
    with pytest.raises(Discard, match=reason) as raised:
        webhooks.deliver_webhook(url, "e", {}, job=make_job())  # type: ignore[arg-type]
    assert "secret" not in str(raised.value)


def test_a_payload_must_be_an_object(sink: WebhookSink) -> None:
    with pytest.raises(Discard, match="payload"):
        webhooks.deliver_webhook(sink.url, "e", [1, 2], job=make_job())  # type: ignore[arg-type]
    assert sink.received == []


def test_retry_after_accepts_seconds_and_http_dates() -> None:
    now = 1_700_000_000.0
    assert webhooks.retry_after_seconds("120", now=now) == 120
    in_90_seconds = email.utils.formatdate(now + 90, usegmt=True)
    assert webhooks.retry_after_seconds(in_90_seconds, now=now) == 90
    an_hour_ago = email.utils.formatdate(now - 3600, usegmt=True)
    assert webhooks.retry_after_seconds(an_hour_ago, now=now) == 0
    assert webhooks.retry_after_seconds("99999999", now=now) == webhooks.MAX_RETRY_AFTER
    for unusable in (None, "", "soon", "-5", "1.5"):
        assert webhooks.retry_after_seconds(unusable, now=now) == webhooks.DEFAULT_RETRY_AFTER


def test_the_sinks_failures_are_reproducible_from_its_seed() -> None:
    def statuses(seed: int) -> list[int]:
        with WebhookSink(fail_rate=0.5, seed=seed) as flaky_sink:
            for n in range(20):
                with contextlib.suppress(Retry):
                    webhooks.deliver_webhook(flaky_sink.url, "e", {"n": n}, job=make_job(n))
            return [r.status for r in flaky_sink.received]

    first = statuses(seed=3)
    assert first == statuses(seed=3)
    assert first != statuses(seed=4)
    assert set(first) == {200, 503}


# --- Flaky sync --------------------------------------------------------------------------------


def outcome(account_id: int, attempt: int, fail_rate: float = 0.3) -> type[BaseException] | None:
    try:
        flaky.sync_account(account_id, fail_rate, job=make_job(account_id, attempt))
    except Exception as exc:
        return type(exc)
    return None


@pytest.mark.parametrize("account_id", [0, 17, 34, 170])
def test_poisoned_accounts_fail_on_every_attempt(account_id: int) -> None:
    for attempt in range(1, 6):
        with pytest.raises(flaky.UpstreamError, match=f"account {account_id}"):
            flaky.sync_account(account_id, 0.0, job=make_job(account_id, attempt))


def test_an_attempts_outcome_is_reproducible_and_realistic() -> None:
    seen: set[type[BaseException] | None] = set()
    for account_id in range(1, 16):
        for attempt in (1, 2):
            result = outcome(account_id, attempt)
            assert result == outcome(account_id, attempt)
            assert (result is not None) == flaky.attempt_fails(account_id, attempt, 0.3)
            seen.add(result)
    assert None in seen
    failures = seen - {None}
    assert failures
    assert all(issubclass(kind, (OSError, flaky.UpstreamError)) for kind in failures)
    assert not any(issubclass(kind, Outcome) for kind in failures)


def test_the_fail_rate_is_honoured() -> None:
    healthy = range(1, 17)
    assert all(outcome(n, 1, fail_rate=0.0) is None for n in healthy)
    assert all(outcome(n, 1, fail_rate=1.0) is not None for n in healthy)
    pairs = [(n, a) for n in range(1, 2000) if not flaky.is_poisoned(n) for a in (1, 2)]
    share = sum(flaky.attempt_fails(n, a, 0.3) for n, a in pairs) / len(pairs)
    assert 0.27 < share < 0.33


@pytest.mark.parametrize(
    ("account_id", "fail_rate"), [(-1, 0.3), ("7", 0.3), (7, 1.5), (7, -0.1), (7, "high")]
)
def test_bad_sync_arguments_are_discarded(account_id: object, fail_rate: object) -> None:
    with pytest.raises(Discard):
        flaky.sync_account(account_id, fail_rate, job=make_job())  # type: ignore[arg-type]


# --- No-op and sleep ---------------------------------------------------------------------------


def test_noop_accepts_any_arguments() -> None:
    assert noop.noop() is None
    assert noop.noop(a=1, b={"c": [2]}) is None


def test_sleep_waits_and_rejects_bad_durations() -> None:
    started = time.monotonic()
    noop.sleep(0.05)
    assert time.monotonic() - started >= 0.05
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(Discard):
            noop.sleep(bad)  # type: ignore[arg-type]
