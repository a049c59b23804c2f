"""Who may see the dashboard, and proof that a form was posted from it.

Authentication is HTTP Basic (a user and password) or a bearer token, from the environment:
``PGQ_WEB_USER`` with ``PGQ_WEB_PASSWORD``, and/or ``PGQ_WEB_TOKEN`` (also accepted as the Basic
password, so a browser can use it). Cross-site request forgery is stopped by a double-submit
token: a random value in a SameSite=Strict cookie that every form repeats in a hidden field; a
POST whose field does not match the cookie, or whose Origin is another site, is refused.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import Any

from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CSRF_COOKIE = "pgq_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


class AuthError(ValueError):
    """The authentication settings are unusable (said before anything is served)."""


@dataclass(frozen=True)
class Credentials:
    user: str | None = None
    password: str | None = None
    token: str | None = None

    @property
    def required(self) -> bool:
        return bool(self.password or self.token)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Credentials:
        env = os.environ if environ is None else environ
        found = cls(
            user=env.get("PGQ_WEB_USER") or None,
            password=env.get("PGQ_WEB_PASSWORD") or None,
            token=env.get("PGQ_WEB_TOKEN") or None,
        )
        if bool(found.user) != bool(found.password):
            raise AuthError("set both PGQ_WEB_USER and PGQ_WEB_PASSWORD, or neither")
        return found

    def accepts(self, authorization: str) -> bool:
        scheme, _, value = authorization.partition(" ")
        value = value.strip()
        if scheme.lower() == "bearer":
            return self._equal(self.token, value)
        if scheme.lower() != "basic":
            return False
        try:
            user, _, password = base64.b64decode(value, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if self._equal(self.token, password):
            return True
        return self._equal(self.user, user) & self._equal(self.password, password)

    def user_of(self, authorization: str) -> str:
        """The name to record for accepted credentials."""
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(value.strip()).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return "token"
            if not self._equal(self.token, password):
                return user
        return "token"

    @staticmethod
    def _equal(expected: str | None, given: str) -> bool:
        # Constant-time, so the time taken says nothing about how much of a secret matched.
        return expected is not None and hmac.compare_digest(expected.encode(), given.encode())


class AuthMiddleware:
    """Refuses every request without valid credentials (401), when credentials are set."""

    def __init__(self, app: ASGIApp, credentials: Credentials) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.credentials.required:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"").decode("latin-1")
        if given and self.credentials.accepts(given):
            # Who acts, for the audit log: the Basic user, or "token".
            scope.setdefault("state", {})["who"] = self.credentials.user_of(given)
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "authentication required\n",
            status_code=401,
            headers={"WWW-Authenticate": 'Basic realm="pgq-supervisor", charset="UTF-8"'},
        )
        await response(scope, receive, send)


class CsrfCookieMiddleware:
    """Gives every visitor a CSRF token (a cookie) and puts it in scope["state"] for forms."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cookie = SimpleCookie()
        cookie.load(dict(scope["headers"]).get(b"cookie", b"").decode("latin-1"))
        token = cookie[CSRF_COOKIE].value if CSRF_COOKIE in cookie else ""
        fresh = len(token) < 32
        if fresh:
            token = secrets.token_urlsafe(32)
        scope.setdefault("state", {})["csrf"] = token

        async def send_with_cookie(message: Message) -> None:
            if fresh and message["type"] == "http.response.start":
                value = f"{CSRF_COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
                message["headers"] = [*message.get("headers", []), (b"set-cookie", value.encode())]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def csrf_problem(
    request: Request, form: Mapping[str, Any], allowed: Callable[[str], bool]
) -> str | None:
    """Why this POST must be refused, or None when it carries the token it was given.

    The Origin must be the dashboard itself as the browser reached it: the scheme and Host of
    the request (a trusted proxy's, when behind one), and a host name in the allowed set
    (``allowed``), never merely whatever Host the request carries."""
    origin = request.headers.get("origin")
    if origin and origin != "null":
        scheme, _, authority = origin.partition("://")
        host = request.headers.get("host", "")
        if (
            scheme.lower() != request.url.scheme
            or authority.lower() != host.lower()
            or not allowed(authority)
        ):
            return f"the request came from another site ({origin})"
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = str(form.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER) or "")
    if not cookie or not given:
        return "the form's anti-forgery token is missing (reload the page and try again)"
    if not hmac.compare_digest(cookie.encode(), given.encode()):
        return "the form's anti-forgery token does not match (reload the page and try again)"
    return None
