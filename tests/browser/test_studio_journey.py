"""Issue 27's acceptance journey in Chromium, as a new Azure ML user walks it: sign in → create a
cluster from the form and an instance from YAML → open the instance's JupyterLab and run a cell →
submit examples/azureml/ job files and a pipeline → watch the live log, see a metric chart, see
the pipeline graph → cancel one job → clone another with an edited command and submit it → see a
queued job's reason and position → the quota page → sign out. Then a second user with Reader sees
the jobs, has no write control, and is refused (403) when posting a form by hand; and the
instance's JupyterLab is refused to them.

Each page's own details (filters, errors at the field, the size picker, axe on every tab, hostile
strings) are in the per-page tests beside this one; this one checks that the pages make one
journey, with axe-core and a screenshot at its main stops."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tests.browser import studio_helpers
from tests.browser.studio_helpers import VIEWPORT, axe_check, expect_failed_load, screenshot, sign_in
from tests.conftest import RunningServer
from tests.instance_helpers import OP_TIMEOUT_S, new_user

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "azureml"
LAB_TIMEOUT_MS = 120_000  # JupyterLab's first load and a kernel start on a loaded 2-core machine
JOB_TIMEOUT_MS = 180_000
METRICS_JOB = """command: >-
  python -c "import mlflow; [mlflow.log_metric('loss', 1 / (i + 1), step=i) for i in range(30)]"
compute: azureml:journey-cpu
display_name: metrics
experiment_name: journey
"""
LONG_JOB = "command: sleep 600\ncompute: azureml:journey-cpu\ndisplay_name: long\n"
PIPELINE = """type: pipeline
display_name: two steps
settings:
  default_compute: azureml:journey-cpu
jobs:
  prepare:
    type: command
    command: echo prepared > ${{outputs.out}}/data.txt
    outputs:
      out:
        type: uri_folder
  train:
    type: command
    command: cat ${{inputs.data}}/data.txt
    inputs:
      data: ${{parent.jobs.prepare.outputs.out}}
"""
ON_LAB = "command: echo waits\ncompute: azureml:journey-lab\n"


def ws_url(srv: RunningServer, *parts: str) -> str:
    return f"{srv.endpoint}/studio/ws/{srv.subscription_id}/default/default/" + "/".join(parts)


def editor(page: Any) -> Any:
    return page.locator("#yaml-editor .cm-content")


def set_editor(page: Any, text: str) -> None:
    """Replace the job editor's text as a user does: select all, delete, paste."""
    editor(page).click()
    page.keyboard.press("Control+a")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)


def submit_yaml(page: Any, srv: RunningServer, name: str, text: str) -> None:
    """Submit TEXT as job NAME from the studio's submit page and land on its job page."""
    page.goto(ws_url(srv, "jobs", "_new"))
    editor(page).wait_for()
    set_editor(page, text)
    page.get_by_label("Job name").fill(name)
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(f"**/jobs/{name}")


def load_compute_yaml(page: Any, doc: dict[str, Any]) -> None:
    text = yaml.safe_dump(doc)
    page.get_by_role("textbox", name="Compute YAML").wait_for()
    upload = {"name": "compute.yml", "mimeType": "text/yaml", "buffer": text.encode()}
    page.get_by_label("Or load a file").set_input_files(files=[upload])
    page.get_by_role("textbox", name="Compute YAML").get_by_text(f"name: {doc['name']}").wait_for()


def run_a_cell_in_jupyterlab(browser: Any, srv: RunningServer) -> None:
    """JupyterLab's own page logs to the console: a context of its own, signed in to the studio
    only; one click from the instance's page opens it."""
    lab = browser.new_context(viewport=VIEWPORT)
    try:
        tab = lab.new_page()
        tab.set_default_timeout(LAB_TIMEOUT_MS)
        sign_in(tab, srv)
        tab.goto(ws_url(srv, "compute", "journey-lab"))
        tab.get_by_role("button", name="Jupyter Lab").click()
        tab.wait_for_url("**/instances/journey-lab/jupyterlab/lab**")
        tab.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
        tab.get_by_text("Python 3 (ipykernel) | Idle").wait_for()
        cell = tab.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
        cell.click()
        cell.type("print(6*7)")
        tab.keyboard.press("Shift+Enter")
        output = tab.locator(".jp-NotebookPanel .jp-OutputArea-output").first
        output.wait_for()
        assert output.inner_text().strip() == "42"
    finally:
        lab.close()


def test_the_journey_of_a_new_azure_ml_user(studio_srv: RunningServer, browser: Any, page: Any) -> None:
    srv = studio_srv
    sign_in(page, srv)
    axe_check(page)

    # A cluster from the form.
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Compute").click()
    page.get_by_role("navigation", name="Compute kinds").get_by_role("link", name="Compute clusters").click()
    page.get_by_role("link", name="+ New").click()
    page.wait_for_url("**/compute/_new?type=amlcompute")
    page.get_by_label("Name", exact=True).fill("journey-cpu")
    page.get_by_label("Maximum nodes").fill("2")
    page.get_by_role("radio", name="Standard_DS3_v2").check()
    page.get_by_role("button", name="Create", exact=True).click()
    page.wait_for_url("**/compute/journey-cpu?op=*")
    page.get_by_role("status").get_by_text("Succeeded").wait_for(timeout=OP_TIMEOUT_S * 1000)

    # An instance from YAML, and its JupyterLab.
    page.goto(ws_url(srv, "compute", "_new"))
    load_compute_yaml(page, {"name": "journey-lab", "type": "computeinstance", "size": "Standard_DS3_v2"})
    page.get_by_role("button", name="Create from YAML").click()
    page.wait_for_url("**/compute/journey-lab?op=*")
    page.get_by_role("status").get_by_text("Succeeded").wait_for(timeout=OP_TIMEOUT_S * 1000)
    run_a_cell_in_jupyterlab(browser, srv)

    # Azure's sample job file as written (serverless), its log followed live.
    submit_yaml(page, srv, "journey-hello", (EXAMPLES / "hello-world.yml").read_text())
    page.get_by_role("link", name="Outputs + logs").click()
    page.locator("#log", has_text="hello world").wait_for(timeout=JOB_TIMEOUT_MS)
    screenshot(page, "journey-log")
    # A second of Azure's sample files as written: it writes ./outputs and ./logs.
    submit_yaml(page, srv, "journey-output", (EXAMPLES / "hello-world-output.yml").read_text())
    page.locator("#job-status", has_text="Completed").wait_for(timeout=JOB_TIMEOUT_MS)
    page.get_by_role("link", name="Outputs + logs").click()
    page.locator("#log", has_text="wrote ./outputs/helloworld.txt").wait_for(timeout=JOB_TIMEOUT_MS)

    # A metric chart.
    submit_yaml(page, srv, "journey-metrics", METRICS_JOB)
    page.locator("#job-status", has_text="Completed").wait_for(timeout=JOB_TIMEOUT_MS)
    page.get_by_role("link", name="Metrics").click()
    page.locator("figure.chart[data-key='loss'][data-draw-ms]").wait_for()
    axe_check(page)

    # A pipeline and its graph.
    submit_yaml(page, srv, "journey-pipeline", PIPELINE)
    page.get_by_role("link", name="Child jobs").click()
    page.locator("#dag .dag-node[data-key='prepare']").wait_for()
    page.locator("#dag .dag-node[data-key='train'][data-status='Completed']").wait_for(timeout=JOB_TIMEOUT_MS)
    screenshot(page, "journey-pipeline")

    # Cancel one job.
    submit_yaml(page, srv, "journey-long", LONG_JOB)
    page.get_by_role("button", name=re.compile("^Cancel")).first.click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel the job").click()  # it asks first
    page.locator("#job-status", has_text=re.compile("Cancel")).wait_for(timeout=JOB_TIMEOUT_MS)

    # Clone another with an edited command, and submit it.
    page.goto(ws_url(srv, "jobs", "journey-metrics", "clone"))
    editor(page).wait_for()
    text = editor(page).inner_text()
    set_editor(page, text.replace("range(30)", "range(5)"))
    page.get_by_label("Job name").fill("journey-clone")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/jobs/journey-clone")
    with srv.client() as api:
        cloned = api.get(f"{srv.ws_path}/jobs/journey-clone").json()
    assert "range(5)" in cloned["command"]

    # A queued job's reason and position: the instance is stopped from the studio, two jobs wait.
    page.goto(ws_url(srv, "compute", "journey-lab"))
    page.get_by_role("button", name="Stop").click()
    page.get_by_text("Stopped").first.wait_for(timeout=OP_TIMEOUT_S * 1000)
    submit_yaml(page, srv, "journey-wait-1", ON_LAB)
    submit_yaml(page, srv, "journey-wait-2", ON_LAB)
    page.get_by_text("Position 2").wait_for()
    page.get_by_text("journey-lab").first.wait_for()
    # The reason in words, above the position.
    reason = page.locator(".waiting-reason")
    assert reason.inner_text().lower().startswith("the instance is stop"), reason.inner_text()
    screenshot(page, "journey-queued")
    axe_check(page)

    # The jobs list, the quota page, sign out.
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Jobs").click()
    page.locator("#jobs-results table a[href$='/jobs/journey-clone']").first.wait_for()
    page.get_by_role("navigation", name="Studio").get_by_role("link", name="Quota").click()
    page.locator("tr", has=page.get_by_text("journey-lab")).first.wait_for()
    axe_check(page)
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/studio/signin**")


def test_a_reader_sees_the_jobs_has_no_write_control_and_is_refused(
    studio_srv: RunningServer, browser: Any, page: Any
) -> None:
    srv = studio_srv
    with srv.client() as api:
        key = new_user(api, srv, "journey-reader", "Reader")
    sign_in(page, srv, key)
    page.goto(ws_url(srv, "jobs"))
    table = page.locator("#jobs-results table")
    table.locator("a[href$='/jobs/journey-clone']").first.wait_for()
    assert page.get_by_role("link", name="+ Submit job").count() == 0
    assert page.get_by_role("button", name="Cancel selected").count() == 0
    assert page.get_by_role("button", name=re.compile("^Cancel")).count() == 0
    page.goto(ws_url(srv, "jobs", "journey-wait-1"))
    assert page.get_by_role("button", name=re.compile("^Cancel")).count() == 0
    assert page.get_by_role("link", name="Clone").count() == 0
    axe_check(page)
    # The form posted by hand, with the Reader's own session and CSRF token: refused.
    token = page.locator("body").get_attribute("hx-headers") or ""
    csrf = re.search(r'"X-CSRF-Token":\s*"([^"]+)"', token)
    assert csrf is not None
    url = ws_url(srv, "jobs", "journey-wait-1", "cancel")
    expect_failed_load(page, url)
    refused = page.request.post(url, form={"csrf_token": csrf.group(1)}, max_redirects=0)
    assert refused.status == 403
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/jobs/journey-wait-1").json()["status"] != "Canceled"
    # Another user's instance's JupyterLab: refused (its open page's button posts; the proxy says no).
    opened = ws_url(srv, "compute", "journey-lab", "open", "jupyterlab")
    # Chromium logs the refusal (the proxy's 403, and the favicon its error page has none of).
    for refused_url in (
        opened,
        f"{srv.endpoint}/instances/journey-lab/jupyterlab/lab",
        f"{srv.endpoint}/favicon.ico",
    ):
        expect_failed_load(page, refused_url)
    page.goto(opened)
    with page.expect_navigation() as navigation:
        page.get_by_role("button", name="Open Jupyter Lab").click()
    assert navigation.value is not None and navigation.value.status == 403
