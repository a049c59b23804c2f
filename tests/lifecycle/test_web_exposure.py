"""`pgq-supervisor web` as a real process: the host names it answers (--allow-host), its
read-only mode (--read-only), and bad flags refused with exit 2 before it serves anything."""

from __future__ import annotations

import contextlib
import socket
import urllib.error
import urllib.request
from collections.abc import Callable

from tests.lifecycle.harness import Supervisor, wait_for

YAML = """
handlers: {noop: tests.handlers:noop}
pools: {main: {queues: {default: 1}}}
"""


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _status(url: str, host: str) -> int:
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_web_verb_answers_only_loopback_and_allowed_names_and_can_be_read_only(
    supervisor: Callable[..., Supervisor],
) -> None:
    port = _port()
    web = supervisor(
        YAML, args=["web", "--port", str(port), "--allow-host", "Dash.Internal", "--read-only"]
    ).start()
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        with contextlib.suppress(OSError):
            return _status(base + "/static/style.css", "127.0.0.1") == 200
        return False

    wait_for(up, 30, what=f"the dashboard\n{web.log()}")
    assert _status(base + "/", f"localhost:{port}") == 200
    assert _status(base + "/", f"dash.internal:{port}") == 200
    assert _status(base + "/", f"attacker.example:{port}") == 421
    assert _status(base + "/queues/default/pause", f"127.0.0.1:{port}") == 403  # read-only
    assert "read-only" in web.log() and "dash.internal" in web.log()
    web.stop()


def test_a_bad_allow_host_or_trusted_proxy_exits_2(supervisor: Callable[..., Supervisor]) -> None:
    for flag, value in (("--allow-host", "http://x/"), ("--trusted-proxy", "not-an-address")):
        web = supervisor(YAML, args=["web", "--port", str(_port()), flag, value]).start()
        assert web.wait(30) == 2
        assert flag in web.log(), web.log()
