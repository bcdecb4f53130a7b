"""The studio's asset pages in Chromium (issue 28 item 3), walked as a new user would: register a
data asset from an uploaded folder and see its files, use it in a job (submitted by the client) and
see the job under "used by"; register an environment from YAML and view its spec; a component's
inputs and outputs; archive then restore; a Reader sees no write control and a hand-posted
archive is refused. axe-core on each page; hostile tags, descriptions, file names and environment
specs shown as text (the page fixture fails on any script they would run)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.browser import studio_helpers
from tests.browser.studio_helpers import (
    axe_check,
    confirm,
    expect_failed_load,
    load_yaml,
    screenshot,
    sign_in,
    ws_url,
)
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import submit, wait_job, wait_until

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
XSS_IMG = "<img src=x onerror=console.error(1)>"
XSS_SCRIPT = "</script><script>console.error(2)</script>"
HOSTILE = XSS_IMG + XSS_SCRIPT
HOSTILE_FILE = "<img src=x onerror=console.error(3)>.txt"  # a file name cannot hold '/'


def test_a_data_asset_from_a_folder_its_files_and_the_job_that_uses_it(
    studio_srv: RunningServer, page: Any, tmp_path: Path
) -> None:
    srv = studio_srv
    folder = tmp_path / "images"
    (folder / "train").mkdir(parents=True)
    (folder / "train" / "a.csv").write_text("x,y\n1,2\n")
    (folder / "labels.txt").write_text("cat\ndog\n")
    (folder / HOSTILE_FILE).write_text("hostile name")
    sign_in(page, srv)
    page.get_by_role("link", name="Data", exact=True).click()
    page.wait_for_url("**/data")
    page.get_by_role("link", name="+ Register data asset").click()
    page.wait_for_url("**/data/_new")
    page.get_by_label("Name", exact=True).fill("images")
    page.get_by_label("Description").fill(HOSTILE)
    page.get_by_label("Tags").fill(f"team=vision, {XSS_SCRIPT}")
    page.get_by_label("Or a folder", exact=True).set_input_files(str(folder))
    page.get_by_role("status").get_by_text("Uploaded 3 files.").wait_for()
    axe_check(page)
    screenshot(page, "assets-data-new")
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/data/images/1")
    files = page.get_by_role("list", name="Files of images:1")
    for name in ("train/", "a.csv", "labels.txt", HOSTILE_FILE):
        assert files.get_by_text(name, exact=True).is_visible()
    assert page.get_by_text(HOSTILE).first.is_visible()  # the description, as text
    assert page.get_by_text(XSS_SCRIPT).first.is_visible()  # a tag, as text
    with page.expect_download() as downloaded:
        files.get_by_role("link", name="labels.txt").click()
    assert Path(downloaded.value.path()).read_text() == "cat\ndog\n"
    assert page.get_by_text("No job uses this version.").is_visible()

    with srv.client() as api:  # the client uses it in a job
        job = {
            "command": "ls -R ${{inputs.images}} > ${{outputs.listing}}/seen.txt",
            "compute": "local",
            "display_name": HOSTILE,
            "inputs": {"images": {"type": "uri_folder", "path": "azureml:images:1"}},
            "outputs": {"listing": {"type": "uri_folder"}},
        }
        submit(api, srv, "uses-images", job)

    def listed() -> bool:
        page.reload()
        return page.locator("table.used-jobs").get_by_role("link", name="uses-images").count() == 1

    wait_until(listed, 30, "the job under Used by")
    assert page.locator("table.used-jobs").get_by_text("inputs.images").is_visible()
    axe_check(page)
    screenshot(page, "assets-data")
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Data").click()
    page.get_by_role("link", name="images", exact=True).wait_for()
    axe_check(page)
    screenshot(page, "assets-list")

    # A new data asset from that job's output: pick the job, then one of its outputs.
    with srv.client() as api:
        assert wait_job(api, srv, "uses-images", timeout=120)["status"] == "Completed"
    page.get_by_role("link", name="+ Register data asset").click()
    page.get_by_label("A job's output").check()
    page.get_by_label("Name", exact=True).fill("listing")
    page.get_by_label("Job", exact=True).fill("uses-images")
    page.keyboard.press("Tab")  # the change event: the job's outputs are fetched
    page.get_by_role("combobox", name="Output").get_by_role("option", name="listing (uri_folder)").wait_for(
        state="attached"
    )
    axe_check(page)
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/data/listing/1")
    assert page.get_by_text("azureml://jobs/uses-images/outputs/listing", exact=True).is_visible()
    assert (
        page.get_by_role("list", name="Files of listing:1").get_by_role("link", name="seen.txt").is_visible()
    )


def test_an_environment_from_yaml_a_components_inputs_and_archive_then_restore(
    studio_srv: RunningServer, page: Any
) -> None:
    srv = studio_srv
    sign_in(page, srv)
    page.goto(ws_url(srv, "environments", "_new"))
    # A refusal comes back in the form, its hostile words as text.
    expect_failed_load(page, ws_url(srv, "environments", "_new"))  # the 400: Chromium logs it
    load_yaml(page, "Environment YAML", {"name": "bad-env", "conda_file": HOSTILE})
    page.get_by_role("button", name="Register").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "conda_file" in alert.inner_text() and XSS_IMG in alert.inner_text()
    axe_check(page)
    env = {
        "name": "np-env",
        "description": HOSTILE,
        "image": "python:3.11-slim",
        "conda_file": {"name": HOSTILE, "dependencies": ["python=3.11", "pip", {"pip": ["# " + HOSTILE]}]},
        "tags": {XSS_IMG: XSS_SCRIPT},
    }
    load_yaml(page, "Environment YAML", env)
    axe_check(page)
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/environments/np-env/1")
    conda = page.get_by_role("textbox", name="Conda file")
    conda.get_by_text(f"name: {HOSTILE}").wait_for()  # the spec, as text in the editor
    assert page.get_by_text("python:3.11-slim", exact=True).is_visible()
    assert page.locator(".build-state").inner_text() == "not built yet"
    # A job on it (submitted by the client) builds it on its node and fails there (its pip entry
    # is no package): the page shows that build, its hostile words as text.
    with srv.client() as api:
        submit(
            api, srv, "on-np-env", {"command": "true", "compute": "local", "environment": "azureml:np-env:1"}
        )
        assert wait_job(api, srv, "on-np-env", timeout=120)["status"] == "Failed"
    page.reload()
    assert page.locator(".build-state").inner_text() == "failed"
    log = page.get_by_role("region", name="Build log").inner_text()
    assert "cloudlet-agent: Preparing environment 'np-env'" in log and XSS_IMG in log
    assert "could not be built" in log
    assert page.locator("table.used-jobs").get_by_role("link", name="on-np-env").is_visible()
    axe_check(page)
    screenshot(page, "assets-environment")

    page.goto(ws_url(srv, "components", "_new"))
    component = {
        "name": "train",
        "type": "command",
        "display_name": HOSTILE,
        "description": HOSTILE,
        "command": "python train.py --lr ${{inputs.lr}} --out ${{outputs.model}}",
        "environment": "azureml:np-env:1",
        "inputs": {
            "lr": {"type": "number", "default": 0.01, "description": HOSTILE},
            "data": {"type": "uri_folder", "optional": True},
        },
        "outputs": {"model": {"type": "mlflow_model", "description": "the trained model"}},
    }
    load_yaml(page, "Component YAML", component)
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/components/train/1")
    inputs = page.locator("table.io-inputs")
    assert inputs.get_by_role("row", name=re.compile(r"^lr number 0\.01")).is_visible()
    assert inputs.get_by_text(HOSTILE).is_visible()
    assert (
        page.locator("table.io-outputs")
        .get_by_role("row", name="model mlflow_model the trained model")
        .is_visible()
    )
    assert page.get_by_text("azureml:np-env:1").first.is_visible()
    axe_check(page)
    screenshot(page, "assets-component")

    # Archive, then restore: the list hides the archived name unless asked.
    page.get_by_role("button", name="Archive").click()
    confirm(page, "Archive", "Archive train version 1? It leaves the lists (it can be restored).")
    page.get_by_role("button", name="Restore").wait_for()
    assert page.get_by_text("Archived", exact=True).first.is_visible()
    page.goto(ws_url(srv, "components"))
    assert page.get_by_role("link", name="train", exact=True).count() == 0
    page.get_by_label("Include archived").check()
    page.get_by_role("button", name="Apply").click()
    page.get_by_role("link", name="train", exact=True).click()
    page.get_by_role("button", name="Restore").click()
    page.get_by_role("button", name="Archive").wait_for()
    page.goto(ws_url(srv, "components"))
    assert page.get_by_role("link", name="train", exact=True).is_visible()


def test_a_reader_sees_no_write_control_and_a_hand_posted_archive_is_refused(
    studio_srv: RunningServer, page: Any
) -> None:
    srv = studio_srv
    with srv.client() as api:
        key = new_user(api, srv, "assets-reader", "Reader")
        assert (
            api.post(
                f"{srv.ws_path}/environments/read-env/versions", json={"image": "python:3.11"}
            ).status_code
            == 201
        )
    sign_in(page, srv, key)
    for suffix, label in (
        ("data", "data asset"),
        ("environments", "environment"),
        ("components", "component"),
    ):
        page.goto(ws_url(srv, suffix))
        page.get_by_role("heading", level=1).wait_for()
        assert page.get_by_role("link", name=f"+ Register {label}").count() == 0
    page.goto(ws_url(srv, "environments", "read-env", "1"))
    assert page.get_by_role("button", name="Archive").count() == 0
    assert page.get_by_role("link", name="Register a version").count() == 0
    axe_check(page)
    token = page.locator("body").get_attribute("hx-headers") or ""
    csrf = re.search(r'"X-CSRF-Token":\s*"([^"]+)"', token)
    assert csrf is not None
    url = ws_url(srv, "environments", "read-env", "1", "archive")
    expect_failed_load(page, url)
    refused = page.request.post(url, form={"csrf_token": csrf.group(1)}, max_redirects=0)
    assert refused.status == 403
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/environments/read-env/versions/1").json()["is_archived"] is False
