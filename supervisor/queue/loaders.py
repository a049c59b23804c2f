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
import json.scanner
from typing import Any

import psycopg
from psycopg.adapt import Loader

from supervisor.queue.secrets import MARK_TEXT, Sealed

_decoder = json.JSONDecoder()
# The decoder's scanner, called directly: JSONDecoder.decode reaches it through two Python
# frames (decode, raw_decode) and a whitespace match at each end, which jsonb's output never
# has; 0.20 against 0.76 us for `{}`, 0.65 against 1.39 for a small object.
_scan = json.scanner.make_scanner(_decoder)


def _decode(text: str) -> Any:
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        return _decoder.decode(text)  # not one bare value: the decoder's own error, or whitespace
    return value


def _load(text: str) -> Any:
    value = _decode(text)
    # Args holding encrypted values come back marked, so that the executor opens only those:
    # one substring search here instead of a walk of every job's args (supervisor/crypto).
    if MARK_TEXT in text and type(value) is dict:
        return Sealed(value)
    return value


class _JsonbTextLoader(Loader):
    def load(self, data: Any) -> Any:
        # str straight from the buffer (no bytes copy), for the decoder: what json.loads does,
        # minus its encoding guess.
        return _load(str(data, self._encoding))

    # The connection's encoding, set by use_fast_json on the subclass it registers (asking
    # conn.info at each loader made, two a claim, cost more than loading a row's args).
    _encoding = "utf-8"


class _JsonbBinaryLoader(_JsonbTextLoader):
    format = psycopg.pq.Format.BINARY

    def load(self, data: Any) -> Any:
        # Binary jsonb is a version byte (1) and then the text.
        if data[0] != 1:
            raise psycopg.DataError(f"unknown jsonb binary format version {data[0]}")
        return _load(str(data[1:], self._encoding))


def use_fast_json(conn: psycopg.Connection[Any]) -> None:
    """Load json and jsonb results on ``conn`` with the faster loaders."""
    encoding = conn.info.encoding
    text = type("_JsonbTextLoader", (_JsonbTextLoader,), {"_encoding": encoding})
    binary = type("_JsonbBinaryLoader", (_JsonbBinaryLoader,), {"_encoding": encoding})
    conn.adapters.register_loader("jsonb", text)
    conn.adapters.register_loader("json", text)
    conn.adapters.register_loader("jsonb", binary)
