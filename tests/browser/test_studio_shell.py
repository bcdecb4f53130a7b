"""The studio's shell in Chromium (issue 27): sign in through the form, Home, the workspace
picker, accessibility (axe-core, the keyboard), sign out; no console error or CSP violation."""

from __future__ import annotations

from typing import Any

from tests.browser import studio_helpers
from tests.browser.studio_helpers import axe_check, expect_failed_load, screenshot, sign_in
from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, submit

# The helpers' fixtures, used by name.
studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
HOSTILE = "<img src=x onerror=console.error('xss')></script><script>console.error('xss')</script>"


def test_sign_in_see_home_switch_workspace_and_sign_out(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    with srv.client() as api:
        team = f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/research/workspaces/vision"
        assert api.put(team, json={}).status_code in (200, 201)
        cluster = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, "cpu-cluster", cluster)
        # A hostile display name shows as text (a script or handler would log to the console,
        # or trip the CSP: either fails the page fixture).
        job = {"command": "echo hello", "compute": "azureml:cpu-cluster", "display_name": HOSTILE}
        submit(api, srv, "hello-job", job)

    page.goto(f"{srv.endpoint}/studio/")
    page.wait_for_url("**/studio/signin**")
    screenshot(page, "signin")
    axe_check(page)
    sign_in(page, srv)
    assert page.get_by_role("heading", level=1).inner_text() == "default"
    assert page.get_by_role("heading", name="Recent jobs").is_visible()
    assert page.get_by_text(HOSTILE).is_visible()
    assert page.get_by_role("region", name="Compute").get_by_text("cpu-cluster").is_visible()
    assert page.get_by_role("navigation", name="Studio").get_by_role("link", name="Home").is_visible()
    screenshot(page, "home")
    axe_check(page)

    page.locator("details.picker summary").click()
    axe_check(page)  # the open menu too
    page.get_by_role("link", name="vision").click()
    page.wait_for_url("**/research/vision/")
    assert page.get_by_role("heading", level=1).inner_text() == "vision"

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/studio/signin")
    page.goto(f"{srv.endpoint}/studio/")
    page.wait_for_url("**/studio/signin**")  # the session is gone


def test_a_jobs_studio_link_survives_sign_in(studio_srv: RunningServer, page: Any, browser: Any) -> None:
    """The job view's Studio link (what ``studio_url`` and ``job show --web`` give), opened signed
    out: the sign-in form, then that job's page, not Home; a one-time link made for the page
    (``--web`` where there is a display) lands there too."""
    srv = studio_srv
    with srv.client() as api:
        submit(api, srv, "deep-link-job", {"command": "echo deep-link", "compute": "local"})
        link = api.get(f"{srv.ws_path}/jobs/deep-link-job").json()["services"]["Studio"]["endpoint"]
        path = link.removeprefix(srv.endpoint)
        one_time = api.post("/api/v1/studio/signin-links", json={"next": path}).json()["url"]
    page.goto(link)
    page.wait_for_url("**/studio/signin?next=**")
    page.get_by_label("API key").fill(srv.api_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(link)
    assert page.get_by_role("heading", level=1).inner_text() == "deep-link-job"
    assert page.get_by_text("echo deep-link").first.is_visible()
    screenshot(page, "deep-link-job")

    fresh = browser.new_context(viewport=studio_helpers.VIEWPORT)  # signed out
    try:
        other = fresh.new_page()
        other.goto(one_time)
        other.wait_for_url(link)
        assert other.get_by_role("heading", level=1).inner_text() == "deep-link-job"
    finally:
        fresh.close()


def test_the_keyboard_reaches_the_navigation_and_sign_out(studio_srv: RunningServer, page: Any) -> None:
    sign_in(page, studio_srv)
    reached: list[str] = []
    for _ in range(12):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.textContent.trim()"))
    assert "Home" in reached and "Sign out" in reached, reached
    assert reached[0] == "Skip to content"
    page.keyboard.press("Shift+Tab")  # and back, to Sign out
    while page.evaluate("document.activeElement.textContent.trim()") != "Sign out":
        page.keyboard.press("Shift+Tab")
    page.keyboard.press("Enter")
    page.wait_for_url("**/studio/signin")


def test_unknown_pages_and_hidden_workspaces_are_studio_pages(studio_srv: RunningServer, page: Any) -> None:
    sign_in(page, studio_srv)
    hidden = f"{studio_srv.endpoint}/studio/ws/nosub/norg/nows/"
    expect_failed_load(page, hidden)
    response = page.goto(hidden)
    assert response is not None and response.status == 404
    assert page.get_by_role("heading", name="Not found").is_visible()
    assert page.get_by_role("button", name="Sign out").is_visible()  # in the shell
    axe_check(page)
    screenshot(page, "not-found")


VENDORED = """async () => {
  const {yamlEditor} = await import("/studio/static/editor.js");
  const main = document.querySelector("main");
  const editor = yamlEditor(main.appendChild(document.createElement("div")), "command: echo hi\\n");
  const {uPlot} = await import("/studio/static/vendor/uplot.min.js");
  const options = {width: 400, height: 200, series: [{}, {label: "loss"}]};
  const chart = new uPlot(options, [[1, 2, 3], [3, 2, 1]], main);
  const {dagre} = await import("/studio/static/vendor/dagre.min.js");
  const g = new dagre.graphlib.Graph().setGraph({}).setDefaultEdgeLabel(() => ({}));
  g.setNode("a", {width: 50, height: 20}); g.setNode("b", {width: 50, height: 20}); g.setEdge("a", "b");
  dagre.layout(g);
  return {
    htmx: window.htmx.version,
    editorStyled: getComputedStyle(editor.dom).display === "flex",
    chart: chart.root.querySelectorAll("canvas").length,
    laidOut: g.node("b").y > g.node("a").y,
  };
}"""


def test_the_vendored_bundles_work_under_the_csp(studio_srv: RunningServer, page: Any) -> None:
    """The editor, the chart and the graph layout that part 2's pages import run under the
    studio's CSP (no inline style or script): a violation fails the page fixture."""
    sign_in(page, studio_srv)
    found = page.evaluate(VENDORED)
    assert found["htmx"].startswith("2.") and found["editorStyled"], found
    assert found["chart"] >= 1 and found["laidOut"], found


def test_a_one_time_link_opens_the_studio(studio_srv: RunningServer, page: Any) -> None:
    with studio_srv.client() as api:
        link = api.post("/api/v1/studio/signin-links")
        assert link.status_code == 201, link.text
    page.goto(link.json()["url"])
    page.wait_for_url("**/studio/ws/**")  # signed in, through the page that moves on by itself
    assert page.get_by_role("button", name="Sign out").is_visible()
