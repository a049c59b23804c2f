"""The invoice pipeline as a workflow: render every page in parallel, then zip them, then mail
the zip. Each stage runs once the one before has ended, and sees what it returned::

    handlers:
      render_pdf: examples.pdf:render_invoice
      zip_invoices: examples.invoice_workflow:zip_invoices
      mail_archive: examples.archive:mail_archive

    with conn.transaction():
        handle = enqueue_workflow(conn, invoice_workflow(renders, out_dir=..., sink_url=...))

The zip runs with ``on_parent_failure="run"``: a page that could not be rendered (a dead
letter) does not hold the others back; the zip holds what was rendered and says what is
missing. The mail step keeps the default ``"cancel"``: no zip, no mail. ``scripts/demo/demo.py``
enqueues this workflow.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Any

from supervisor import JobContext, NewJob, Workflow

ARCHIVE_QUEUE = "mail"


def invoice_workflow(
    renders: list[NewJob], *, out_dir: str, sink_url: str, name: str = "invoices"
) -> Workflow:
    """The render jobs, then one zip of their PDFs, then one mail of the zip."""
    wf = Workflow(name)
    pages = [wf.add(job) for job in renders]
    archive = wf.add(
        NewJob("zip_invoices", {"out_dir": out_dir}, ARCHIVE_QUEUE),
        after=pages,
        on_parent_failure="run",
    )
    wf.add(NewJob("mail_archive", {"sink_url": sink_url}, ARCHIVE_QUEUE), after=[archive])
    return wf


def zip_invoices(out_dir: str, *, job: JobContext) -> dict[str, Any]:
    """One zip of the PDFs its parents wrote (each render returned its file's path)."""
    folder = Path(out_dir)
    written = [
        Path(p.result["pdf"])
        for p in job.parents
        if p.state == "completed" and isinstance(p.result, dict) and p.result.get("pdf")
    ]
    archive = folder / f"invoices-workflow-{job.workflow}.zip"
    partial = archive.with_suffix(".zip.part")
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for pdf in written:
            if pdf.is_file():
                zf.write(pdf, arcname=pdf.name)
    os.replace(partial, archive)  # a reader never sees half an archive
    states = [p.state for p in job.parents]
    return {
        "archive": str(archive),
        "files": len(written),
        "bytes": archive.stat().st_size,
        "workflow": {
            "id": job.workflow,
            "completed": states.count("completed"),
            "discarded": states.count("discarded"),
            "cancelled": states.count("cancelled"),
        },
    }
