"""Encrypted job arguments (docs/how-to/encrypted-arguments.md): Secret, keys, envelopes."""

from supervisor.queue.keyring import Keyring, KeysError
from supervisor.queue.secrets import Secret, Unopenable, mask

__all__ = ["Keyring", "KeysError", "Secret", "Unopenable", "mask"]
