"""Prometheus metrics and health checks, served by the master's own loop.

A tiny HTTP server on non-blocking sockets registered in the master's selector: no thread (the
master forks), no library (the core's dependencies are fixed). The loop must never wait on a
client, so every socket is non-blocking, a request is capped in size, a connection that has not
been answered within IDLE_TIMEOUT is closed by a periodic sweep, and at most MAX_CONNECTIONS
are open (a new one pushes out the oldest). Each request gets one response, then the
connection is closed.

Endpoints: /metrics (text exposition 0.0.4), /livez (the loop answered: it runs), /readyz (every
pool's children are up and the database answers; 503 with the reasons otherwise). Whatever the
doctor's horizon check finds (a snapshot held too long, a slot keeping WAL) is added to /readyz's
body, one ``doctor:`` line each, without changing its status: another application's forgotten
transaction is no reason to take this supervisor out of a rollout.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from supervisor.doctor.horizon import Horizon
from supervisor.observability import families
from supervisor.observability.exposition import CONTENT_TYPE, render
from supervisor.observability.families import PoolTotals, QueueSnapshot
from supervisor.observability.view import MasterView
from supervisor.queue.limits import LimitUse, TenantBacklog
from supervisor.queue.maintenance import QueueStats
from supervisor.shared.board import Board

if TYPE_CHECKING:
    from supervisor.config import MetricsConfig

log = logging.getLogger("pgq.metrics")

STATS_INTERVAL = 5.0
# Queue figures older than this many refresh intervals make /readyz fail: the refresh keeps
# failing.
STATS_STALE_INTERVALS = 3
MAX_REQUEST = 8192
IDLE_TIMEOUT = 5.0
MAX_CONNECTIONS = 32
# Connections accepted per wake-up, so a flood of them cannot hold the loop.
ACCEPT_BATCH = 16
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"


class MetricsError(Exception):
    """The metrics endpoint cannot listen (port in use, bad address)."""


class _Connection:
    """One client: what it sent so far, then what is left to send it."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.deadline = deadline
        self.received = bytearray()
        self.outgoing: memoryview | None = None


def _listen(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise MetricsError(f"metrics.host {host!r} cannot be resolved: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    try:
        # SO_REUSEADDR (set by create_server) lets a restart bind while old connections sit in
        # TIME_WAIT; Linux still refuses a port another socket listens on.
        sock = socket.create_server(address, family=family, backlog=64)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise MetricsError(f"metrics.port {port} is in use") from None
        raise MetricsError(f"metrics: cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


class MetricsServer:
    def __init__(self, config: MetricsConfig) -> None:
        assert config.port is not None
        self.config = config
        self.listener: socket.socket | None = _listen(config.host, config.port)
        self.listening = False
        self.view: Callable[[], MasterView] | None = None
        self.selector: selectors.BaseSelector | None = None
        self.connections: dict[int, _Connection] = {}
        # Counters and histograms of reaped children, per pool: added to the live boards'.
        self.absorbed: dict[str, PoolTotals] = {}
        self.snapshot: QueueSnapshot | None = None
        self.stats_interval = STATS_INTERVAL
        self.horizon: Horizon | None = None
        self.limit_uses: list[LimitUse] = []
        self.tenants: list[TenantBacklog] = []
        self.kind_costs: list[tuple[str, int, float]] = []
        self.tenant_costs: list[tuple[str, str, float]] = []

    @property
    def address(self) -> tuple[str, int]:
        assert self.listener is not None
        host, port = self.listener.getsockname()[:2]
        return host, port

    # -- what the master calls ---------------------------------------------------------------

    def attach(self, view: Callable[[], MasterView], selector: selectors.BaseSelector) -> None:
        """Start serving; ``view`` gives the master's picture at each scrape."""
        self.view, self.selector = view, selector
        self._listen_again()
        log.info("metrics on http://%s:%s/metrics", *self.address)

    def queue_stats_read(self, queues: list[QueueStats], taken: float, interval: float) -> None:
        """A fresh snapshot of the queue table, with the limits' use and the busiest tenants
        read just before it; the next is due in ``interval`` seconds."""
        self.snapshot = QueueSnapshot(
            queues, taken, self.limit_uses, self.tenants, self.kind_costs, self.tenant_costs
        )
        self.stats_interval = interval

    def limits_read(self, uses: list[LimitUse]) -> None:
        """Each queue limit in force and its use (pgq.queue_limits)."""
        self.limit_uses = uses

    def tenants_read(self, tenants: list[TenantBacklog]) -> None:
        """The ten busiest tenants (most jobs due now)."""
        self.tenants = tenants

    def costs_read(
        self, kinds: list[tuple[str, int, float]], tenants: list[tuple[str, str, float]]
    ) -> None:
        """What attempts cost over the last hour, per kind and per queue and tenant."""
        self.kind_costs, self.tenant_costs = kinds, tenants

    def horizon_read(self, horizon: Horizon) -> None:
        """The doctor's latest reading of the xmin horizon."""
        self.horizon = horizon

    def filenos(self) -> list[int]:
        fds = [self.listener.fileno()] if self.listener is not None else []
        return fds + list(self.connections)

    def absorb(self, pool: str, board: Board) -> None:
        """Keep the counters of a reaped child, so the pool's totals never go down."""
        self.absorbed.setdefault(pool, PoolTotals()).add(board)

    def handle(self, key: selectors.SelectorKey) -> None:
        data = key.data
        if data is self:
            self._accept()
        elif isinstance(data, _Connection):
            try:
                if data.outgoing is None:
                    self._read(data)
                else:
                    self._write(data)
            except Exception:
                log.exception("metrics: serving a request failed; dropping the connection")
                self._close(data)

    def expire(self, now: float) -> int:
        """Close connections that had their time; resume accepting after a pause. How many
        it closed."""
        expired = [c for c in self.connections.values() if now >= c.deadline]
        for conn in expired:
            self._close(conn)
        if not self.listening:
            self._listen_again()
        return len(expired)

    def close(self) -> None:
        for conn in list(self.connections.values()):
            self._close(conn)
        if self.listener is not None:
            self._stop_listening()
            self.listener.close()
            self.listener = None

    # -- sockets -------------------------------------------------------------------------------

    def _listen_again(self) -> None:
        if self.selector is not None and self.listener is not None and not self.listening:
            self.selector.register(self.listener, selectors.EVENT_READ, self)
            self.listening = True

    def _stop_listening(self) -> None:
        if self.selector is not None and self.listening:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(self.listener)  # type: ignore[arg-type]
        self.listening = False

    def _accept(self) -> None:
        assert self.listener is not None and self.selector is not None
        for _ in range(ACCEPT_BATCH):
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors, say: the listener stays readable, and the loop would spin
                # on it. Stop listening until the next sweep.
                log.warning("metrics: cannot accept a connection: %s; pausing for 1s", exc)
                self._stop_listening()
                return
            sock.setblocking(False)
            if len(self.connections) >= MAX_CONNECTIONS:
                # Push out the oldest connection still waiting for its request: a client that
                # never sends one must not lock the scraper out.
                oldest = min(
                    self.connections.values(), key=lambda c: (c.outgoing is not None, c.deadline)
                )
                self._close(oldest)
            conn = _Connection(sock, time.monotonic() + IDLE_TIMEOUT)
            self.connections[conn.fd] = conn
            self.selector.register(sock, selectors.EVENT_READ, conn)

    def _read(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not data:
            self._close(conn)
            return
        conn.received += data
        end = _end_of_head(conn.received)
        if end is None:
            if len(conn.received) > MAX_REQUEST:
                self._respond(conn, 431, _TEXT, b"request too large\n")
            return
        head = bytes(conn.received[:end])
        status, content_type, body, head_only = self._route(head)
        self._respond(conn, status, content_type, body, head_only=head_only)

    def _respond(
        self,
        conn: _Connection,
        status: int,
        content_type: str,
        body: bytes,
        head_only: bool = False,
    ) -> None:
        assert self.selector is not None
        header = (
            f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
            f"Content-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Cache-Control: no-store\r\n"
            "Connection: close\r\n\r\n"
        ).encode("ascii")
        conn.outgoing = memoryview(header if head_only else header + body)
        self.selector.modify(conn.sock, selectors.EVENT_WRITE, conn)
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        assert conn.outgoing is not None
        try:
            sent = conn.sock.send(conn.outgoing)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        conn.outgoing = conn.outgoing[sent:]
        # A client that reads is not idle: a response larger than the socket buffers may take
        # a while. One that stops reading is cut off after IDLE_TIMEOUT.
        conn.deadline = time.monotonic() + IDLE_TIMEOUT
        if not conn.outgoing:
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        self.connections.pop(conn.fd, None)
        if self.selector is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)
        with contextlib.suppress(OSError):
            # shutdown sends the FIN even while a just-forked child still holds a copy of the
            # descriptor; reading what is left avoids a reset that could discard the response.
            conn.sock.shutdown(socket.SHUT_WR)
            for _ in range(8):
                if not conn.sock.recv(65536):
                    break
        conn.sock.close()

    # -- requests ------------------------------------------------------------------------------

    def _route(self, head: bytes) -> tuple[int, str, bytes, bool]:
        """(status, content type, body, send headers only) for one request."""
        parts = head.split(b"\n", 1)[0].rstrip(b"\r").decode("latin-1").split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return 400, _TEXT, b"bad request\n", False
        method, target = parts[0], parts[1]
        if method not in ("GET", "HEAD"):
            return 405, _TEXT, b"only GET and HEAD\n", False
        head_only = method == "HEAD"
        path = target.split("?", 1)[0]
        if path == "/metrics":
            try:
                body = self.exposition().encode("utf-8")
            except Exception:
                log.exception("metrics: building the exposition failed")
                return 500, _TEXT, b"metrics failed; see the supervisor's log\n", head_only
            return 200, CONTENT_TYPE, body, head_only
        if path == "/livez":
            return 200, _TEXT, b"ok\n", head_only
        if path == "/readyz":
            reasons = self.not_ready()
            notes = "".join(f"{line}\n" for line in families.doctor_notes(self.horizon))
            if reasons:
                body = "; ".join(reasons) + "\n" + notes
                return 503, _TEXT, body.encode("utf-8"), head_only
            return 200, _TEXT, ("ready\n" + notes).encode("utf-8"), head_only
        return 404, _TEXT, b"not found: try /metrics, /livez or /readyz\n", head_only

    def exposition(self) -> str:
        assert self.view is not None
        return render(
            families.families(
                self.view(), self.absorbed, self.snapshot, time.monotonic(), self.horizon
            )
        )

    def not_ready(self) -> list[str]:
        assert self.view is not None
        return families.readiness(
            self.view(),
            self.snapshot,
            time.monotonic(),
            STATS_STALE_INTERVALS * self.stats_interval,
        )


def _end_of_head(data: bytearray) -> int | None:
    """Where the request's header block ends (a blank line), or None before it arrived."""
    ends = [i for i in (data.find(b"\r\n\r\n"), data.find(b"\n\n")) if i >= 0]
    return min(ends) if ends else None
