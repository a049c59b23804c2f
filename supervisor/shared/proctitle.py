"""Process titles: what `ps` and `top` show for the master and each child.

Setting the title also overwrites the original command line in /proc/<pid>/cmdline, which is
what hides a DSN passed with --dsn from `ps`. Nothing here ever includes the DSN.
"""

from __future__ import annotations

import time

import setproctitle

from supervisor.shared.words import plural

PREFIX = "pgq-supervisor"


def set_title(text: str) -> None:
    setproctitle.setproctitle(f"{PREFIX}: {text}")


def master_title(config_path: str, children: int, state: str) -> str:
    return f"master -c {config_path} [{plural(children, 'child')}, {state}]"


def child_title(
    pool: str,
    slot: int,
    state: str,
    *,
    kind: str | None = None,
    job_id: int | None = None,
    started: float | None = None,
) -> str:
    text = f"{pool}#{slot} {state}"
    if job_id is not None:
        elapsed = f" ({time.monotonic() - started:.0f}s)" if started is not None else ""
        text += f" {kind or '?'} job {job_id}{elapsed}"
    return text
