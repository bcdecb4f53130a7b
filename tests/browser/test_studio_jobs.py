"""The studio's Jobs in Chromium (issue 27): the list with filters (one by keyboard alone) and a job
opened from it, submit from pasted YAML, clone with an edited command, cancel one; axe-core on the
list and the forms; hostile strings in every user-controlled place show as text (the page fixture
fails on any console error, so nothing of them may run); screenshots.

The module's cluster sits behind a resource-group lock: its jobs stay queued."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import studio_helpers
from tests.browser.studio_helpers import axe_check, confirm, expect_failed_load, screenshot, sign_in
from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, job, submit

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
HOSTILE = "<img src=x onerror=console.error(1)></script><script>console.error(2)</script>"
HELLO = (Path(__file__).resolve().parents[2] / "examples" / "azureml" / "hello-world.yml").read_text()
CLUSTER = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}


@pytest.fixture(scope="module")
def held(studio_srv: RunningServer) -> Iterator[str]:
    """A cluster whose scaling a resource-group lock blocks, and jobs on it: some with hostile
    display names, tags and experiment names."""
    srv = studio_srv
    with srv.client() as api:
        create_compute(api, srv, "held", CLUSTER)
        lock = f"/api/v1/subscriptions/{srv.subscription_id}/resourceGroups/default/locks/hold"
        assert api.put(lock, json={"level": "CanNotDelete"}).status_code == 201
        for i in range(3):
            submit(
                api,
                srv,
                f"train-{i}",
                {
                    "command": "echo hi",
                    "compute": "azureml:held",
                    "experiment_name": "mnist",
                    "tags": {"team": "vision"},
                },
            )
        submit(
            api,
            srv,
            "hostile-job",
            {
                "command": "echo hi",
                "compute": "azureml:held",
                "display_name": HOSTILE,
                "experiment_name": HOSTILE,
                "tags": {HOSTILE: HOSTILE},
            },
        )
        yield "held"
        api.delete(lock)


def code_zip() -> bytes:
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w") as archive:
        archive.writestr("main.py", "print('hello')\n")
    return raw.getvalue()


def ws(srv: RunningServer, *parts: str) -> str:
    return "/".join([f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default", *parts])


def editor(page: Any) -> Any:
    return page.locator("#yaml-editor .cm-content")


def set_editor(page: Any, text: str) -> None:
    """Replace the editor's text as a user does: select all, delete, paste. (Playwright's fill
    on the highlighted text makes Chromium keep the old text's style as an inline style
    attribute, which the CSP refuses: no user gets there.)"""
    editor(page).click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)


def test_list_filter_by_keyboard_open_a_job_and_cancel_one(
    studio_srv: RunningServer, held: str, page: Any
) -> None:
    srv = studio_srv
    sign_in(page, srv)
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Jobs").click()
    page.wait_for_url("**/jobs")
    table = page.locator("#jobs-results table")
    assert table.get_by_text(HOSTILE).first.is_visible()  # as text: display name, experiment, tag
    assert page.get_by_role("heading", name="4 jobs").is_visible()
    # Each queued job's place in its compute's queue (the lock holds them all; no estimate under it).
    assert table.locator(".queue-place", has_text="#1").first.is_visible()
    assert table.locator(".queue-place", has_text="#4").first.is_visible()
    axe_check(page)
    page.goto(ws(srv, "jobs") + "?experiment=mnist")
    screenshot(page, "jobs-list")
    page.goto(ws(srv, "jobs"))

    # Keyboard only: into the name search, type, and the results follow (htmx, URL pushed).
    page.locator("#jobs-q").focus()
    page.keyboard.type("train-1")
    page.wait_for_url("**/jobs?q=train-1")
    page.get_by_role("heading", name="1 job").wait_for()
    assert table.locator("tbody tr").count() == 1
    # Tab on to the row's link and open it with Enter.
    link = table.get_by_role("link", name="train-1")
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim()") == "train-1":
            break
    assert link.evaluate("el => el === document.activeElement")
    expect_failed_load(page, ws(srv, "jobs", "train-1"))  # the job's own page is another module's
    page.keyboard.press("Enter")
    page.wait_for_url("**/jobs/train-1")
    page.go_back()
    page.wait_for_url("**/jobs?q=train-1")

    # A filter as a user clicks it: the status menu.
    page.goto(ws(srv, "jobs"))
    page.locator("details.filter-menu summary", has_text="Status").click()
    axe_check(page)
    page.get_by_label("Canceled", exact=True).check()
    page.wait_for_url("**status=Canceled**")
    page.get_by_text("No job matches these filters.").wait_for()

    # The bulk Cancel asks its own question (the button's, not the row's); Escape keeps the job.
    page.goto(ws(srv, "jobs"))
    page.get_by_label("Select train-1").check()
    page.get_by_role("button", name="Cancel 1 selected").click()
    bulk = page.get_by_role("dialog", name="Cancel the selected jobs? Their processes are stopped.")
    bulk.wait_for()
    page.keyboard.press("Escape")
    bulk.wait_for(state="hidden")
    page.get_by_label("Select train-1").uncheck()
    with srv.client() as api:
        assert job(api, srv, "train-1")["status"] != "Canceled"

    # Cancel one from its row.
    page.get_by_role("button", name="Cancel train-0").click()
    confirm(page, "Cancel the job", "Cancel job train-0? Its processes are stopped.")
    page.wait_for_url("**/jobs")
    page.locator("tr", has_text="train-0").get_by_text("Canceled").wait_for()
    with srv.client() as api:
        assert job(api, srv, "train-0")["status"] == "Canceled"


def test_submit_pasted_yaml_and_see_errors_at_the_field(
    studio_srv: RunningServer, held: str, page: Any
) -> None:
    srv = studio_srv
    sign_in(page, srv)
    page.goto(ws(srv, "jobs", "_new"))
    editor(page).wait_for()
    axe_check(page)
    # Hostile strings in the YAML and so in the error: shown as text.
    set_editor(
        page,
        f"command: echo hi\ncompute: azureml:held\ndisplay_name: '{HOSTILE}'\n"
        "resources:\n  instance_count: 0\n",
    )
    page.get_by_label("Job name").fill("hostile-submit")
    expect_failed_load(page, ws(srv, "jobs", "_new"))  # the form comes back as a 400
    page.get_by_role("button", name="Submit").click()
    page.get_by_role("alert").wait_for()
    assert "resources.instance_count (line 5)" in page.get_by_role("alert").inner_text()
    assert (
        page.evaluate(  # the editor selected the line of the field
            "() => document.querySelector('#yaml-editor').shadowRoot.getSelection().toString()"
        )
        .strip()
        .startswith("instance_count")
    )
    assert HOSTILE in editor(page).inner_text()
    axe_check(page)

    # A local code folder: its archive is uploaded when chosen, then the job submits with it.
    page.goto(ws(srv, "jobs", "_new"))
    page.get_by_label("Code archive").set_input_files(
        files=[{"name": "src.zip", "mimeType": "application/zip", "buffer": code_zip()}]
    )
    page.get_by_text("Uploaded src.zip: codes/").wait_for()
    set_editor(page, "command: python main.py\ncode: ./src\ncompute: azureml:held\n")
    page.get_by_label("Job name").fill("with-code")
    expect_failed_load(page, ws(srv, "jobs", "with-code"))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/jobs/with-code")
    with srv.client() as api:
        assert job(api, srv, "with-code")["code"].startswith("codes/")

    page.goto(ws(srv, "jobs", "_new"))
    set_editor(page, HELLO)
    page.get_by_label("Job name").fill("hello-from-studio")
    screenshot(page, "job-submit")
    expect_failed_load(page, ws(srv, "jobs", "hello-from-studio"))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/jobs/hello-from-studio")
    with srv.client() as api:
        assert job(api, srv, "hello-from-studio")["command"] == 'echo "hello world"'


def test_clone_with_an_edited_command(studio_srv: RunningServer, held: str, page: Any) -> None:
    srv = studio_srv
    sign_in(page, srv)
    page.goto(ws(srv, "jobs", "hostile-job", "yaml"))
    editor(page).wait_for()
    assert HOSTILE in editor(page).inner_text()
    screenshot(page, "job-yaml")
    axe_check(page)
    page.get_by_role("link", name="Clone").click()
    page.wait_for_url("**/jobs/hostile-job/clone")
    editor(page).wait_for()
    text = editor(page).inner_text()
    assert "command: echo hi" in text and "name: hostile-job" not in text
    set_editor(page, text.replace("echo hi", "echo edited"))
    page.get_by_label("Job name").fill("cloned-job")
    screenshot(page, "job-clone")
    axe_check(page)
    expect_failed_load(page, ws(srv, "jobs", "cloned-job"))
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/jobs/cloned-job")
    with srv.client() as api:
        cloned = job(api, srv, "cloned-job")
    assert cloned["command"] == "echo edited" and cloned["display_name"] == HOSTILE
