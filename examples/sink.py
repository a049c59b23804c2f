"""A webhook receiver for the demo and the tests, deduplicating by Idempotency-Key.

    with WebhookSink(fail_rate=0.2) as sink:
        enqueue(conn, "deliver_webhook", {"url": sink.url, "event": "paid", "payload": {}})
        ...
        sink.wait_for(100, timeout=30)

It runs in the caller's process on a background thread, never inside the supervisor. Besides
the root URL it answers ``POST /status/<code>`` with that status, so tests can ask for a 400 or
a 302 on purpose. ``POST /mail`` is its mail server (the demo's invoice archive is "mailed"
there), and ``GET /mail/<key>`` says whether a mail with that Idempotency-Key arrived: what a
reconcile hook asks after an attempt whose outcome is unknown.

As a program: ``python -m examples.sink --port 8099 [--fail-rate 0.2]`` serves until Ctrl-C or
SIGTERM and logs every request.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import re
import signal
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
STATUS_PATH = re.compile(r"^/status/([1-5][0-9][0-9])$")


class Delivery(NamedTuple):
    key: str
    event: str
    payload: dict[str, Any]


class Received(NamedTuple):
    """One request and the status it got, accepted or not."""

    status: int
    key: str | None
    attempt: str | None


class WebhookSink:
    def __init__(
        self,
        fail_rate: float = 0.0,
        *,
        seed: int = 0,
        retry_after: int = 1,
        delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        """``fail_rate`` of the requests get a 503 with ``Retry-After: retry_after``, drawn
        from a random generator seeded with ``seed``; every request waits ``delay`` seconds
        first, like a slow receiver. ``port`` 0 picks a free one."""
        if not 0.0 <= fail_rate <= 1.0:
            raise ValueError(f"fail_rate must be between 0 and 1, got {fail_rate}")
        self.fail_rate = fail_rate
        self.retry_after = retry_after
        self.delay = delay
        self._rng = random.Random(seed)
        self._changed = threading.Condition()
        self._deliveries: list[Delivery] = []
        self._mails: list[Delivery] = []
        self._received: list[Received] = []
        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self._server.sink = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def deliveries(self) -> list[Delivery]:
        """Every accepted request, duplicates included, in arrival order."""
        with self._changed:
            return list(self._deliveries)

    @property
    def received(self) -> list[Received]:
        """Every request answered, with its status."""
        with self._changed:
            return list(self._received)

    @property
    def mails(self) -> list[Delivery]:
        """Every mail accepted at /mail, duplicates included."""
        with self._changed:
            return list(self._mails)

    def mailed(self, key: str) -> bool:
        with self._changed:
            return any(m.key == key for m in self._mails)

    def unique_deliveries(self) -> list[Delivery]:
        """The first accepted delivery of each Idempotency-Key: what the receiver acted on."""
        with self._changed:
            return list(_first_per_key(self._deliveries).values())

    def wait_for(self, unique: int, timeout: float) -> bool:
        """Wait until ``unique`` distinct deliveries have arrived; False on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: len(_first_per_key(self._deliveries)) >= unique, timeout
            )

    def start(self) -> WebhookSink:
        # A short poll interval so that stop() (which waits for the next poll) is quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="webhook-sink", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> WebhookSink:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _should_fail(self) -> bool:
        with self._changed:
            return self._rng.random() < self.fail_rate

    def _record(self, received: Received, delivery: Delivery | None, mail: bool = False) -> None:
        with self._changed:
            self._received.append(received)
            if delivery is not None:
                (self._mails if mail else self._deliveries).append(delivery)
            self._changed.notify_all()


def _first_per_key(deliveries: list[Delivery]) -> dict[str, Delivery]:
    first: dict[str, Delivery] = {}
    for delivery in deliveries:
        first.setdefault(delivery.key, delivery)
    return first


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    @property
    def sink(self) -> WebhookSink:
        return self.server.sink  # type: ignore[attr-defined,no-any-return]

    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key")
        attempt = self.headers.get("X-Attempt")
        # The body is read before any answer: closing a socket with unread data makes the
        # kernel reset the connection, and the client would see a reset instead of our status.
        body, problem = self._read_body()
        forced = STATUS_PATH.match(self.path)
        if forced:
            self._answer(int(forced.group(1)), key, attempt)
            return
        if self.path not in ("/", "/mail"):
            self._answer(HTTPStatus.NOT_FOUND, key, attempt, "no such endpoint")
            return
        delivery, problem = _parse(key, body) if body is not None else (None, problem)
        if delivery is None:
            self._answer(HTTPStatus.BAD_REQUEST, key, attempt, problem)
            return
        if self.sink.delay:
            time.sleep(self.sink.delay)
        if self.sink._should_fail():
            self._answer(HTTPStatus.SERVICE_UNAVAILABLE, key, attempt, "try again later")
            return
        self._answer(HTTPStatus.OK, key, attempt, delivery=delivery, mail=self.path == "/mail")

    def do_GET(self) -> None:
        if self.path.startswith("/mail/"):
            found = {"delivered": self.sink.mailed(self.path.removeprefix("/mail/"))}
            self._send(HTTPStatus.OK, json.dumps(found).encode(), "application/json")
            return
        summary = {
            "deliveries": len(self.sink.deliveries),
            "unique": len(self.sink.unique_deliveries()),
            "mails": len(self.sink.mails),
        }
        self._send(HTTPStatus.OK, json.dumps(summary).encode(), "application/json")

    def _read_body(self) -> tuple[bytes | None, str]:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return None, "Content-Length header is required"
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            return None, f"body must be at most {MAX_BODY} bytes"
        return self.rfile.read(length), ""

    def _answer(
        self,
        status: int,
        key: str | None,
        attempt: str | None,
        message: str = "",
        delivery: Delivery | None = None,
        mail: bool = False,
    ) -> None:
        status = HTTPStatus(status)
        self.sink._record(Received(status.value, key, attempt), delivery, mail)
        log.info("%s %s key=%s attempt=%s", status.value, status.phrase, key, attempt)
        headers = {}
        if status in (HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.SERVICE_UNAVAILABLE):
            headers["Retry-After"] = str(self.sink.retry_after)
        if 300 <= status < 400:
            headers["Location"] = "/"
        reply = {"ok": 200 <= status < 300, "message": message or status.phrase}
        body = json.dumps(reply).encode()
        self._send(status, body, "application/json", headers)

    def _send(
        self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        # Requests are logged once, in _answer, through logging rather than on stderr.
        pass


def _parse(key: str | None, body: bytes) -> tuple[Delivery | None, str]:
    if not key:
        return None, "Idempotency-Key header is required"
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None, "body is not JSON"
    if not isinstance(document, dict):
        return None, "body must be a JSON object"
    event, payload = document.get("event"), document.get("payload")
    if not isinstance(event, str) or not isinstance(payload, dict):
        return None, 'body needs "event" (string) and "payload" (object)'
    return Delivery(key, event, payload), ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m examples.sink", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    # TERM (from a demo script or a container runtime) stops it like Ctrl-C, with the summary.
    signal.signal(signal.SIGTERM, _interrupt)
    sink = WebhookSink(args.fail_rate, seed=args.seed, host=args.host, port=args.port)
    with sink:
        print(f"webhook sink listening on {sink.url} (fail rate {args.fail_rate}); Ctrl-C stops")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    print(f"{len(sink.deliveries)} deliveries, {len(sink.unique_deliveries())} unique")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
