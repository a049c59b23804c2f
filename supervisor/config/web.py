"""The `web:` section: how the dashboard is exposed (web.md: docs/dashboard-security.md).

``allowed_hosts`` are the Host names the dashboard answers besides the loopback ones;
``trusted_proxies`` the addresses (or networks) whose X-Forwarded-Proto and X-Forwarded-Host
are believed; ``read_only`` refuses every action; ``redact`` names argument keys whose values
no page shows.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from yaml.nodes import Node, SequenceNode

from supervisor.config.fields import Section, boolean, described, text
from supervisor.config.model import WebConfig
from supervisor.config.reader import Bad, Reader

WEB_KEYS = ("allowed_hosts", "trusted_proxies", "read_only", "redact")
# A DNS name or an IP address (IPv6 without brackets), without scheme, port or path.
_HOST = re.compile(r"[A-Za-z0-9.:_-]{1,253}")


def web(s: Section) -> WebConfig:
    s.only(*WEB_KEYS)
    return WebConfig(
        allowed_hosts=s.get("allowed_hosts", names(host_name), ()),
        trusted_proxies=s.get("trusted_proxies", names(proxy_network), ()),
        read_only=s.get("read_only", boolean, False),
        redact=s.get("redact", names(lambda v: v), ()),
    )


def host_name(value: str) -> str:
    """A Host name as the operator allows it: lower case, no port (any port is answered)."""
    name = value.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if not _HOST.fullmatch(name) or "/" in name:
        raise Bad("must be a host name or address, like dash.example.com (no scheme, no path)")
    return name


def proxy_network(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value.strip(), strict=False))
    except ValueError:
        raise Bad("must be an IP address or network, like 10.0.0.5 or 10.0.0.0/8") from None


def names(check: Callable[[str], str]) -> Callable[[Reader, Node], tuple[str, ...]]:
    """A list of strings (one string is read as a list of one), each checked."""

    def convert(reader: Reader, node: Node) -> tuple[str, ...]:
        nodes = node.value if isinstance(node, SequenceNode) else [node]
        return tuple(check(text(max_chars=253)(reader, item)) for item in nodes)

    item = {"type": "string", "minLength": 1, "maxLength": 253}
    return described(
        {"anyOf": [item, {"type": "array", "items": item}], "description": "a list of strings"}
    )(convert)
