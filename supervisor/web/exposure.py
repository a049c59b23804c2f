"""Which requests the dashboard answers at all: the Host it is reached by, and a proxy's word.

DNS rebinding: a page on attacker.example whose name the attacker then points at 127.0.0.1
talks to a dashboard on the loopback as a page of its own origin; the browser sends
``Host: attacker.example``. So without authentication the dashboard answers only the loopback
names (localhost, 127.0.0.1, [::1], any port) and the names the operator allowed
(``web.allowed_hosts``, ``--allow-host``); with authentication, the allowed names when there
are any, else every name (the credentials are what protects it then).

Behind a TLS-terminating proxy the request reaches us as plain http from the proxy's address:
only from an address in ``web.trusted_proxies`` are X-Forwarded-Proto and X-Forwarded-Host
believed (the last value of each, the one the nearest proxy wrote), so that the scheme and
host the browser used are what the Origin check compares with.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def host_name(host: str) -> str:
    """The name part of a Host header (or an Origin's authority): no port, no brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        return host.partition(":")[0]
    return host


@dataclass(frozen=True)
class Exposure:
    authenticated: bool = False
    allowed_hosts: frozenset[str] = frozenset()
    trusted_proxies: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(default=())

    @classmethod
    def of(
        cls, authenticated: bool, allowed_hosts: Iterable[str], trusted_proxies: Iterable[str]
    ) -> Exposure:
        return cls(
            authenticated,
            frozenset(host_name(h) for h in allowed_hosts),
            tuple(ipaddress.ip_network(p, strict=False) for p in trusted_proxies),
        )

    def host_allowed(self, host: str) -> bool:
        name = host_name(host)
        if name in LOOPBACK_NAMES or name in self.allowed_hosts:
            return True
        return self.authenticated and not self.allowed_hosts

    def trusts(self, peer: str | None) -> bool:
        if not peer or not self.trusted_proxies:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.trusted_proxies)


class ExposureMiddleware:
    """Applies a trusted proxy's X-Forwarded-* to the request, then refuses (421) a request
    whose Host the dashboard does not answer, before any page or action sees it."""

    def __init__(self, app: ASGIApp, exposure: Exposure) -> None:
        self.app = app
        self.exposure = exposure

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        if self.exposure.trusts(client[0] if client else None):
            scope = _forwarded(scope)
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if self.exposure.host_allowed(host):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            f"this dashboard does not answer the host name {host_name(host)!r}: it answers "
            "localhost, 127.0.0.1 and [::1], and the names allowed with web.allowed_hosts or "
            "--allow-host\n",
            status_code=421,
        )
        await response(scope, receive, send)


def _forwarded(scope: Scope) -> Scope:
    headers = dict(scope["headers"])
    proto = _last(headers.get(b"x-forwarded-proto"))
    host = _last(headers.get(b"x-forwarded-host"))
    scope = dict(scope)
    if proto in ("http", "https"):
        scope["scheme"] = proto
    if host:
        kept = [(k, v) for k, v in scope["headers"] if k != b"host"]
        scope["headers"] = [*kept, (b"host", host.encode("latin-1"))]
    client = _last(headers.get(b"x-forwarded-for"))
    if client:  # the browser's address, as the proxy saw it (for the audit log)
        scope["client"] = (client, 0)
    return scope


def _last(value: bytes | None) -> str:
    return value.decode("latin-1").split(",")[-1].strip() if value else ""
