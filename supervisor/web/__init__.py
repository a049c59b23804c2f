"""The web dashboard (the `web` extra): ``create_app(dsn=...)`` or ``create_app(pool=...)``
returns an ASGI application; ``pgq-supervisor -c FILE web`` serves it."""

from supervisor.web.app import create_app

__all__ = ["create_app"]
