"""Example unreliable handler: a nightly account sync against a flaky upstream API.

    handlers:
      sync_account: examples.flaky:sync_account
    jobs:
      sync_account: {max_attempts: 4}

Each attempt waits 5-50 ms, like a network call, then fails with probability ``fail_rate``,
decided by a hash of (account id, attempt): the same job fails or succeeds the same way on the
same attempt every run, so a demo's dead-letter queue is predictable. Accounts whose id is a
multiple of 17 fail on every attempt (a record the upstream cannot serve): they run out of
attempts and end in the dead-letter queue, ready for ``pgq-supervisor dlq replay``.
"""

from __future__ import annotations

import hashlib
import time

from supervisor.queue.context import JobContext
from supervisor.queue.outcomes import Discard

POISONED_EVERY = 17
MIN_PAUSE = 0.005
MAX_PAUSE = 0.050


class UpstreamError(Exception):
    """The accounts API answered with an error."""


def sync_account(account_id: int, fail_rate: float = 0.3, *, job: JobContext) -> None:
    """Synchronise one account; fails on some attempts, and always for poisoned accounts."""
    if not isinstance(account_id, int) or isinstance(account_id, bool) or account_id < 0:
        raise Discard(f"account_id must be a non-negative integer, got {account_id!r}")
    if (
        not isinstance(fail_rate, int | float)
        or isinstance(fail_rate, bool)
        or not 0.0 <= fail_rate <= 1.0
    ):
        raise Discard(f"fail_rate must be a number from 0 to 1, got {fail_rate!r}")
    time.sleep(MIN_PAUSE + (MAX_PAUSE - MIN_PAUSE) * _unit("pause", account_id, job.attempt))
    if is_poisoned(account_id):
        raise UpstreamError(
            f"accounts API answered 500 for account {account_id}: ledger record failed validation"
        )
    if attempt_fails(account_id, job.attempt, fail_rate):
        raise _transient_error(account_id, job.attempt)


def is_poisoned(account_id: int) -> bool:
    """Whether this account fails on every attempt."""
    return account_id % POISONED_EVERY == 0


def attempt_fails(account_id: int, attempt: int, fail_rate: float) -> bool:
    """Whether ``sync_account`` fails for this account on this attempt."""
    return is_poisoned(account_id) or _unit("fail", account_id, attempt) < fail_rate


def _transient_error(account_id: int, attempt: int) -> Exception:
    errors: tuple[Exception, ...] = (
        TimeoutError(f"accounts API did not answer within 30 s (account {account_id})"),
        ConnectionResetError(104, "Connection reset by peer"),
        UpstreamError(f"accounts API answered 502 Bad Gateway (account {account_id})"),
    )
    return errors[int(_unit("which", account_id, attempt) * len(errors))]


def _unit(purpose: str, account_id: int, attempt: int) -> float:
    # A hash, not random(): reproducible across processes and runs (str hash() is salted).
    digest = hashlib.blake2b(f"{purpose}:{account_id}:{attempt}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big") / 2**64
