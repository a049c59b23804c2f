"""Browser tests: the real dashboard (`pgq-supervisor web` as a subprocess) in a real headless
Chromium driven by selenium through chromium-driver, beside a real supervisor running real jobs.

They skip when the web extra, selenium, chromium or chromedriver is missing here; with
PGQ_REQUIRE_BROWSER=1 (CI sets it) a missing piece fails them instead. With PGQ_SCREENSHOTS=1
every page a test visits is saved as a PNG under docs/screenshots/.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import os
import shutil
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.commands import ROOT
from tests.lifecycle.conftest import ledger, supervisor  # noqa: F401 - fixtures used here
from tests.lifecycle.harness import Supervisor, wait_for

SCREENSHOTS = ROOT / "docs" / "screenshots"
# Debian's chromium and chromium-driver (apt-get install chromium chromium-driver).
CHROMIUM = ("chromium", "chromium-browser", "google-chrome")
# No network here: these keep Chromium from reaching for it (sync, updates, field trials).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1360,900",
)


def _missing() -> str | None:
    for module in ("selenium", "starlette", "uvicorn", "jinja2", "multipart"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install -e '.[test]')"
    if not any(shutil.which(name) for name in CHROMIUM):
        return "chromium is not installed (apt-get install chromium)"
    if not shutil.which("chromedriver"):
        return "chromedriver is not installed (apt-get install chromium-driver)"
    return None


@pytest.fixture(scope="session")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    missing = _missing()
    if missing:
        if os.environ.get("PGQ_REQUIRE_BROWSER") == "1":
            pytest.fail(f"PGQ_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    # Selenium would otherwise phone home for usage statistics.
    os.environ.setdefault("SE_AVOID_STATS", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = next(str(shutil.which(n)) for n in CHROMIUM if shutil.which(n))
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium')}")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_status(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


class Dashboard:
    """A `pgq-supervisor -c FILE web` process and its base URL."""

    def __init__(self, process: Supervisor, port: int) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"

    def wait_up(self, headers: dict[str, str] | None = None) -> Dashboard:
        def up() -> bool:
            with contextlib.suppress(OSError):
                return http_status(self.url + "/static/style.css", headers) in (200, 401)
            return False

        wait_for(up, 30, what=f"the dashboard at {self.url}\n{self.process.log()}")
        return self


@pytest.fixture
def dashboard(
    supervisor: Callable[..., Supervisor],  # noqa: F811 - the fixture imported above
) -> Callable[..., Dashboard]:
    """Start the dashboard on the test database with this YAML (and environment)."""

    def start(yaml_text: str, extra_env: dict[str, str] | None = None) -> Dashboard:
        port = free_port()
        process = supervisor(yaml_text, args=["web", "--port", str(port)], extra_env=extra_env)
        return Dashboard(process.start(), port)

    return start


def screenshot(driver: Any, name: str) -> None:
    """Saves the whole page as docs/screenshots/NAME.png when PGQ_SCREENSHOTS=1."""
    if os.environ.get("PGQ_SCREENSHOTS") != "1":
        return
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    Path(SCREENSHOTS, f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
