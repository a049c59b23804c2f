"""Example batch callback with an effect outside the database: zip the batch's invoices and
mail the archive, once every invoice of the batch has ended.

    handlers:
      mail_archive: examples.archive:mail_archive
    jobs:
      mail_archive: {effects: external, reconcile: "examples.archive:was_mailed"}

``scripts/demo/demo.py`` enqueues the invoices with ``enqueue_batch(..., then=NewJob("mail_archive",
...))``; this handler sees how the batch ended in ``job.batch``. Mailing is an effect no fence
can undo: if the child dies after the mail server took the archive but before the job's outcome
was written, running it again would mail it twice. So the kind is ``effects: external``: such an
attempt leaves the job 'unknown', and ``was_mailed`` asks the mail server (the demo's sink,
keyed by the job's idempotency key) whether the mail arrived, answering ``completed`` or
``retry``. What the handler returns (the archive's path, size and counts) is kept as the job's
result: ``supervisor.result(conn, job_id)``.
"""

from __future__ import annotations

import json
import os
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

from examples.webhooks import deliver_webhook
from supervisor import JobContext, UnknownOutcome

ASK_TIMEOUT = 5.0


def mail_archive(
    sink_url: str,
    out_dir: str | None = None,
    invoice_ids: list[int] | None = None,
    *,
    job: JobContext,
) -> dict[str, Any]:
    """Mail an archive of invoices (POST sink_url/mail). As the last step of the invoice
    workflow (examples.invoice_workflow) it mails the zip its parent made, as that parent's
    result says; as a batch's `then` job it first zips the batch's PDFs itself."""
    if job.parents:
        made = dict(job.parents[0].result or {})
        deliver_webhook(sink_url.rstrip("/") + "/mail", "archive.mailed", made, job=job)
        return made
    folder = Path(out_dir or ".")
    invoice_ids = invoice_ids or []
    batch = job.batch or {}
    pdfs = [folder / f"invoice-{i}.pdf" for i in invoice_ids]
    present = [p for p in pdfs if p.is_file()]
    archive = folder / f"invoices-batch-{batch.get('id', job.id)}.zip"
    partial = archive.with_suffix(".zip.part")
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for pdf in present:
            zf.write(pdf, arcname=pdf.name)
    os.replace(partial, archive)  # a reader never sees half an archive
    size = archive.stat().st_size
    payload = {"archive": str(archive), "files": len(present), "bytes": size, "batch": batch}
    # The same Idempotency-Key on every attempt (the job id): the mail server keeps one per key.
    deliver_webhook(sink_url.rstrip("/") + "/mail", "archive.mailed", payload, job=job)
    return {"archive": str(archive), "files": len(present), "bytes": size, "batch": batch}


def was_mailed(job: UnknownOutcome) -> str:
    """The reconcile hook: did the mail server take this job's archive? Raises when it cannot
    tell (the job stays unknown and is asked again later)."""
    url = f"{job.args['sink_url'].rstrip('/')}/mail/{job.idempotency_key}"
    with urllib.request.urlopen(url, timeout=ASK_TIMEOUT) as answer:
        delivered = bool(json.load(answer)["delivered"])
    return "completed" if delivered else "retry"
