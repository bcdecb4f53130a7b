"""Browser-test helpers for the studio (issue 27): the server, a Chromium page signed in through
the form, an axe-core accessibility check and 1440×900 screenshots for docs/studio.md.

A test module binds the fixtures it uses to module names (``page = studio_helpers.page``, as
tests/browser/test_studio_shell.py does). ``page`` fails its test on any console error, page error or CSP
violation seen while it was open.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import RunningServer
from tests.jobs_helpers import served

CHROMIUM = "/usr/bin/chromium"
FLAGS = [  # as tests/browser/test_jupyterlab.py
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1440, "height": 900}
UI_TIMEOUT_MS = 30_000  # a loaded 2-core machine
ROOT = Path(__file__).resolve().parents[2]
AXE = Path(__file__).parent / "vendor" / "axe.min.js"  # axe-core, vendored by scripts/build-studio.sh
SCREENSHOTS = ROOT / "docs" / "studio"
BLOCKING_IMPACTS = ("serious", "critical")
# Reported to the console by the page itself: CSP violations (an init script runs outside the
# page's CSP, so it can listen for them).
REPORT_CSP = """document.addEventListener("securitypolicyviolation", (e) =>
  console.error(`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || "inline"}`));"""

if not Path(CHROMIUM).exists():
    pytest.skip(
        f"\n\n*** BROWSER TESTS SKIPPED: {CHROMIUM} is missing; install it with `apt-get install -y "
        "chromium` (scripts/setup-tests.sh does) ***\n",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="the dev dependency playwright is missing")


@pytest.fixture(scope="module")
def studio_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server for the module's studio tests."""
    yield from served(tmp_path_factory, "studio-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh 1440×900 page; its test fails on any console error, page error or CSP violation."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(UI_TIMEOUT_MS)
    context.add_init_script(REPORT_CSP)
    opened = context.new_page()
    problems: list[str] = []
    expected: set[str] = set()
    opened.studio_expected_failures = expected  # see expect_failed_load

    def on_console(msg: Any) -> None:
        if msg.type == "error" and (msg.location or {}).get("url") not in expected:
            problems.append(f"console {msg.type}: {msg.text} ({(msg.location or {}).get('url')})")

    opened.on("console", on_console)
    opened.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
    try:
        yield opened
    finally:
        context.close()
    assert problems == [], "the page reported errors:\n" + "\n".join(problems)


def expect_failed_load(page: Any, url: str) -> None:
    """A test that visits URL to see an error page (a 404, a 403) expects Chromium's console line
    about it: not counted as a problem."""
    page.studio_expected_failures.add(url)


def sign_in(page: Any, srv: RunningServer, key: str | None = None) -> None:
    """Sign PAGE in through the studio's form (with the admin's key unless KEY) and wait for the
    caller's first workspace's Home."""
    page.goto(f"{srv.endpoint}/studio/signin")
    page.get_by_label("API key").fill(key or srv.api_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/studio/ws/**")


def axe_check(page: Any) -> None:
    """Run axe-core on the page as it is; fail on any serious or critical violation."""
    page.evaluate(AXE.read_text())  # evaluated by the driver, outside the page's CSP
    violations: list[dict[str, Any]] = page.evaluate(
        "async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
    )
    blocking = [v for v in violations if v.get("impact") in BLOCKING_IMPACTS]
    described = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}" for v in blocking
    ]
    assert blocking == [], "axe-core found:\n" + "\n".join(described)


def screenshot(page: Any, name: str) -> Path | None:
    """A 1440×900 PNG of the page as docs/studio/NAME.png, when STUDIO_SCREENSHOTS=1."""
    if os.environ.get("STUDIO_SCREENSHOTS") != "1":
        return None
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


# Every EventSource the page opens, kept in window.eventSources (an init script: before the page's own).
WATCH_EVENT_SOURCES = """(() => {
  const Native = window.EventSource;
  window.eventSources = [];
  window.EventSource = class extends Native {
    constructor(...args) { super(...args); window.eventSources.push(this); }
  };
})();"""


def set_visibility(page: Any, state: str) -> None:
    """Make the page's tab hidden or visible again, as a browser does when the user switches tabs."""
    page.evaluate(
        """(state) => {
        Object.defineProperty(document, "visibilityState", {value: state, configurable: true});
        document.dispatchEvent(new Event("visibilitychange"));
    }""",
        state,
    )


def open_event_sources(page: Any) -> list[str]:
    """The URLs of the page's event streams that are open or connecting."""
    found: list[str] = page.evaluate(
        "window.eventSources.filter((source) => source.readyState !== 2).map((source) => source.url)"
    )
    return found


def confirm(page: Any, yes: str, question: str | None = None) -> None:
    """Accept the studio's confirmation dialog (studio.js's data-confirm): wait for it (asking
    QUESTION, when given), press its YES button and wait for it to close."""
    dialog = page.get_by_role("dialog", name=question) if question else page.get_by_role("dialog")
    dialog.get_by_role("button", name=yes, exact=True).click()
    dialog.wait_for(state="hidden")


def ws_url(srv: RunningServer, *parts: str) -> str:
    """The studio's URL of PARTS in SRV's default workspace."""
    return f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/" + "/".join(parts)


def load_yaml(page: Any, editor: str, doc: dict[str, Any], file_label: str = "Or load a file") -> None:
    """DOC as a .yml file picked at FILE_LABEL (as a user loads one): wait until the EDITOR
    (its accessible name) is up, then until it shows DOC's name."""
    page.get_by_role("textbox", name=editor).wait_for()
    upload = {"name": "doc.yml", "mimeType": "text/yaml", "buffer": yaml.safe_dump(doc).encode()}
    page.get_by_label(file_label).set_input_files(files=[upload])
    page.get_by_role("textbox", name=editor).get_by_text(f"name: {doc['name']}").wait_for()


def requests_after_load(page: Any) -> list[str]:
    """The URLs of data the page requests from now on (a live page reads no JSON or HTML again: its
    streams bring what changed). The studio's static files are left out: a module the page imports
    when it needs it (the editor's bundle) may be fetched after the load on a slow machine."""
    seen: list[str] = []
    page.on("request", lambda request: None if "/studio/static/" in request.url else seen.append(request.url))
    return seen
