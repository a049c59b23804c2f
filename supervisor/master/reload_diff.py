"""What a reload changed, in words for its log line, and whether a pool's change is its
queues' weights alone (which running children take without a restart)."""

from __future__ import annotations

from dataclasses import fields, replace

from supervisor.config import PoolConfig


def weights_only(old: PoolConfig, new: PoolConfig) -> bool:
    """The same pool but for its queues' weights: same queues, in the same order."""
    return (
        old != new
        and list(old.queues) == list(new.queues)
        and replace(old, queues=new.queues) == new
    )


def pool_changes(old: PoolConfig, new: PoolConfig) -> list[str]:
    """``processes 2 -> 3``, ``queue media weight 1 -> 3``, ``queue pdf added``..."""
    said = []
    for f in fields(PoolConfig):
        if f.name in ("name", "queues"):
            continue
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before != after:
            said.append(f"{f.name} {before} -> {after}")
    for queue, weight in new.queues.items():
        if queue not in old.queues:
            said.append(f"queue {queue} added (weight {weight})")
        elif old.queues[queue] != weight:
            said.append(f"queue {queue} weight {old.queues[queue]} -> {weight}")
    said += [f"queue {q} removed" for q in old.queues if q not in new.queues]
    if not said and list(old.queues) != list(new.queues):
        said.append(f"queue order {', '.join(old.queues)} -> {', '.join(new.queues)}")
    return said
