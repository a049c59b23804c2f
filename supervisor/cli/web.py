"""`pgq-supervisor -c FILE web [--host 127.0.0.1] [--port 9188]`: serve the web dashboard.

A process of its own (the master stays small and thread-free), serving supervisor.web with
uvicorn. The web extra is imported only here, so the core install does not need it. It binds to
127.0.0.1 by default and refuses any other address unless authentication is set.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
from dataclasses import replace

from supervisor.cli.verbs import Context, UsageError, verb
from supervisor.config.model import WebConfig
from supervisor.config.reader import Bad
from supervisor.config.web import host_name, proxy_network
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
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name to answer besides localhost, 127.0.0.1 and [::1] (repeatable; adds "
        "to web.allowed_hosts)",
    )
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="an address or network whose X-Forwarded-Proto/-Host are believed (repeatable; "
        "adds to web.trusted_proxies)",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="refuse every action (or web.read_only: true)"
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
    try:
        exposure = _exposure(ctx)
    except Bad as exc:
        raise UsageError(exc.problem or "bad --allow-host or --trusted-proxy") from None
    app = create_app(ctx.dsn(), config=ctx.config, credentials=credentials, web=exposure)
    proctitle.set_title(f"web -c {ctx.config.path} on {host}:{port}")
    log.info(
        "dashboard on http://%s:%d/ (%s%s; answers %s)",
        host,
        port,
        "authentication required" if credentials.required else "no authentication",
        ", read-only" if exposure.read_only else "",
        ", ".join(["localhost", "127.0.0.1", "[::1]", *exposure.allowed_hosts])
        if exposure.allowed_hosts or not credentials.required
        else "any host name",
    )
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False, server_header=False)
    return MasterExit.OK


def _exposure(ctx: Context) -> WebConfig:
    """The YAML's web: section, with the command line's additions."""
    configured = ctx.config.web
    hosts = [*configured.allowed_hosts]
    for name in ctx.args.allow_host:
        try:
            hosts.append(host_name(name))
        except Bad as exc:
            raise Bad(f"--allow-host {name!r}: {exc.problem}") from None
    proxies = [*configured.trusted_proxies]
    for address in ctx.args.trusted_proxy:
        try:
            proxies.append(proxy_network(address))
        except Bad as exc:
            raise Bad(f"--trusted-proxy {address!r}: {exc.problem}") from None
    return replace(
        configured,
        allowed_hosts=tuple(dict.fromkeys(hosts)),
        trusted_proxies=tuple(dict.fromkeys(proxies)),
        read_only=configured.read_only or ctx.args.read_only,
    )
