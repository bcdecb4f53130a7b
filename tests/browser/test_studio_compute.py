"""The studio's Compute and Quota pages in Chromium (issue 27): a cluster from the form (the size
picker greys out a size beyond quota), an instance from YAML, its JupyterLab opened in one click
from the studio and a cell run, another user refused that JupyterLab, the quota page; axe-core on
each page, hostile strings shown as text, the keyboard reaching the main actions; a cluster's node
and a list's row change by their streams, with nothing polled."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.browser import studio_helpers
from tests.browser.studio_helpers import (
    VIEWPORT,
    WATCH_EVENT_SOURCES,
    axe_check,
    expect_failed_load,
    open_event_sources,
    screenshot,
    set_visibility,
    sign_in,
)
from tests.conftest import RunningServer
from tests.instance_helpers import OP_TIMEOUT_S, new_user
from tests.jobs_helpers import wait_until

# The helpers' fixtures, used by name.
studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
XSS_IMG = "<img src=x onerror=console.error(1)>"
XSS_SCRIPT = "</script><script>console.error(2)</script>"
HOSTILE = XSS_IMG + XSS_SCRIPT
LAB_TIMEOUT_MS = 120_000  # JupyterLab's first load and a kernel start on a loaded 2-core machine
FAMILY = "standardDSv2Family"


def ws_url(srv: RunningServer, *parts: str) -> str:
    return f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/" + "/".join(parts)


def tab_until(page: Any, text: str, presses: int = 40) -> bool:
    """Whether Tab reaches an element whose text is TEXT (the keyboard alone)."""
    for _ in range(presses):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim()") == text:
            return True
    return False


def load_yaml(page: Any, doc: dict[str, Any]) -> None:
    """DOC as a file loaded into the page's YAML editor (as a user picks a .yml file)."""
    text = yaml.safe_dump(doc)
    page.get_by_role("textbox", name="Compute YAML").wait_for()  # the editor is up
    upload = {"name": "compute.yml", "mimeType": "text/yaml", "buffer": text.encode()}
    page.get_by_label("Or load a file").set_input_files(files=[upload])
    page.get_by_role("textbox", name="Compute YAML").get_by_text(f"name: {doc['name']}").wait_for()


def test_create_a_cluster_from_the_form_with_the_size_picker(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    with srv.client() as api:  # 10 cores: Standard_DS5_v2 (16) cannot fit
        quota = f"/api/v1/subscriptions/{srv.subscription_id}/locations/local/quotas/{FAMILY}"
        assert api.put(quota, json={"limit": 10}).status_code == 200
    sign_in(page, srv)
    page.goto(ws_url(srv, "compute") + "?tab=clusters")
    assert tab_until(page, "+ New")
    page.keyboard.press("Enter")
    page.wait_for_url("**/compute/_new?type=amlcompute")
    assert page.get_by_role("radio", name="Standard_DS5_v2").is_disabled()
    big = page.locator("tr", has=page.get_by_role("radio", name="Standard_DS5_v2"))
    assert big.get_by_text("needs 16 cores; 10 left in standardDSv2Family").is_visible()
    assert page.get_by_role("radio", name="Standard_DS3_v2").is_enabled()
    page.get_by_label("Name", exact=True).fill("web-cluster")
    page.get_by_label("Maximum nodes").fill("3")
    page.get_by_label("Description").fill(HOSTILE)
    page.get_by_role("radio", name="Standard_DS3_v2").check()
    big.scroll_into_view_if_needed()  # the greyed-out size in the picker's view
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "compute-create")
    axe_check(page)
    page.get_by_role("button", name="Create", exact=True).click()
    page.wait_for_url("**/compute/web-cluster?op=*")
    page.get_by_role("status").get_by_text("Succeeded").wait_for(timeout=OP_TIMEOUT_S * 1000)
    assert page.get_by_text(HOSTILE).first.is_visible()  # the description, as text
    page.get_by_role("link", name="Nodes").click()
    page.wait_for_url("**/compute/web-cluster?tab=nodes")
    assert page.get_by_text("steady at 0 nodes").is_visible()
    axe_check(page)

    # A validation error is shown at its field, its hostile text escaped.
    page.goto(ws_url(srv, "compute", "_new"))
    expect_failed_load(page, ws_url(srv, "compute", "_yaml"))  # a 400: Chromium logs it
    load_yaml(page, {"name": "bad-size", "type": "amlcompute", "size": HOSTILE})
    page.get_by_role("button", name="Create from YAML").click()
    page.locator("#e-yaml").wait_for()
    assert XSS_IMG in page.locator("#e-yaml").inner_text()
    axe_check(page)


def test_an_instance_from_yaml_opens_jupyterlab_in_one_click(
    studio_srv: RunningServer, page: Any, browser: Any
) -> None:
    srv = studio_srv
    doc = {
        "name": "lab-inst",
        "type": "computeinstance",
        "size": "Standard_DS3_v2",
        "description": HOSTILE,
        "tags": {XSS_IMG: XSS_SCRIPT},
        "idle_time_before_shutdown_minutes": 60,
    }
    sign_in(page, srv)
    page.goto(ws_url(srv, "compute", "_new"))
    load_yaml(page, doc)
    page.get_by_role("button", name="Create from YAML").click()
    page.wait_for_url("**/compute/lab-inst?op=*")
    # The page updates itself: the operation ends and the apps appear without a reload.
    page.get_by_role("status").get_by_text("Succeeded").wait_for(timeout=OP_TIMEOUT_S * 1000)
    page.reload()
    assert page.get_by_role("button", name="Jupyter Lab").is_visible()
    assert page.get_by_text(f"{XSS_IMG}: {XSS_SCRIPT}").is_visible()  # a tag, as text
    axe_check(page)
    page.goto(ws_url(srv, "compute") + "?tab=instances")
    assert page.get_by_role("link", name="lab-inst").is_visible()
    screenshot(page, "compute-list")
    axe_check(page)

    # JupyterLab's own page logs to the console: a context of its own, signed in to the studio only.
    lab = browser.new_context(viewport=VIEWPORT)
    try:
        tab = lab.new_page()
        tab.set_default_timeout(LAB_TIMEOUT_MS)
        sign_in(tab, srv)
        tab.goto(ws_url(srv, "compute", "lab-inst"))
        tab.get_by_role("button", name="Jupyter Lab").click()  # one click: no second sign-in
        tab.wait_for_url("**/instances/lab-inst/jupyterlab/lab**")
        tab.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
        tab.get_by_text("Python 3 (ipykernel) | Idle").wait_for()
        editor = tab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
        editor.click()
        editor.type("print(6*7)")
        tab.keyboard.press("Shift+Enter")
        output = tab.locator(".jp-NotebookPanel .jp-OutputArea-output").first
        output.wait_for()
        assert output.inner_text().strip() == "42"
    finally:
        lab.close()

    # Another user (a Contributor) sees no app link, and the proxy refuses them.
    with srv.client() as api:
        key = new_user(api, srv, "other-user", "Contributor")
    other = browser.new_context(viewport=VIEWPORT)
    try:
        tab = other.new_page()
        sign_in(tab, srv, key)
        tab.goto(ws_url(srv, "compute", "lab-inst"))
        assert tab.get_by_text("Only the owner, admin, may open").is_visible()
        assert tab.get_by_role("button", name="Jupyter Lab").count() == 0
        assert tab.get_by_role("button", name="Stop").count() == 0  # only its owner drives it
        tab.goto(ws_url(srv, "compute", "lab-inst", "open", "jupyterlab"))  # a page with the button
        axe_check(tab)
        with tab.expect_navigation() as navigation:
            tab.get_by_role("button", name="Open Jupyter Lab").click()  # it posts; the proxy says no
        assert navigation.value is not None and navigation.value.status == 403
    finally:
        other.close()


def test_the_quota_page(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    sign_in(page, srv)
    page.goto(ws_url(srv, "quota"))
    row = page.locator("tr", has=page.get_by_text(FAMILY, exact=True))
    assert row.locator(".limit").inner_text() == "10"
    assert row.locator(".used").inner_text() == "4"  # lab-inst (the cluster is at zero)
    assert row.get_by_text("lab-inst").is_visible()
    screenshot(page, "quota")
    axe_check(page)
    row.get_by_label(f"New limit for {FAMILY} in local").fill("24")
    row.get_by_role("button", name="Set").click()
    page.wait_for_load_state()
    assert page.locator("tr", has=page.get_by_text(FAMILY, exact=True)).locator(".limit").inner_text() == "24"


def test_a_node_appears_on_the_nodes_tab_without_a_reload(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    sign_in(page, srv)
    page.goto(ws_url(srv, "compute", "web-cluster") + "?tab=nodes")
    assert page.get_by_text("No nodes: the cluster is at zero").is_visible()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    with srv.client() as api:  # min_instances 1: the autoscaler starts a node
        scaled = api.patch(f"{srv.ws_path}/computes/web-cluster", json={"min_instances": 1})
        assert scaled.status_code == 200, scaled.text
    nodes = page.get_by_role("region", name="Nodes")
    nodes.get_by_text("Idle").or_(nodes.get_by_text("Running")).first.wait_for(timeout=OP_TIMEOUT_S * 1000)
    screenshot(page, "cluster-nodes")
    axe_check(page)
    # The state came by the page's stream: nothing polled (no "/status" read), no reconnect.
    assert not [url for url in requested if "/compute/" in url], requested

    # The clusters list: a change reaches its row without a reload; the hostile description
    # swapped in with it stays text (the page fixture fails on the console.error it would run).
    page.add_init_script(WATCH_EVENT_SOURCES)
    page.goto(ws_url(srv, "compute") + "?tab=clusters")
    row = page.locator("#compute-rows tr", has=page.get_by_role("link", name="web-cluster"))
    row.wait_for()
    wait_until(lambda: len(open_event_sources(page)) == 1, 10, "the list's stream")
    set_visibility(page, "hidden")  # a hidden tab holds no connection; shown again, it reconnects
    wait_until(lambda: open_event_sources(page) == [], 10, "the stream closed")
    set_visibility(page, "visible")
    wait_until(lambda: len(open_event_sources(page)) == 1, 10, "the stream again")
    requested.clear()
    with srv.client() as api:
        scaled = api.patch(f"{srv.ws_path}/computes/web-cluster", json={"max_instances": 4})
        assert scaled.status_code == 200, scaled.text
    row.get_by_text(re.compile(r"/ 1 / 4$")).wait_for()
    assert row.get_by_text(HOSTILE).is_visible()
    screenshot(page, "compute-list-live")
    assert not [url for url in requested if "/compute" in url], requested
