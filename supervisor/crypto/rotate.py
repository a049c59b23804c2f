"""`pgq-supervisor keys rotate`: every envelope re-sealed under the first key, in slices.

Each slice reads the next ``scan`` rows by primary key, re-seals the envelopes of those not
wholly under the first key, and writes them back in its own short transaction, each row only
if it still holds what was read. A crash (or a kill) loses at most the slice in flight, and a
new run finds exactly what is left: rows already under the first key are not touched again, so
running it twice is the same as once. Rows changed while a slice ran (compare-and-set missed)
are counted and left for the next run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from supervisor.queue import secrets as envelope
from supervisor.queue.keyring import Keyring
from supervisor.queue.queries import query


@dataclass
class Rotation:
    """What a run did: envelopes re-sealed, rows written, slices, rows left for another run."""

    key: str
    rows: int = 0
    envelopes: int = 0
    slices: int = 0
    skipped: int = 0  # changed during the slice (compare-and-set missed): run again
    unopenable: list[str] = field(default_factory=list)  # "jobs 12: key 'k0' missing", ...

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "rows": self.rows,
            "envelopes": self.envelopes,
            "slices": self.slices,
            "skipped": self.skipped,
            "unopenable": self.unopenable,
        }


def reseal(value: Any, kind: str, ring: Keyring, counted: list[int]) -> Any:
    """``value`` with every envelope not under the ring's first key opened and sealed again."""
    if isinstance(value, dict):
        key_id = envelope.envelope_key(value)
        if key_id is not None:
            if key_id == ring.current:
                return value
            counted[0] += 1
            return envelope.seal(envelope.open_envelope(value, kind, ring), kind, ring)
        return {k: reseal(v, kind, ring, counted) for k, v in value.items()}
    if isinstance(value, list):
        return [reseal(v, kind, ring, counted) for v in value]
    return value


def rotate(
    conn: psycopg.Connection[Any],
    ring: Keyring,
    *,
    scan: int = 1000,
    pause: float = 0.0,
    progress: Callable[[Rotation], None] | None = None,
) -> Rotation:
    """Re-seal every envelope of pgq.jobs and pgq.batches under ``ring.current``.
    ``conn`` must be in autocommit: each slice commits on its own."""
    done = Rotation(ring.current)
    for table in ("jobs", "batches"):
        after = 0
        while True:
            with conn.transaction():
                rows = conn.execute(
                    query(f"rotate_{table}_scan"),
                    {"after": after, "scan": scan, "key": ring.current},
                ).fetchall()
                last = rows[-1][3] if rows else None
                ids, old, new = [], [], []
                for row_id, kind, args, _ in rows:
                    if row_id is None:
                        continue
                    counted = [0]
                    try:
                        resealed = reseal(args, kind, ring, counted)
                    except envelope.Unopenable as exc:
                        done.unopenable.append(f"{table} {row_id} ({kind}): {exc}")
                        continue
                    ids.append(row_id)
                    old.append(Jsonb(args))
                    new.append(Jsonb(resealed))
                    done.envelopes += counted[0]
                if ids:
                    written = conn.execute(
                        query(f"rotate_{table}_write"),
                        {"ids": ids, "old": old, "new": new},
                    ).fetchall()
                    done.rows += len(written)
                    done.skipped += len(ids) - len(written)
            done.slices += 1
            if progress is not None:
                progress(done)
            if last is None:
                break
            after = last
            if pause:
                time.sleep(pause)
    return done


def envelopes_by_key(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """Envelopes per key id in jobs and batches (a full read of both)."""
    return {k: int(n) for k, n in conn.execute(query("envelopes_by_key")).fetchall()}
