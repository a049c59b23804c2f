"""Opening a claimed job's encrypted arguments before its handler runs, or refusing the job.

Three refusals, each naming the job, its kind and the cause:

- an ``encrypt:`` field stored in clear (enqueued from SQL, another language, a producer
  without Secret): discarded at once, unrun, so the plaintext goes no further;
- an envelope that fails authentication (altered, or copied from another kind's job):
  discarded at once, since no retry can make it open;
- an envelope under a key id this supervisor lacks: a failure that follows the kind's retry
  policy, so a key rolled out to the producers a little before the supervisors heals on its
  own; past max_attempts it is discarded like any failure, and ``jobs replay`` runs it once
  the key is given (docs/how-to/encrypted-arguments.md).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from supervisor.queue import secrets as envelope
from supervisor.queue.keyring import Keyring, KeysError

log = logging.getLogger("pgq.worker")
SHOWN = "[encrypted]"
# Plaintexts shorter than this are not scrubbed from error texts: a "1" or a "no" would blank
# unrelated words, and so short a secret is no secret anyway.
_SCRUB_MIN = 3


class Refused(Exception):
    """A job not to run: ``retry`` False discards it at once."""

    def __init__(self, message: str, *, retry: bool) -> None:
        super().__init__(message)
        self.message = message
        self.retry = retry


class Opener:
    """What a child (or supervisor.testing) needs to open jobs: its keys and the ``encrypt:``
    fields by kind."""

    def __init__(self, ring: Keyring | None, fields: Mapping[str, tuple[str, ...]]) -> None:
        self.ring = ring
        self.fields = dict(fields)

    @classmethod
    def of(cls, config: Any) -> Opener:
        from supervisor.config.encryption import ring

        try:
            keys = ring(config.encryption)
        except KeysError as exc:  # checked at start; a file changed since then
            log.error("encrypted arguments cannot be opened: %s", exc)
            keys = None
        return cls(keys, config.encrypted_fields())

    def wants(self, kind: str, args: Any) -> bool:
        """Whether ``args`` need opening or checking (cheap: a type test and a dict look-up).
        Args loaded by the child's session come as envelope.Sealed when they hold an envelope;
        any other dict is walked only for kinds with ``encrypt:`` fields."""
        return type(args) is not dict or kind in self.fields

    def open(self, job_id: int, kind: str, args: Any) -> tuple[dict[str, Any], list[Any]]:
        """The args the handler gets, and the plaintexts found (to scrub error texts)."""
        if not isinstance(args, dict):  # not an object (written by SQL): the handler's call
            return args, []  # reports it, as for any kind
        clear = envelope.in_clear(args, self.fields.get(kind, ()))
        if clear:
            raise Refused(
                f"job {job_id} ({kind}): argument {clear[0]!r} is stored in clear, but "
                f"jobs.{kind}.encrypt lists it; discarded unrun (enqueue it with "
                "supervisor.Secret)",
                retry=False,
            )
        found: list[Any] = []
        try:
            opened = envelope.open_args(dict(args), kind, self.ring, found)
        except envelope.Unopenable as exc:
            if exc.key_id is not None:
                raise Refused(
                    f"job {job_id} ({kind}): {exc}; add key {exc.key_id!r} and replay the job",
                    retry=True,
                ) from None
            raise Refused(f"job {job_id} ({kind}): {exc}; discarded unrun", retry=False) from None
        return opened, found


def scrub(text: str | None, plaintexts: list[Any]) -> str | None:
    """``text`` (a handler's error) with each opened value's text replaced by [encrypted]."""
    if not text or not plaintexts:
        return text
    for word in sorted(_words(plaintexts), key=len, reverse=True):
        text = text.replace(word, SHOWN)
    return text


def _words(values: list[Any]) -> set[str]:
    words: set[str] = set()
    for value in values:
        if isinstance(value, str):
            if len(value) >= _SCRUB_MIN:
                words.add(value)
        elif isinstance(value, dict):
            words |= _words(list(value.values()))
        elif isinstance(value, list):
            words |= _words(value)
        elif (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and len(str(value)) >= _SCRUB_MIN
        ):
            words.add(str(value))
    return words


def opened(job: Any) -> Any:
    """A job-like dataclass or named tuple (UnknownOutcome, Job) with its args opened by this
    process's keys (keys.active()); the same object when it holds no envelope. Raises
    envelope.Unopenable naming the key id or the failed authentication."""
    if not envelope.has_envelope(job.args):
        return job
    from supervisor.queue import keyring as keys

    args = envelope.open_args(job.args, job.kind, keys.active())
    if hasattr(job, "_replace"):
        return job._replace(args=args)
    return dataclasses.replace(job, args=args)
