"""A faster jsonb loader for the connections that claim jobs.

psycopg's json loader hands the bytes to json.loads, which first guesses their encoding in
Python (json.detect_encoding) on every call: for a small job's arguments that is most of the
3.3 us a claimed row spent on its args column, against 1.9 us decoding the UTF-8 (which is what
PostgreSQL sends for a UTF8 database, the only encoding jsonb text comes in on our sessions:
psycopg sets client_encoding from the connection, and jsonb output is always valid text in it)
and running the decoder directly (scripts/benchmarks/claim_rows_bench.py measures both).
Registered only on our children's sessions: an application's own connections keep psycopg's
defaults.
"""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg.adapt import Loader

from supervisor.queue.secrets import MARK_TEXT, Sealed

_decode = json.JSONDecoder().decode


def _load(text: str) -> Any:
    value = _decode(text)
    # Args holding encrypted values come back marked, so that the executor opens only those:
    # one substring search here instead of a walk of every job's args (supervisor/crypto).
    if MARK_TEXT in text and type(value) is dict:
        return Sealed(value)
    return value


class _JsonbTextLoader(Loader):
    def load(self, data: Any) -> Any:
        # bytes for a memoryview, str for the decoder: what json.loads does, minus the guess.
        return _load(bytes(data).decode(self._encoding))

    def __init__(self, oid: int, context: Any = None) -> None:
        super().__init__(oid, context)
        conn = self.connection
        self._encoding = conn.info.encoding if conn is not None else "utf-8"


class _JsonbBinaryLoader(_JsonbTextLoader):
    format = psycopg.pq.Format.BINARY

    def load(self, data: Any) -> Any:
        # Binary jsonb is a version byte (1) and then the text.
        if data[0] != 1:
            raise psycopg.DataError(f"unknown jsonb binary format version {data[0]}")
        return _load(bytes(data[1:]).decode(self._encoding))


def use_fast_json(conn: psycopg.Connection[Any]) -> None:
    """Load json and jsonb results on ``conn`` with the faster loaders."""
    conn.adapters.register_loader("jsonb", _JsonbTextLoader)
    conn.adapters.register_loader("json", _JsonbTextLoader)
    conn.adapters.register_loader("jsonb", _JsonbBinaryLoader)
