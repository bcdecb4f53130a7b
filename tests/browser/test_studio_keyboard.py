"""Issue 27: the main journey works with the keyboard alone. In one Chromium session, with Tab,
Shift+Tab, Enter, Escape, the arrow keys and typing (no click, no mouse, no page.goto after the
sign-in form's URL): sign in → Compute → the clusters tab (arrow keys) → a cluster from the form
(the type switched back and forth in place, the size picked with the arrow keys) → Jobs → a job
from pasted YAML → its tabs (Overview, Outputs + logs, Metrics, by the arrow keys) → cancel it
through the confirmation dialog (Escape first, then confirmed) → clone it, edited, and submit →
Quota → sign out.

At every focus stop the focused element must show a focus ring (an outline or a box shadow), and
a mouse event anywhere fails the test (the page reports it as a console error)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from typing import Any

from tests.browser import studio_helpers
from tests.browser.studio_helpers import axe_check, screenshot, sign_in
from tests.conftest import RunningServer
from tests.instance_helpers import OP_TIMEOUT_S
from tests.jobs_helpers import wait_until

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
JOB_TIMEOUT_MS = 180_000
LONG_JOB = "command: sleep 600\ncompute: azureml:keys-cpu\ndisplay_name: keyboard long\n"
RING_WAIT_MS = 1_000
MOST_PRESSES = 80  # Tab presses to reach anything on a page (a page's controls, counted generously)
# Any real mouse event fails the test: the page fixture fails on console errors.
NO_MOUSE = """for (const type of ["mousedown", "mouseup", "click", "pointerdown", "wheel"]) {
  addEventListener(type, (e) => {
    // A click that Enter or Space makes has detail 0 and no pointer; a mouse's has a pointer.
    if (e.isTrusted && (type !== "click" || e.detail > 0)) console.error(`mouse used: ${type}`);
  }, true);
}"""
# The focused element, through shadow roots (CodeMirror's editor lives in one), and whether it
# shows a focus ring: its own outline or box shadow, or (CodeMirror) its editor's.
FOCUSED = """() => {
  let el = document.activeElement;
  while (el && el.shadowRoot && el.shadowRoot.activeElement) el = el.shadowRoot.activeElement;
  if (!el || el === document.body || el === document.documentElement) return null;
  const ring = (node) => {
    const s = getComputedStyle(node);
    return (s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0) || s.boxShadow !== "none";
  };
  const editor = el.closest(".cm-editor");
  const label = el.getAttribute("aria-label") || (el.labels && el.labels[0] ? el.labels[0].textContent : "");
  return {
    tag: el.tagName.toLowerCase(), type: el.type || "", name: el.name || "", value: el.value || "",
    checked: !!el.checked, id: el.id, href: el.getAttribute("href") || "",
    label: (label || "").trim(), text: (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 60),
    current: el.getAttribute("aria-current") || "",
    ring: ring(el) || (editor !== null && ring(editor)),
  };
}"""
Focus = dict[str, Any]


def focused(page: Any) -> Focus | None:
    found: Focus | None = page.evaluate(FOCUSED)
    return found


def assert_ring(page: Any, where: str) -> Focus:
    """The focus is on an element, and that element shows a focus ring (waited for a moment:
    CodeMirror marks its editor focused just after the focus event)."""
    with contextlib.suppress(studio_helpers.sync_api.TimeoutError):  # described below
        page.wait_for_function(f"() => ({FOCUSED})()?.ring === true", timeout=RING_WAIT_MS)
    now = focused(page)
    assert now is not None, f"{where}: the focus is lost (on the page's body)"
    assert now["ring"], f"{where}: no visible focus ring on {now}"
    return now


def press_until(page: Any, wanted: Callable[[Focus], bool], what: str, key: str = "Tab") -> Focus:
    """Press KEY until the focused element is WANTED; every stop on the way shows a focus ring."""
    seen: list[str] = []
    for _ in range(MOST_PRESSES):
        page.keyboard.press(key)
        now = assert_ring(page, f"reaching {what} ({key})")
        if wanted(now):
            return now
        seen.append(f"{now['tag']}:{now['label'] or now['text'] or now['name']}")
    raise AssertionError(f"{key} never reached {what}; it went through {seen}")


def text_is(text: str) -> Callable[[Focus], bool]:
    return lambda f: f["text"] == text


def labelled(label: str) -> Callable[[Focus], bool]:
    return lambda f: f["label"] == label


def link_to(suffix: str) -> Callable[[Focus], bool]:
    return lambda f: f["tag"] == "a" and f["href"].endswith(suffix)


def enter(page: Any, url_glob: str) -> None:
    page.keyboard.press("Enter")
    page.wait_for_url(url_glob)


def go_to(page: Any, suffix: str, url_glob: str) -> None:
    """Follow the side navigation's link to SUFFIX."""
    press_until(page, link_to(suffix), f"the navigation's link to {suffix}")
    enter(page, url_glob)


def paste_into_editor(page: Any, text: str) -> None:
    """With the YAML editor focused: select all, delete, paste TEXT."""
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)


def sign_in_by_keyboard(page: Any, srv: RunningServer) -> None:
    page.goto(f"{srv.endpoint}/studio/signin")
    assert_ring(page, "the sign-in form")  # the key's field has the focus (autofocus)
    assert focused(page)["label"] == "API key"  # type: ignore[index]
    page.keyboard.insert_text(srv.api_key)
    enter(page, "**/studio/ws/**")


def the_workspace_menu_closes_with_escape(page: Any) -> None:
    press_until(page, lambda f: f["tag"] == "summary", "the workspace picker")
    page.keyboard.press("Enter")
    assert page.locator("details.picker").get_attribute("open") is not None
    page.keyboard.press("Tab")
    assert assert_ring(page, "the menu's first workspace")["tag"] == "a"
    page.keyboard.press("Escape")
    assert page.locator("details.picker").get_attribute("open") is None
    assert assert_ring(page, "the closed menu")["tag"] == "summary"  # the focus is back on its button


def create_a_cluster(page: Any) -> None:
    """Compute → the clusters tab by the arrow keys → + New → the form: the type switched in place
    and back (the name typed first is kept), the maximum nodes, a size by the arrow keys."""
    go_to(page, "/compute", "**/compute")
    switch_tab(page, "Compute instances", "ArrowRight", "Compute clusters", "**/compute?tab=clusters")
    press_until(page, text_is("+ New"), "+ New")
    enter(page, "**/compute/_new?type=amlcompute")

    press_until(page, lambda f: f["type"] == "radio" and f["name"] == "type", "the type")
    page.keyboard.press("Tab")
    assert assert_ring(page, "the name")["label"] == "Name"
    page.keyboard.type("keys-cpu")
    press_until(page, lambda f: f["name"] == "type", "the type again", key="Shift+Tab")
    page.keyboard.press("ArrowLeft")  # a compute instance: its fields, swapped in place
    page.get_by_label("Idle shutdown (minutes)").wait_for()
    assert assert_ring(page, "the type, switched")["value"] == "computeinstance"
    page.keyboard.press("ArrowRight")  # back to a cluster
    page.get_by_label("Maximum nodes").wait_for()
    assert page.get_by_label("Name", exact=True).input_value() == "keys-cpu"  # kept, no reload

    press_until(page, labelled("Maximum nodes"), "the maximum nodes")
    page.keyboard.press("Control+a")
    page.keyboard.type("3")
    page.keyboard.press("Tab")  # the change refreshes the picker: it counts 3 nodes now
    page.locator("#sizes th", has_text="Nodes that fit").wait_for()
    page.locator("#sizes td", has_text="of 3").first.wait_for()
    press_until(page, lambda f: f["type"] == "radio" and f["name"] == "size", "the size picker")
    for _ in range(MOST_PRESSES):
        if focused(page)["value"] == "Standard_DS3_v2":  # type: ignore[index]
            break
        page.keyboard.press("ArrowDown")  # the radio group: a disabled size is skipped
        assert_ring(page, "a size")
    assert page.get_by_role("radio", name="Standard_DS3_v2").is_checked()
    screenshot(page, "keyboard-size-picker")
    # On past Create to the YAML form's editor (its scroller and its text: each with a ring), and back.
    press_until(page, labelled("Compute YAML"), "the compute YAML editor")
    press_until(page, text_is("Create"), "Create", key="Shift+Tab")
    enter(page, "**/compute/keys-cpu?op=*")
    page.get_by_role("status").get_by_text("Succeeded").wait_for(timeout=OP_TIMEOUT_S * 1000)


def the_list_keeps_the_focus_while_it_streams(page: Any, srv: RunningServer) -> None:
    """The clusters list is drawn again whenever it changes (its event stream): the focused row's
    link keeps the focus. The change: the cluster's maximum lowered over the API meanwhile."""
    go_to(page, "/compute", "**/compute")
    switch_tab(page, "Compute instances", "End", "Locations", "**/compute?tab=locations")
    switch_tab(page, "Locations", "ArrowLeft", "Attached computes", "**/compute?tab=attached")
    switch_tab(page, "Attached computes", "ArrowLeft", "Compute clusters", "**/compute?tab=clusters")
    press_until(page, link_to("/compute/keys-cpu"), "the cluster's row")
    page.evaluate("""() => { window.studioSwaps = 0;
      document.addEventListener("htmx:afterSettle", () => { window.studioSwaps += 1; }); }""")
    with srv.client() as api:
        changed = api.patch(f"{srv.ws_path}/computes/keys-cpu", json={"max_instances": 2})
        assert changed.status_code == 200, changed.text
    page.wait_for_function("() => window.studioSwaps >= 1")  # the rows, drawn again from the stream
    page.locator("#compute-rows tr", has_text="keys-cpu").locator("td", has_text="2").first.wait_for()
    assert link_to("/compute/keys-cpu")(assert_ring(page, "the row's link after the list changed"))
    enter(page, "**/compute/keys-cpu")


def submit_a_job(page: Any, name: str, text: str) -> None:
    """On the submit or clone form: the name, the YAML pasted into the editor, Submit."""
    page.locator("#yaml-editor .cm-content").wait_for()
    press_until(page, labelled("Job name"), "the job's name")
    page.keyboard.press("Control+a")
    page.keyboard.type(name)
    press_until(page, labelled("Job YAML"), "the YAML editor")
    paste_into_editor(page, text)
    # Tab leaves the editor (it does not indent): the keyboard is not trapped there.
    press_until(page, text_is("Submit"), "Submit")
    enter(page, f"**/jobs/{name}")


def switch_tab(page: Any, shown: str, key: str, wanted: str, url_glob: str) -> None:
    """From the current tab SHOWN, KEY moves the focus to WANTED; Enter opens it."""
    press_until(page, lambda f: f["current"] == "page" and f["text"] == shown, f"the tab {shown}")
    page.keyboard.press(key)
    assert assert_ring(page, f"the tab after {key}")["text"] == wanted
    enter(page, url_glob)


def cancel_by_keyboard(page: Any, srv: RunningServer, name: str) -> None:
    """The job's Cancel asks first, in a modal dialog: Escape keeps the job; confirmed, it cancels."""
    press_until(page, text_is("Cancel"), "the job's Cancel")
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name=f"Cancel job {name}? Its processes are stopped.")
    dialog.wait_for()
    assert assert_ring(page, "the dialog")["text"] == "Go back"  # the safe answer has the focus
    axe_check(page)
    page.keyboard.press("Escape")
    dialog.wait_for(state="hidden")
    assert assert_ring(page, "after Escape")["text"] == "Cancel"  # back on the button pressed
    with srv.client() as api:
        assert not api.get(f"{srv.ws_path}/jobs/{name}").json()["status"].startswith("Cancel")
    page.keyboard.press("Enter")
    dialog.wait_for()
    page.keyboard.press("Tab")
    assert assert_ring(page, "the dialog's confirm")["text"] == "Cancel the job"
    screenshot(page, "keyboard-confirm")
    page.keyboard.press("Enter")
    page.locator("#job-status", has_text=re.compile("Cancel")).wait_for(timeout=JOB_TIMEOUT_MS)


def test_the_main_journey_with_the_keyboard_alone(studio_srv: RunningServer, page: Any) -> None:
    srv = studio_srv
    page.context.add_init_script(NO_MOUSE)
    sign_in_by_keyboard(page, srv)
    the_workspace_menu_closes_with_escape(page)
    create_a_cluster(page)
    the_list_keeps_the_focus_while_it_streams(page, srv)

    go_to(page, "/jobs", "**/jobs")
    press_until(page, text_is("+ Submit job"), "+ Submit job")
    enter(page, "**/jobs/_new")
    submit_a_job(page, "keys-long", LONG_JOB)

    job_url = "**/jobs/keys-long"
    switch_tab(page, "Overview", "ArrowRight", "Outputs + logs", job_url + "?tab=outputs")
    page.locator("#log").wait_for()
    switch_tab(page, "Outputs + logs", "ArrowRight", "Metrics", job_url + "?tab=metrics")
    switch_tab(page, "Metrics", "Home", "Overview", job_url + "?tab=overview")

    cancel_by_keyboard(page, srv, "keys-long")

    press_until(page, text_is("Clone"), "Clone")
    enter(page, "**/jobs/keys-long/clone")
    submit_a_job(page, "keys-clone", LONG_JOB.replace("sleep 600", "echo cloned"))
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/jobs/keys-clone").json()["command"] == "echo cloned"

    go_to(page, "/quota", "**/quota")
    page.get_by_role("heading", name="Quota").first.wait_for()
    press_until(page, text_is("Sign out"), "Sign out")
    enter(page, "**/studio/signin**")


def test_a_size_chosen_while_the_picker_redraws_stays_chosen(studio_srv: RunningServer, page: Any) -> None:
    """A node count changed redraws the size picker; a size picked before the new picker arrives
    (its request held here until then) stays picked, rather than the form losing it."""
    srv = studio_srv
    sign_in(page, srv)
    page.goto(f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/compute/_new?type=amlcompute")
    held: list[Any] = []
    page.route("**/compute/_sizes?**", lambda route: held.append(route))
    page.get_by_label("Maximum nodes").fill("4")
    page.get_by_label("Maximum nodes").press("Tab")  # the change: the picker's request goes out
    # Playwright hands over the held request while the page is waited on: wait on it in short turns.
    wait_until(lambda: bool(held) or page.wait_for_timeout(50), timeout=30, what="the picker's request")
    page.get_by_role("radio", name="Standard_DS3_v2").check()  # meanwhile, a size is picked
    held[0].continue_()
    page.locator("#sizes td", has_text="of 4").first.wait_for()  # the new picker is in
    assert page.get_by_role("radio", name="Standard_DS3_v2").is_checked()
