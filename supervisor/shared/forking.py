"""Forking without the child's garbage collector walking the master's heap.

A forked child shares the master's memory pages until it writes to them. Python's cyclic
collector writes to every object it examines (the reference count it works on lives in the
object's header), so a child's full collection touches every object the master had loaded
(the supervisor, psycopg, the handlers' modules: tens of thousands) and copies every page that
holds one; it also spends about 12 ms a full collection examining objects that will never be
garbage in the child. ``gc.freeze()`` just before the fork moves what exists into a permanent
generation that collections leave alone (what the ``gc`` module's documentation recommends for a
pre-forking server); the master thaws its own objects again after the fork, so that its cycles
are collected as before, while the child keeps them frozen for its life.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator


@contextlib.contextmanager
def heap_frozen_for_fork() -> Iterator[None]:
    """Around an ``os.fork()``: the child starts with the master's objects frozen; the master
    leaves the block with none frozen. Freezing and thawing are constant-time list moves."""
    master = os.getpid()
    gc.freeze()
    try:
        yield
    finally:
        if os.getpid() == master:
            gc.unfreeze()
