"""What the demo shows: per-queue progress read from the database, and the closing summary.

Everything is counted from the database, for the demo's own job ids only: waiting, running and
dead jobs from pgq.jobs, completed ones from pgq.job_history (the supervisor deletes a job when
it completes, and keeps a history row when `history.enabled` is on).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import psycopg

from supervisor.queue.queries import parse

QUERIES = parse(Path(__file__).with_name("demo.sql").read_text(encoding="utf-8"))
# The live rate counts completions over this many seconds: recent enough to show the pace
# changing, long enough not to jump with every batch.
RATE_WINDOW = 5.0
ERROR_CHARS = 150


@dataclass
class QueueCounts:
    queue: str
    jobs: int
    done: int = 0
    failed: int = 0  # failed attempts that were retried (or will be)
    dead: int = 0
    left: int = 0  # waiting or running
    recent: int = 0  # completed within RATE_WINDOW
    last_finished: datetime | None = None

    def absorb(self, other: QueueCounts) -> None:
        for name in ("jobs", "done", "failed", "dead", "left", "recent"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.last_finished = _later(self.last_finished, other.last_finished)

    def took(self, enqueued_at: datetime) -> float | None:
        """Seconds from the enqueue to the last job of the queue that finished."""
        if self.last_finished is None:
            return None
        return max((self.last_finished - enqueued_at).total_seconds(), 0.001)


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return max(a, b) if a and b else a or b


@dataclass
class Snapshot:
    at: datetime  # the database's clock
    queues: list[QueueCounts]

    @property
    def total(self) -> QueueCounts:
        total = QueueCounts("total", 0)
        for counts in self.queues:
            total.absorb(counts)
        return total


def registered_connection(dsn: str, params: dict[str, Any]) -> psycopg.Connection[Any] | None:
    """A connection once the supervisor's master has started its loop (registered itself,
    after migrating), else None."""
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=3)
    except psycopg.Error:
        return None
    with contextlib.suppress(psycopg.Error):
        ready = conn.execute(QUERIES["schema_ready"]).fetchone()
        if ready and ready[0]:
            up = conn.execute(QUERIES["supervisor_registered"], params).fetchone()
            if up and up[0]:
                return conn
    conn.close()
    return None


def take_snapshot(conn: psycopg.Connection[Any], ids_by_queue: dict[str, list[int]]) -> Snapshot:
    """Counts per queue, read in one repeatable-read transaction: a job that completes between
    the two reads would otherwise be counted as both running and done."""
    ids = [i for queue_ids in ids_by_queue.values() for i in queue_ids]
    counts = {
        queue: QueueCounts(queue, len(queue_ids)) for queue, queue_ids in ids_by_queue.items()
    }
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    with conn.transaction():
        row = conn.execute(QUERIES["database_now"]).fetchone()
        assert row is not None
        for queue, state, jobs, failed, last in conn.execute(
            QUERIES["jobs_in_table"], {"ids": ids}
        ):
            entry = counts[queue]
            entry.failed += failed
            if state == "discarded":
                entry.dead += jobs
                entry.last_finished = _later(entry.last_finished, last)
            else:
                entry.left += jobs
        params = {"ids": ids, "window": RATE_WINDOW}
        for queue, jobs, failed, recent, last in conn.execute(QUERIES["jobs_completed"], params):
            entry = counts[queue]
            entry.done, entry.recent = jobs, recent
            entry.failed += failed
            entry.last_finished = _later(entry.last_finished, last)
    return Snapshot(row[0], list(counts.values()))


@dataclass
class DeadLetter:
    id: int
    queue: str
    kind: str
    attempts: int
    args: str
    error: str


def dead_letters(conn: psycopg.Connection[Any], ids: list[int], limit: int) -> list[DeadLetter]:
    rows = conn.execute(QUERIES["dead_letters"], {"ids": ids, "limit": limit}).fetchall()
    return [
        DeadLetter(job_id, queue, kind, attempts, _brief_args(args), _last_line(error))
        for job_id, queue, kind, attempts, args, error in rows
    ]


def _brief_args(args: dict[str, Any]) -> str:
    # The scalar arguments say which job it was, ids first (account_id=1020); nested payloads
    # do not.
    scalars = [(k, v) for k, v in args.items() if not isinstance(v, dict | list)]
    scalars.sort(key=lambda item: not item[0].endswith("id"))
    text = " ".join(f"{k}={v}" for k, v in scalars)
    return text if len(text) <= 32 else text[:31] + "…"


def _last_line(error: str | None) -> str:
    # last_error holds a traceback; its last line names the exception and says what happened.
    lines = [line.strip() for line in (error or "").splitlines() if line.strip()]
    text = lines[-1] if lines else "(no error recorded)"
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


@dataclass
class PdfReport:
    folder: str
    expected: int
    written: int = 0
    valid: int = 0
    size: int = 0
    invalid: list[str] = field(default_factory=list)


def count_pdfs(folder: Path, invoice_ids: list[int], since: float) -> int:
    """How many of this run's invoices are written so far (cheap: one stat each)."""
    count = 0
    for invoice_id in invoice_ids:
        try:
            count += (folder / f"invoice-{invoice_id}.pdf").stat().st_mtime >= since
        except OSError:
            continue
    return count


def scan_pdfs(folder: Path, shown_as: str, invoice_ids: list[int], since: float) -> PdfReport:
    """This run's invoices: written since the demo started, and whole PDF files (the header
    at the start, the end-of-file marker at the end)."""
    report = PdfReport(shown_as, len(invoice_ids))
    for invoice_id in invoice_ids:
        path = folder / f"invoice-{invoice_id}.pdf"
        try:
            if path.stat().st_mtime < since:
                continue
            data = path.read_bytes()
        except OSError:
            continue
        report.written += 1
        report.size += len(data)
        if data.startswith(b"%PDF-") and b"%%EOF" in data[-32:]:
            report.valid += 1
        else:
            report.invalid.append(path.name)
    return report


# -- showing it ---------------------------------------------------------------------------------

HEADINGS = ("queue", "jobs", "done", "failed", "dead", "left")
LEGEND = (
    "failed: attempts that failed and were retried · dead: gave up, kept in the dead-letter queue"
)


def _rate(done: int, seconds: float | None) -> str:
    return f"{done / seconds:.1f}" if seconds else "-"


def table(snap: Snapshot, enqueued_at: datetime, *, final: bool) -> list[str]:
    """Per-queue rows and a total. Live, the rate is over the last few seconds; at the end, it
    is the queue's completions over the time from the enqueue to its last finished job."""
    elapsed = max((snap.at - enqueued_at).total_seconds(), 0.001)
    extra = ("took", "jobs/s") if final else ("jobs/s",)
    lines = ["  " + f"{HEADINGS[0]:<10}" + "".join(f"{h:>8}" for h in HEADINGS[1:] + extra)]
    for counts in [*snap.queues, snap.total]:
        numbers = [counts.jobs, counts.done, counts.failed, counts.dead, counts.left]
        if final:
            took = counts.took(enqueued_at)
            tail = [f"{took:.1f}s" if took else "-", _rate(counts.done, took)]
        else:
            tail = [_rate(counts.recent, min(RATE_WINDOW, elapsed))]
        lines.append(f"  {counts.queue:<10}" + "".join(f"{n!s:>8}" for n in [*numbers, *tail]))
    return lines


def one_line(snap: Snapshot, enqueued_at: datetime, elapsed: float) -> str:
    """The progress as one line, for logs and pipes where a redraw would be noise."""
    window = min(RATE_WINDOW, max((snap.at - enqueued_at).total_seconds(), 0.001))
    parts = [
        f"{c.queue} {c.done}/{c.jobs} done, {c.failed} failed, {c.dead} dead, {c.left} left, "
        f"{_rate(c.recent, window)}/s"
        for c in snap.queues
    ]
    return f"[{elapsed:6.1f}s] " + " | ".join(parts)


def write(stream: TextIO, text: str) -> None:
    """Write and flush; if the reader went away (`demo.py | head`), carry on silently so that
    the demo still stops what it started."""
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


class Progress:
    """Redraws a block in place on a terminal; otherwise prints one line per update."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.drawn = 0

    def show(self, header: str, snap: Snapshot, enqueued_at: datetime, elapsed: float) -> None:
        if not self.tty:
            write(self.stream, one_line(snap, enqueued_at, elapsed) + "\n")
            return
        # A line wider than the terminal wraps onto two rows, and the redraw would climb too few.
        width = shutil.get_terminal_size((120, 24)).columns - 1
        lines = [line[:width] for line in [header, *table(snap, enqueued_at, final=False)]]
        # Up to the first line of the previous block (ESC[nF), clear to the end (ESC[J).
        redraw = f"\x1b[{self.drawn}F\x1b[J" if self.drawn else ""
        write(self.stream, redraw + "\n".join(lines) + "\n")
        self.drawn = len(lines)

    def done(self) -> None:
        """The block stays on screen; whatever comes next is printed below it."""
        self.drawn = 0


@dataclass
class Summary:
    """Everything the closing summary says, also written as JSON for scripts and tests."""

    finished: bool  # every job done or dead
    snap: Snapshot
    enqueued_at: datetime
    wall_seconds: float
    startup_seconds: float | None
    pdfs: PdfReport
    webhooks: int
    deliveries: int | None  # accepted by the receiver, retries included
    unique_deliveries: int | None  # distinct Idempotency-Keys among them
    dead_letters: list[DeadLetter]
    withdrawn: int  # jobs deleted, never run, when the demo stopped early
    # What the invoice workflow's mail step returned (its kept result): the archive it mailed.
    archive: dict[str, Any] | None = None


def summary_lines(s: Summary) -> list[str]:
    total = s.snap.total
    took = total.took(s.enqueued_at)
    start = f"start-up {s.startup_seconds:.1f}s, " if s.startup_seconds else ""
    jobs = f"jobs {took:.1f}s from the enqueue to the last one" if took else "no job finished"
    state = "Summary" if s.finished else "Stopped before the end"
    lines = [
        f"{state}: {total.done} jobs done, {total.dead} dead, {total.left} left, "
        f"in {s.wall_seconds:.1f}s ({start}{jobs})",
        "",
        *table(s.snap, s.enqueued_at, final=True),
        f"  {LEGEND}",
        "",
    ]
    if s.withdrawn:
        lines.insert(-1, f"  The {s.withdrawn} jobs left are withdrawn: the next run starts clean.")
    pdfs = s.pdfs
    verdict = (
        "every one a valid PDF"
        if pdfs.valid == pdfs.written
        else f"{len(pdfs.invalid)} NOT valid: {', '.join(pdfs.invalid[:5])}"
    )
    lines.append(
        f"PDFs: {pdfs.written} of {pdfs.expected} invoices written to {pdfs.folder}/, "
        f"{human_size(pdfs.size)}, {verdict}"
    )
    if s.archive is not None:
        flow = s.archive.get("workflow", {})
        lines.append(
            f"Archive: workflow {flow.get('id')}'s invoices ended ({flow.get('completed')} "
            f"completed, {flow.get('discarded')} discarded, {flow.get('cancelled')} cancelled); "
            f"its next step zipped {s.archive['files']} PDFs into {s.archive['archive']} "
            f"({human_size(s.archive['bytes'])}) and mailed it once (effects: external)"
        )
    if s.deliveries is not None:
        lines.append(
            f"Webhooks: {s.webhooks} jobs; the receiver accepted {s.deliveries} deliveries, "
            f"{s.unique_deliveries} unique by Idempotency-Key (it acts once per key)"
        )
    if total.dead:
        lines.append(f"Dead letters: {total.dead}, kept in pgq.jobs; the last error line of each:")
        lines += [
            f"  job {d.id} {d.kind} ({d.args}), {d.attempts} attempts: {d.error}"
            for d in s.dead_letters
        ]
        if total.dead > len(s.dead_letters):
            lines.append(f"  ... and {total.dead - len(s.dead_letters)} more")
    return lines


def look_further(command: str, data_dir: str | None, logs: list[str]) -> list[str]:
    """Where to look next. The other verbs need the database: with the embedded default, that
    means a supervisor running, since it starts and stops the server."""
    verbs = [f"  {command} status", f"  {command} dlq list"]
    if data_dir is None:
        lines = ["Look further, with PGQ_DSN set to the same database:", *verbs]
    else:
        lines = [
            f"Look further: the queue is kept in {data_dir}, but its PostgreSQL runs only while "
            "a supervisor does, so start one first:",
            f"  {command}            # in one terminal; Ctrl-C stops it",
            f"{verbs[0]}     # in another",
            verbs[1],
        ]
    return [*lines, f"Logs: {', '.join(logs)}"]


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def write_json(path: Path, data: dict[str, Any]) -> None:
    """The summary for scripts and tests, numbers exactly as printed."""

    def default(value: object) -> object:
        if isinstance(value, datetime):
            return value.isoformat()
        raise TypeError(f"cannot write {type(value).__name__} as JSON")

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, default=default) + "\n", encoding="utf-8")
