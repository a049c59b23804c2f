"""A child's Worker built in the test's own process (no fork, no master): for tests that drive
one part of a child (its session, its claimer) against a real database."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def in_process_worker(
    dsn: str, tmp_path: Path, config: str, pool: str = "main", *, handlers: bool = False
) -> Any:
    """The Worker of slot 1 of ``pool`` in the YAML ``config`` (written under ``tmp_path``),
    with no wake-up or report pipe, its master this process; with ``handlers``, the config's
    (imported here), else none."""
    from supervisor.child.spec import ChildSpec
    from supervisor.child.worker import Worker
    from supervisor.config import load_config
    from supervisor.config.handlers import load_handlers
    from supervisor.shared.board import Board

    path = tmp_path / "q.yaml"
    path.write_text(config)
    loaded = load_config(path)
    loaded_handlers = load_handlers(loaded) if handlers else {}
    return Worker(
        ChildSpec(
            config=loaded,
            pool=loaded.pools[pool],
            slot=1,
            worker_id="w",
            dsn=dsn,
            handlers=loaded_handlers,
            kinds=sorted(loaded_handlers),
            board=Board(1),
            wake_fd=-1,
            report_fd=-1,
            master_pid=os.getpid(),
            max_jobs=None,
            inherited_fds=[],
        )
    )


def spy_on_claim_variants(monkeypatch: Any) -> list[str]:
    """The variant of every claim a child's claimer sends from now on, in order (a pytest
    ``monkeypatch`` undoes the spy)."""
    from supervisor.child import claimer

    sent: list[str] = []
    original = claimer.jobs_api.send_claim

    def spy(*args: Any, **kwargs: Any) -> Any:
        sent.append(kwargs["variant"])
        return original(*args, **kwargs)

    monkeypatch.setattr(claimer.jobs_api, "send_claim", spy)
    return sent
