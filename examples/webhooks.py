"""Example I/O-bound handler: deliver a webhook with an HTTP POST.

    handlers:
      deliver_webhook: examples.webhooks:deliver_webhook
    pools:
      webhooks: {processes: 1, threads: 8, queues: {webhooks: 1}}

The handler spends its time waiting on the network, so a threaded pool runs many at once.

Every attempt sends the same ``Idempotency-Key`` (the job id): if an attempt's response is lost
after the receiver acted on it, the retry repeats nothing there. What the receiver answers
decides the outcome:

- 2xx: delivered.
- 429 or 503: the receiver asked us to come back later: ``Retry`` after its Retry-After.
- 408 or 425, any 5xx, a timeout or a network error: a failure, retried with backoff.
- any other 4xx: the receiver rejected this delivery and will again: ``Discard``.
- 3xx: ``Discard``; redirects are not followed (urllib would turn the POST into a GET and
  report success for a delivery that never happened): the configured URL needs fixing.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import time
import urllib.error
import urllib.request
from email.message import Message
from typing import IO, Any
from urllib.parse import urlsplit

from supervisor.queue.context import JobContext
from supervisor.queue.outcomes import Discard, Retry

# Per socket operation, not for the whole request: the job's own timeout bounds the total.
DEFAULT_TIMEOUT = 10.0
MIN_TIMEOUT = 1.0
DEFAULT_RETRY_AFTER = 30.0
# A receiver may not park a job for longer than this with a large Retry-After.
MAX_RETRY_AFTER = 3600.0
MAX_EVENT_CHARS = 200
# How much of a refusing receiver's answer is kept in the job's error, to say why.
EXCERPT_CHARS = 200
USER_AGENT = "pgq-supervisor-webhooks/0.1"

TRANSIENT_4XX = frozenset({408, 425})
COME_BACK_LATER = frozenset({429, 503})


class DeliveryFailed(Exception):
    """A delivery that may succeed later (server error, timeout, network): retried with backoff."""


def deliver_webhook(url: str, event: str, payload: dict[str, Any], *, job: JobContext) -> None:
    """POST ``{"event": event, "payload": payload}`` as JSON to ``url``."""
    where = _validate(url, event, payload)
    body = json.dumps({"event": event, "payload": payload}, separators=(",", ":")).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": job.idempotency_key,
            "X-Attempt": str(job.attempt),
        },
    )
    # Built per call: an opener is cheap, and nothing shared outlives a fork or crosses threads.
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        # A 2xx status is the whole answer; the body is not needed.
        opener.open(request, timeout=_timeout(job)).close()
    except urllib.error.HTTPError as exc:
        with exc:
            raise _outcome_for(exc.code, exc.headers, _excerpt(exc), where) from None
    except http.client.InvalidURL:
        # Raised only once urllib builds the request line (spaces, control characters); its
        # message would repeat the URL, query string and all.
        raise Discard(f"url is malformed: {where}") from None
    except urllib.error.URLError as exc:
        raise DeliveryFailed(f"POST {where} failed: {exc.reason}") from exc
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryFailed(f"POST {where} failed: {exc!r}") from exc


def _validate(url: object, event: object, payload: object) -> str:
    """Check the job's arguments; return the URL as safe to show in errors and logs."""
    if not isinstance(url, str):
        raise Discard(f"url must be a string, got {type(url).__name__}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - parsing the port is what validates it
    except ValueError as exc:
        raise Discard(f"url is malformed: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Discard(f"url must be http:// or https:// with a host, got scheme {parts.scheme!r}")
    if parts.username is not None or parts.password is not None:
        # urllib would take "user:password@host" for the host name and fail on every attempt.
        raise Discard("url must not carry credentials (user:password@host)")
    if not isinstance(event, str) or not event or len(event) > MAX_EVENT_CHARS:
        raise Discard(f"event must be a string of 1 to {MAX_EVENT_CHARS} characters")
    if not isinstance(payload, dict):
        raise Discard(f"payload must be a JSON object, got {type(payload).__name__}")
    # Tokens in the query string stay out of job errors and logs.
    return f"{parts.scheme}://{parts.netloc}{parts.path or '/'}"


def _timeout(job: JobContext) -> float:
    left = job.time_left()
    if left is None:
        return DEFAULT_TIMEOUT
    return max(MIN_TIMEOUT, min(DEFAULT_TIMEOUT, left))


def _outcome_for(status: int, headers: Message, excerpt: str, where: str) -> Exception:
    said = f"{where} answered {status}" + (f": {excerpt}" if excerpt else "")
    if status in COME_BACK_LATER:
        delay = retry_after_seconds(headers.get("Retry-After"))
        return Retry(delay, f"{said} (retrying in {delay:g} s)")
    if 300 <= status < 400:
        location = headers.get("Location", "?")
        return Discard(f"{where} redirected ({status}) to {location}; fix the configured URL")
    if 400 <= status < 500 and status not in TRANSIENT_4XX:
        return Discard(f"{said}; the receiver rejected the delivery")
    return DeliveryFailed(said)


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP date), bounded."""
    if value is None:
        return DEFAULT_RETRY_AFTER
    value = value.strip()
    if value.isascii() and value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return DEFAULT_RETRY_AFTER
        if when.tzinfo is None:
            # HTTP dates are always GMT; a zone-less parse means the header broke the format.
            return DEFAULT_RETRY_AFTER
        seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def _excerpt(exc: urllib.error.HTTPError) -> str:
    try:
        text = exc.read(EXCERPT_CHARS * 4).decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException):
        return ""
    text = " ".join(text.split())
    return text[:EXCERPT_CHARS] + ("..." if len(text) > EXCERPT_CHARS else "")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        # Returning None makes urllib raise the 3xx as an HTTPError, handled like any status.
        return None
