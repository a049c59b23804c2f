"""Encrypted job arguments (docs/how-to/encrypted-arguments.md): Secret, keys, envelopes."""

from supervisor.crypto.envelope import Secret, Unopenable, mask
from supervisor.crypto.keys import Keyring, KeysError

__all__ = ["Keyring", "KeysError", "Secret", "Unopenable", "mask"]
