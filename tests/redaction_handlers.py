"""Handlers of the redaction scan (tests/lifecycle/test_redaction_scan.py): jobs whose arguments
hold a secret under a `web.redact` key, run by a real supervisor into every state."""

from __future__ import annotations

import time
from typing import Any

from supervisor import UnknownOutcome


def declined(*, card: dict[str, Any], pin: str, **_: Any) -> None:
    """Fails quoting its arguments, as handlers do: the error text holds the secrets."""
    raise ValueError(f"card {card['number']} declined (pin {pin})")


def refunded(*, card: dict[str, Any], **_: Any) -> dict[str, Any]:
    """Returns what the gateway echoed back: its result holds the card number under its key."""
    return {"refunded": True, "holder": card["holder"], "card": {"number": card["number"]}}


def stuck(seconds: float = 30.0, **_: Any) -> None:
    time.sleep(seconds)


def ask_bank(job: UnknownOutcome) -> str:
    """A reconcile hook whose failure quotes the job's arguments."""
    raise ConnectionError(f"bank unreachable for card {job.args['card']['number']}")
