"""What the master hands a child through the fork itself (no pickling)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from supervisor.shared.board import Board
from supervisor.shared.head_walks import HeadWalks

if TYPE_CHECKING:
    from supervisor.config import Config, PoolConfig
    from supervisor.config.handlers import Handler


@dataclass
class ChildSpec:
    config: Config
    pool: PoolConfig
    slot: int
    worker_id: str
    dsn: str
    handlers: Mapping[str, Handler]
    kinds: list[str]
    board: Board
    wake_fd: int  # read end: the master writes a byte here to wake an idle child
    report_fd: int  # write end: b"R" ready, b"M" a full batch (wake a sibling), b"S" scheduled,
    # b"I" found nothing to claim (raise the wake-up flags)
    master_pid: int
    max_jobs: int | None  # already jittered by the master
    inherited_fds: list[int]  # the master's descriptors, closed right after the fork
    # Which of the pool's children walks from the head now (None: this child walks alone).
    head_walks: HeadWalks | None = None
