"""Example CPU-heavy handler: render an invoice PDF and publish it atomically.

    handlers:
      render_pdf: examples.pdf:render_invoice

One invoice at the default size is two A4 pages and takes about 45 ms of CPU (fpdf2 lays text
out in pure Python), which is the workload that wants processes and small claim batches rather
than threads. Run ``python -m examples.pdf`` to measure it on your machine.

The output is published with ``os.replace``: a render that dies halfway (timeout, memory kill,
deploy) leaves either the previous complete file or nothing, never half a PDF, and a retry
simply replaces it. The render itself happens in memory, so a kill at any time during the
CPU-heavy part leaves no temporary file behind either.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import tempfile
import time
from pathlib import Path

from supervisor.queue.context import JobContext
from supervisor.queue.outcomes import Discard

from .invoice_data import build_invoice
from .invoice_layout import InvoicePDF

log = logging.getLogger(__name__)

# Tuned so one invoice costs roughly 20-60 ms of CPU (about 45 ms, two pages, when measured).
DEFAULT_LINES = 20
# A bound on what one job may ask for: 5,000 lines is ~190 pages and ~10 s of CPU.
MAX_LINES = 5000
MAX_CUSTOMER_CHARS = 120


def render_invoice(
    invoice_id: int,
    customer: str,
    lines: int = DEFAULT_LINES,
    out_dir: str = "out/invoices",
    *,
    job: JobContext | None = None,
) -> dict[str, str] | None:
    """Render invoice ``invoice_id`` for ``customer`` to ``<out_dir>/invoice-<id>.pdf``; returns
    the file's path (kept as the job's result: the workflow's zip step reads it)."""
    _validate(invoice_id, customer, lines, out_dir)
    document = InvoicePDF(build_invoice(invoice_id, customer, lines)).render()
    # In a real system the invoice would be read from the database and could change between
    # attempts; a worker whose job was rescued and handed to another must not overwrite the new
    # owner's newer file with its stale one. (A narrowing of the window, not a fence: nothing
    # fences a file system.)
    if job is not None and not job.lease_held():
        log.warning(
            "lease lost while rendering; not publishing",
            extra={"job_id": job.id, "attempt": job.attempt, "invoice_id": invoice_id},
        )
        return None
    target = Path(out_dir) / f"invoice-{invoice_id}.pdf"
    publish(document, target)
    return {"pdf": str(target)}


def _validate(invoice_id: object, customer: object, lines: object, out_dir: object) -> None:
    # Job args come from JSON written by whoever enqueued the job; bad input never gets better
    # on retry, so each problem is a Discard that says what was wrong.
    if not _is_int(invoice_id) or invoice_id <= 0:
        raise Discard(f"invoice_id must be a positive integer, got {invoice_id!r}")
    if not isinstance(customer, str) or not customer.strip():
        raise Discard(f"customer must be a non-empty string, got {customer!r}")
    if len(customer) > MAX_CUSTOMER_CHARS:
        raise Discard(f"customer name is {len(customer)} characters, at most {MAX_CUSTOMER_CHARS}")
    try:
        customer.encode("windows-1252")
    except UnicodeEncodeError as exc:
        # The built-in PDF fonts cover Western European text only.
        raise Discard(
            f"customer name has {customer[exc.start]!r}, which the invoice fonts cannot draw"
        ) from None
    if re.search(r"[\x00-\x1f\x7f]", customer):
        raise Discard("customer name contains control characters")
    if not _is_int(lines) or not 1 <= lines <= MAX_LINES:
        raise Discard(f"lines must be an integer from 1 to {MAX_LINES}, got {lines!r}")
    if not isinstance(out_dir, str) or not out_dir:
        raise Discard(f"out_dir must be a non-empty path, got {out_dir!r}")


def _is_int(value: object) -> bool:
    # JSON true/false arrive as bool, which Python counts as int.
    return isinstance(value, int) and not isinstance(value, bool)


def publish(data: bytes, target: Path) -> None:
    """Write ``data`` to ``target`` so that readers see the old file or the new, never a part.

    The temporary file sits in the target's directory because ``os.replace`` is atomic only
    within one file system. It is fsynced before the rename, and the directory after it, so a
    power cut cannot leave the new name pointing at an empty file.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            # mkstemp's 0600 would hide the invoice from whatever serves it.
            os.fchmod(tmp.fileno(), 0o644)
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, target)
    except BaseException:
        # BaseException too: a SystemExit or KeyboardInterrupt during the write must not leave
        # the temporary file behind.
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> None:
    """Render a few invoices and print the CPU each one took: a sizing aid for operators."""
    parser = argparse.ArgumentParser(prog="python -m examples.pdf", description=main.__doc__)
    parser.add_argument("--lines", type=int, default=DEFAULT_LINES)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--out-dir", default="out/invoices")
    args = parser.parse_args(argv)
    render_invoice(1, "Warm-up Ltd", args.lines, args.out_dir)
    timings = []
    for invoice_id in range(1, args.count + 1):
        started = time.process_time()
        render_invoice(invoice_id, "Acme Widgets Ltd", args.lines, args.out_dir)
        timings.append(time.process_time() - started)
    timings.sort()
    sample = Path(args.out_dir) / f"invoice-{args.count}.pdf"
    pages = len(re.findall(rb"/Type /Page\b(?!s)", sample.read_bytes()))
    print(
        f"{args.count} invoices of {args.lines} lines (the last one has {pages} pages):"
        f" median {timings[len(timings) // 2] * 1000:.1f} ms CPU,"
        f" p90 {timings[len(timings) * 9 // 10] * 1000:.1f} ms, written to {args.out_dir}/"
    )


if __name__ == "__main__":
    main()
