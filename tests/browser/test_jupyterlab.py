"""Acceptance (I2): a person signs in with a browser, opens JupyterLab through cloudlet, creates a
notebook, runs a cell and sees its output; a request without credentials is refused.

Headless Chromium from the distribution (``/usr/bin/chromium``, installed by scripts/setup-tests.sh)
driven by Playwright for Python. Playwright's own browser download is never used.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import create_instance
from tests.jobs_helpers import served

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
UI_TIMEOUT_MS = 120_000  # a loaded 2-core machine: JupyterLab's first load and a kernel start

if not Path(CHROMIUM).exists():
    pytest.skip(
        f"\n\n*** BROWSER TESTS SKIPPED: {CHROMIUM} is missing; install it with `apt-get install -y "
        "chromium` (scripts/setup-tests.sh does) ***\n",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="the dev dependency playwright is missing")


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "browser")


@pytest.fixture(scope="module")
def lab(srv: RunningServer) -> dict[str, Any]:
    with srv.client() as api:
        return create_instance(api, srv, "lab1")


@pytest.fixture
def page() -> Iterator[Any]:
    """A fresh profile each time (Playwright makes it; it refuses a --user-data-dir flag)."""
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield browser.new_context().new_page()
        finally:
            browser.close()


def test_sign_in_open_jupyterlab_and_run_a_cell(srv: RunningServer, lab: dict[str, Any], page: Any) -> None:
    url = next(s["endpoint_uri"] for s in lab["services"] if s["display_name"] == "Jupyter Lab")
    first = page.goto(url)
    assert first is not None and first.status == 401  # not signed in: the sign-in form, refused
    page.fill("input[name=api_key]", srv.api_key)
    page.click("button[type=submit]")
    page.wait_for_url(url, timeout=UI_TIMEOUT_MS)

    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=UI_TIMEOUT_MS)
    # The kernel's WebSocket runs through the proxy: wait until the kernel says it is idle.
    page.get_by_text("Python 3 (ipykernel) | Idle").wait_for(timeout=UI_TIMEOUT_MS)
    editor = page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
    editor.click(timeout=UI_TIMEOUT_MS)
    editor.type("print(6*7)")
    page.keyboard.press("Shift+Enter")
    output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
    output.wait_for(timeout=UI_TIMEOUT_MS)
    assert output.inner_text().strip() == "42"


def test_a_request_without_credentials_is_refused(srv: RunningServer, lab: dict[str, Any]) -> None:
    url = srv.endpoint + "/instances/lab1/jupyterlab/lab"
    assert httpx.get(url).status_code == 401
    api = httpx.get(srv.endpoint + "/instances/lab1/jupyterlab/api/contents")
    assert api.status_code == 401
