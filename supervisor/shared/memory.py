"""How much memory a child really uses.

RSS counts pages shared copy-on-write with the master (the imported handlers, the interpreter),
so every freshly forked child would look as big as the master. USS counts only the pages this
process alone holds: what would be freed if it exited. PSS splits shared pages among sharers.
Reading them walks /proc/<pid>/smaps, which costs a millisecond or more, so callers first check
the cheap RSS (always >= USS) and only measure USS when RSS is over the limit.
"""

from __future__ import annotations

import psutil


def rss(pid: int | None = None) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def uss(pid: int | None = None) -> int:
    return int(psutil.Process(pid).memory_full_info().uss)


def pss(pid: int | None = None) -> int:
    return int(getattr(psutil.Process(pid).memory_full_info(), "pss", 0))


def group_uss(pid: int) -> int:
    """USS of a child and all its descendants (a renderer's subprocesses count against it)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += int(proc.memory_full_info().uss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total
