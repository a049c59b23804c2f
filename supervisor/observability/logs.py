"""Log lines for the operator at 3 a.m.: human-readable by default, JSON lines on request.

Every line about a job carries its id, kind, queue, attempt and pool (passed as ``extra``);
text lines append them as key=value, JSON lines as fields. A filter scrubs passwords from every
message, whatever produced it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any, TextIO

from supervisor.queue.dsn import scrub

JOB_FIELDS = ("job_id", "kind", "queue", "attempt", "pool")
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


class ScrubSecrets(logging.Filter):
    def __init__(self, dsn: str | None) -> None:
        super().__init__()
        self.dsn = dsn

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = scrub(message, self.dsn)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, self.dsn)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.created))
        line = (
            f"{stamp}.{int(record.msecs):03d} {record.levelname:<7} "
            f"{record.name}[{record.process}]: {record.getMessage()}"
        )
        fields = [
            f"{name}={getattr(record, name)}"
            for name in JOB_FIELDS
            if getattr(record, name, None) is not None
        ]
        if fields:
            line += "  " + " ".join(fields)
        if record.exc_text or record.exc_info:
            line += "\n" + (record.exc_text or self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        audit = getattr(record, "audit", None)  # the dashboard's actions (web/audit.py)
        if audit is not None:
            entry["audit"] = audit
        if record.exc_text or record.exc_info:
            entry["exc"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def setup_logging(
    fmt: str = "text", level: str = "info", *, dsn: str | None = None, stream: TextIO | None = None
) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ScrubSecrets(dsn or os.environ.get("PGQ_DSN")))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS.get(level, logging.INFO))
    # The driver's own debug chatter is not the operator's business.
    logging.getLogger("psycopg").setLevel(max(logging.WARNING, root.level))
