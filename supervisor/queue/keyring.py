"""The keys that seal and open encrypted arguments: ``PGQ_KEYS=ID:KEY,ID:KEY`` or a keys file.

Each key is 32 random bytes (AES-256-GCM) written in urlsafe base64, named by a short id that
every envelope carries. The first key seals; every key opens, so a new key goes first and the
old ones stay until ``pgq-supervisor keys rotate`` has moved their envelopes to it. Errors name
the entry (its place and id) and never show a key's text, not even a wrong one.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

ENV = "PGQ_KEYS"
KEY_BYTES = 32
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_BASE64 = re.compile(r"[A-Za-z0-9_-]+={0,2}")


class KeysError(ValueError):
    """A key list that cannot be used; the message names where and which entry, not the key."""


@dataclass(frozen=True)
class Keyring:
    """Keys by id, the sealing one first. ``source`` says where they came from, for messages."""

    keys: dict[str, bytes]
    source: str
    _ciphers: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def current(self) -> str:
        return next(iter(self.keys))

    def ids(self) -> list[str]:
        return list(self.keys)

    def cipher(self, key_id: str) -> Any:
        """The AES-GCM object of ``key_id`` (built once), or None when this ring lacks it."""
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            key = self.keys.get(key_id)
            if key is None:
                return None
            cipher = self._ciphers[key_id] = _aesgcm()(key)
        return cipher

    def __repr__(self) -> str:  # never the keys themselves
        return f"Keyring({', '.join(self.keys)} from {self.source})"

    __str__ = __repr__


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise KeysError(
            "encrypted arguments need the cryptography package: "
            "pip install 'pgq-supervisor[crypto]'"
        ) from None
    return AESGCM


def parse(entries: Iterable[tuple[str, str]], source: str) -> Keyring:
    """A ring from (where, "ID:KEY") entries; ``where`` names each entry in errors."""
    keys: dict[str, bytes] = {}
    for where, entry in entries:
        key_id, sep, text = entry.strip().partition(":")
        key_id, text = key_id.strip(), text.strip()
        if not sep or not key_id or not text:
            raise KeysError(f"{source}: {where}: must be ID:KEY (a key id, a colon, the key)")
        if not _KEY_ID.fullmatch(key_id):
            raise KeysError(
                f"{source}: {where}: the key id must be 1 to 64 letters, digits, '_', '-' or '.'"
            )
        if key_id in keys:
            raise KeysError(f"{source}: {where}: key id {key_id!r} appears twice")
        keys[key_id] = _key_bytes(text, f"{source}: {where} (key id {key_id!r})")
    if not keys:
        raise KeysError(f"{source}: no keys (give ID:KEY, the first one seals)")
    return Keyring(keys, source)


def _key_bytes(text: str, where: str) -> bytes:
    if not _BASE64.fullmatch(text):
        raise KeysError(f"{where}: the key is not urlsafe base64 (A-Z a-z 0-9 - _)")
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise KeysError(f"{where}: the key is not valid urlsafe base64") from None
    if len(raw) != KEY_BYTES:
        raise KeysError(
            f"{where}: the key is {len(raw)} bytes; keys are {KEY_BYTES} random bytes in urlsafe "
            "base64 (pgq-supervisor keys new)"
        )
    return raw


def from_text(text: str, source: str = ENV) -> Keyring:
    """``ID:KEY,ID:KEY`` (PGQ_KEYS)."""
    parts = [p for p in text.split(",")]
    return parse(((f"entry {i}", p) for i, p in enumerate(parts, 1)), source)


def from_file(path: str, source: str | None = None) -> Keyring:
    """One ``ID:KEY`` a line; blank lines and lines starting with # are skipped."""
    where = source or path
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise KeysError(f"{where}: cannot read the keys file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise KeysError(f"{where}: the keys file is not UTF-8 text") from None
    entries = [
        (f"line {n}", line)
        for n, line in enumerate(lines, 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    return parse(entries, where)


def new_key() -> str:
    """32 random bytes in urlsafe base64: a new key's text."""
    return base64.urlsafe_b64encode(os.urandom(KEY_BYTES)).decode("ascii")


# The ring this process uses: set by the supervisor from its configuration (install), else read
# from PGQ_KEYS when first needed and again whenever the variable changes.
_installed: Keyring | None = None
_from_env: tuple[str, Keyring] | None = None


def install(ring: Keyring | None) -> None:
    """Use ``ring`` in this process (the supervisor's keys file); None: back to PGQ_KEYS."""
    global _installed
    _installed = ring


def installed() -> Keyring | None:
    """The ring ``install`` set, or None (then PGQ_KEYS is used)."""
    return _installed


def active() -> Keyring | None:
    """This process's ring, or None when it has none (no PGQ_KEYS, nothing installed)."""
    global _from_env
    if _installed is not None:
        return _installed
    text = os.environ.get(ENV)
    if not text:
        return None
    if _from_env is None or _from_env[0] != text:
        _from_env = (text, from_text(text))
    return _from_env[1]
