"""Encrypted arguments: ``Secret(value)`` at enqueue, an envelope in the row, the value again
for the handler.

An envelope is ``{"$pgq_secret": {"key": ID, "ct": TEXT}}``: the key id it was sealed with and,
in urlsafe base64, a 12-byte random nonce followed by the AES-GCM ciphertext and tag of the
value's JSON. The associated data binds the envelope to its key id and to the job's kind, so a
row rewritten to carry another kind's envelope fails to open instead of handing a secret to a
handler that was not meant to see it. Kind, queue, tenant, unique key, priority and the other
columns stay in clear: the claim and the dashboard need them.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from typing import Any

from supervisor.queue import keyring as keys_mod
from supervisor.queue.keyring import Keyring, KeysError

MARK = "$pgq_secret"
# The mark as it appears in a row's JSON text: a quick test before any walk (queue/loaders.py).
MARK_TEXT = f'"{MARK}"'
_NONCE = 12
_JSON = json.JSONEncoder(allow_nan=False, separators=(",", ":"), ensure_ascii=False)
_decode = json.JSONDecoder().decode
_quote = json.encoder.encode_basestring  # the C version when available, as json.dumps uses


class Secret:
    """An argument to store encrypted: ``enqueue(conn, "charge", {"card": Secret(token)})``.

    The value is anything JSON can hold; the handler receives it as it was given. Its repr
    never shows it, so a Secret in a log line or a traceback stays one."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        if isinstance(value, Secret):
            raise TypeError("Secret(Secret(...)): a secret is sealed once")
        self.value = value

    def __repr__(self) -> str:
        return "Secret(...)"


class Sealed(dict):  # type: ignore[type-arg]
    """A claimed job's arguments that hold envelopes (the loader saw the mark): the executor
    opens these and passes plain dicts through untouched."""


class Unopenable(Exception):
    """An envelope that cannot be opened. ``key_id`` is set when only the key is missing (the
    job can run once the key is given); otherwise the envelope is damaged or not this kind's."""

    def __init__(self, message: str, key_id: str | None = None) -> None:
        super().__init__(message)
        self.key_id = key_id


def _aad(key_id: str, kind: str) -> bytes:
    return f"pgq-secret/1\0{key_id}\0{kind}".encode()


def seal(value: Any, kind: str, ring: Keyring, key_id: str | None = None) -> dict[str, Any]:
    """The envelope of ``value`` under ``key_id`` (default: the ring's first key)."""
    key_id = key_id or ring.current
    # A string (most secrets) through the C quoting directly, not the encoder's Python layers.
    text_value = _quote(value) if type(value) is str else _JSON.encode(value)
    plain = text_value.encode("utf-8")
    nonce = os.urandom(_NONCE)
    sealed = ring.cipher(key_id).encrypt(nonce, plain, _aad(key_id, kind))
    text = base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")
    return {MARK: {"key": key_id, "ct": text}}


def envelope_key(value: Any) -> str | None:
    """The key id of ``value`` if it is an envelope, else None."""
    if isinstance(value, dict) and len(value) == 1 and MARK in value:
        inner = value[MARK]
        if isinstance(inner, dict) and isinstance(inner.get("key"), str):
            return str(inner["key"])
    return None


def open_envelope(envelope: Mapping[str, Any], kind: str, ring: Keyring | None) -> Any:
    inner = envelope[MARK]
    key_id = inner.get("key") if isinstance(inner, dict) else None
    text = inner.get("ct") if isinstance(inner, dict) else None
    if not isinstance(key_id, str) or not isinstance(text, str):
        raise Unopenable("an encrypted argument's envelope is malformed (no key id or ciphertext)")
    cipher = ring.cipher(key_id) if ring is not None else None
    if cipher is None:
        held = ", ".join(ring.ids()) if ring is not None else "none"
        source = ring.source if ring is not None else f"{keys_mod.ENV} or encryption.keys_file"
        raise Unopenable(
            f"an argument is encrypted under key {key_id!r}, which this process lacks "
            f"(keys from {source}: {held})",
            key_id=key_id,
        )
    from cryptography.exceptions import InvalidTag

    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        plain = cipher.decrypt(raw[:_NONCE], raw[_NONCE:], _aad(key_id, kind))
        return _decode(plain.decode("utf-8"))
    except (InvalidTag, ValueError):
        raise Unopenable(
            f"an argument encrypted under key {key_id!r} fails authentication for kind "
            f"{kind!r}: the envelope was altered, copied from another kind, or sealed with "
            "another key of that id"
        ) from None


def open_args(value: Any, kind: str, ring: Keyring | None, found: list[Any] | None = None) -> Any:
    """``value`` with every envelope replaced by what it holds; ``found`` collects the
    plaintexts (to scrub them from error texts)."""
    if isinstance(value, dict):
        if MARK in value and len(value) == 1:
            opened = open_envelope(value, kind, ring)
            if found is not None:
                found.append(opened)
            return opened
        return {k: open_args(v, kind, ring, found) for k, v in value.items()}
    if isinstance(value, list):
        return [open_args(v, kind, ring, found) for v in value]
    return value


def unwrapped(value: Any) -> Any:
    """``value`` with each Secret replaced by its value: what a handler receives for arguments
    given with Secrets (supervisor.testing.run_inline, where nothing is stored)."""
    if isinstance(value, Secret):
        return value.value
    if isinstance(value, dict):
        return {k: unwrapped(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [unwrapped(v) for v in value]
    return value


def has_envelope(value: Any) -> bool:
    if isinstance(value, dict):
        return (MARK in value and len(value) == 1) or any(has_envelope(v) for v in value.values())
    if isinstance(value, list):
        return any(has_envelope(v) for v in value)
    return False


def mask(value: Any) -> Any:
    """``value`` for display: each envelope as ``[encrypted: key ID]``, never its ciphertext."""
    if isinstance(value, dict):
        key_id = envelope_key(value)
        if key_id is not None:
            return f"[encrypted: key {key_id}]"
        return {k: mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [mask(v) for v in value]
    return value


def in_clear(args: Any, fields: tuple[str, ...]) -> list[str]:
    """The ``encrypt:`` fields that ``args`` holds but not as an envelope (stored in clear)."""
    if not isinstance(args, dict):
        return []
    return [f for f in fields if f in args and envelope_key(args[f]) is None]


def sealer(kind: str, ring: Keyring | None) -> Any:
    """A JSON encoder's ``default`` that seals each Secret it meets for ``kind`` with ``ring``
    (this process's keys: keyring.active())."""
    if ring is None:
        raise KeysError(
            f"job {kind!r}: a Secret argument needs keys: set {keys_mod.ENV}=ID:KEY "
            "(32 random bytes in urlsafe base64; pgq-supervisor keys new)"
        )

    def default(obj: Any) -> Any:
        if isinstance(obj, Secret):
            try:
                return seal(obj.value, kind, ring)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"a Secret's value is not JSON-serialisable: {exc}") from None
        raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")

    return default
