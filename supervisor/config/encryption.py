"""The `encryption:` section and the keys it names (docs/how-to/encrypted-arguments.md).

``encryption: {keys_file: PATH}`` (relative to the YAML's folder) or, without it, PGQ_KEYS in
the supervisor's environment. Either is read and checked here, so that `check` and a start
refuse a bad key list (exit 2) naming where and which entry, never its key. The keys themselves
are not kept in the Config (it is printed, compared, sent to children): ``ring`` reads them
again where they are used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from supervisor.config.fields import Section, optional, text
from supervisor.config.model import EncryptionConfig
from supervisor.queue import keyring as keys_mod
from supervisor.queue.keyring import Keyring, KeysError

ENCRYPTION_KEYS = ("keys_file",)


def encryption(top: Section, source: str, env: Mapping[str, str]) -> EncryptionConfig:
    s = top.section("encryption", "keys_file")
    s.only(*ENCRYPTION_KEYS)
    path = s.get("keys_file", optional(text(max_chars=4096)), None)
    if path is not None:
        if not os.path.isabs(path):
            path = os.path.join(os.path.dirname(os.path.abspath(source)), path)
        try:
            keys_mod.from_file(path)
        except KeysError as exc:
            s.report("keys_file", str(exc))
        return EncryptionConfig(keys_file=path)
    value = env.get(keys_mod.ENV)
    if value:
        try:
            keys_mod.from_text(value)
        except KeysError as exc:
            top.report("encryption", f"no keys_file, and {exc}")
    return EncryptionConfig()


def ring(config: EncryptionConfig, env: Mapping[str, str] | None = None) -> Keyring | None:
    """The keys the configuration names (keys_file, else PGQ_KEYS), or None when it names none.
    Raises KeysError when they became unreadable since the configuration was checked."""
    if config.keys_file is not None:
        return keys_mod.from_file(config.keys_file)
    value = (os.environ if env is None else env).get(keys_mod.ENV)
    return keys_mod.from_text(value) if value else None
