"""`pgq-supervisor -c FILE web [--host 127.0.0.1] [--port 9188]`: serve the web dashboard.

A process of its own (the master stays small and thread-free), serving supervisor.web with
uvicorn. The web extra is imported only here, so the core install does not need it. It binds to
127.0.0.1 by default and refuses any other address unless authentication is set.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging

from supervisor.cli.verbs import Context, UsageError, verb
from supervisor.shared import proctitle
from supervisor.shared.exits import MasterExit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9188

log = logging.getLogger("pgq.web")


def web_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}; any other needs authentication: "
        "PGQ_WEB_USER and PGQ_WEB_PASSWORD, or PGQ_WEB_TOKEN)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )


def is_local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@verb("web", "serve the web dashboard (a separate process; needs the web extra)", web_arguments)
def web(ctx: Context) -> int:
    try:
        import uvicorn

        from supervisor.web import create_app
        from supervisor.web.security import AuthError, Credentials
    except ImportError as exc:
        raise UsageError(
            f"the dashboard needs the web extra ({exc.name} is missing): "
            "pip install 'pgq-supervisor[web]'"
        ) from None
    host, port = ctx.args.host, ctx.args.port
    if not 0 < port < 65536:
        raise UsageError(f"--port must be between 1 and 65535, got {port}")
    try:
        credentials = Credentials.from_env()
    except AuthError as exc:
        raise UsageError(str(exc)) from None
    if not is_local(host) and not credentials.required:
        raise UsageError(
            f"refusing to serve the dashboard on {host} without authentication: set "
            "PGQ_WEB_USER and PGQ_WEB_PASSWORD, or PGQ_WEB_TOKEN (or bind to 127.0.0.1)"
        )
    app = create_app(ctx.dsn(), config=ctx.config, credentials=credentials)
    proctitle.set_title(f"web -c {ctx.config.path} on {host}:{port}")
    log.info(
        "dashboard on http://%s:%d/ (%s)",
        host,
        port,
        "authentication required" if credentials.required else "no authentication: local only",
    )
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False, server_header=False)
    return MasterExit.OK
