"""Issue 28's batch and model steps in Chromium, as a new user walks them from sign-in: a batch
endpoint and its deployment from YAML (the code archive uploaded from the form) → invoke it on a
folder picked from disk (packed and uploaded by the page) → the invocation completes on the
cluster and its predictions file is downloaded and read → a model registered from a job's output
(``azureml://jobs/<job>/outputs/model``) → deployed (a batch deployment over REST) → the model
version's page says it is used by that deployment. A Reader sees no write control and a form
posted by hand is refused (403). Hostile tags, descriptions and model file names show as text
(the page fixture fails on any console error); axe-core on every page."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Any

from tests.browser import studio_helpers
from tests.browser.studio_helpers import (
    axe_check,
    expect_failed_load,
    load_yaml,
    requests_after_load,
    screenshot,
    sign_in,
    ws_url,
)
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import create_compute, submit, wait_job
from tests.online_helpers import tar_gz

studio_srv, browser, page = studio_helpers.studio_srv, studio_helpers.browser, studio_helpers.page
XSS_IMG = "<img src=x onerror=console.error(1)>"
XSS_SCRIPT = "</script><script>console.error(2)</script>"
HOSTILE = XSS_IMG + XSS_SCRIPT
CLUSTER = "batch-walk"
JOB_TIMEOUT_MS = 240_000  # a cluster scaling from 0 and a scoring job, on a loaded 2-core machine
SCORE = """\
import os

def init():
    pass

def run(mini_batch):
    rows = []
    for path in mini_batch:
        with open(path) as f:
            rows += [os.path.basename(path) + "," + line.strip() for line in f if line.strip()]
    return rows
"""
TRAIN = (
    "printf 'flavors:\\n  python_function:\\n    loader_module: mlflow.sklearn\\n'"
    " > ${{outputs.model}}/MLmodel"
    " && echo weights > ${{outputs.model}}/model.pkl"
    " && echo x > '${{outputs.model}}/<img src=x onerror=console.error(3)>.txt'"
)


def test_invoke_on_a_folder_register_from_a_job_deploy_and_used_by(
    studio_srv: RunningServer, page: Any, tmp_path: Path
) -> None:
    srv = studio_srv
    with srv.client() as api:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, CLUSTER, {**body, "idle_time_before_scale_down": 600})
    sign_in(page, srv)

    # A batch endpoint from its YAML.
    page.goto(ws_url(srv, "batch-endpoints"))
    assert page.get_by_role("link", name="Batch endpoints").get_attribute("aria-current") == "page"
    axe_check(page)
    page.get_by_role("link", name="Create from YAML").click()
    page.wait_for_url("**/batch-endpoints/_new")
    load_yaml(page, "Batch endpoint YAML", {"name": "walk-scorer", "description": HOSTILE}, "YAML file")
    axe_check(page)
    page.get_by_role("button", name="Create").click()
    page.wait_for_url("**/batch-endpoints/walk-scorer")
    assert page.get_by_text(HOSTILE).is_visible()  # the description, as text

    # Its deployment from YAML, the code folder as an archive uploaded by the form.
    page.get_by_text("Add a deployment from YAML").click()
    deployment = {
        "name": "blue",
        "code_configuration": {"code": "src", "scoring_script": "score.py"},
        "compute": f"azureml:{CLUSTER}",
        "mini_batch_size": 1,
        "output_file_name": "predictions.csv",
    }
    load_yaml(page, "Batch deployment YAML", deployment, "YAML file")
    archive = {"name": "src.tar.gz", "mimeType": "application/gzip", "buffer": tar_gz({"score.py": SCORE})}
    page.get_by_label("Code archive").set_input_files(files=[archive])
    page.locator("#code-help", has_text="Uploaded src.tar.gz").wait_for()
    page.get_by_label("Make it the default deployment").check()
    page.get_by_role("button", name="Create deployment").click()
    page.wait_for_url("**/batch-endpoints/walk-scorer")
    row = page.locator("#deployments tr", has_text="blue")
    assert row.get_by_text("default").is_visible() and row.get_by_text(CLUSTER).is_visible()

    # Invoke it on a folder from disk: the page packs it and uploads it, as the CLI would.
    rows = tmp_path / "rows"
    rows.mkdir()
    for part in range(3):
        (rows / f"part-{part}.csv").write_text("".join(f"{part * 10 + i}\n" for i in range(10)))
    page.get_by_label("Folder", exact=True).set_input_files(str(rows))
    page.locator("#folder-help", has_text="Uploaded rows (3 file(s))").wait_for()
    assert page.get_by_label("A folder from this computer").is_checked()
    page.get_by_label("Job name").fill("walk-batch-1")
    screenshot(page, "batch-endpoint-invoke")
    page.get_by_role("button", name="Invoke").click()
    page.wait_for_url("**/batch-endpoints/walk-scorer?invoked=walk-batch-1*")
    invocation = page.locator('tr[data-job="walk-batch-1"]')
    assert invocation.get_by_role("link", name="walk-batch-1").get_attribute("href", timeout=5000) == (
        f"/studio/ws/{srv.subscription_id}/default/default/jobs/walk-batch-1"
    )
    # The table is live (a server-sent event stream htmx swaps in) until the job has ended: the
    # page itself is not read again.
    requested = requests_after_load(page)
    invocation.get_by_text("Completed").wait_for(timeout=JOB_TIMEOUT_MS)
    assert requested == [], requested
    with page.expect_download() as download:
        invocation.get_by_role("link", name="Download predictions.csv").click()
    predictions = Path(download.value.path()).read_text().splitlines()
    assert len(predictions) == 30, predictions
    assert sorted(predictions) == sorted(f"part-{p}.csv,{p * 10 + i}" for p in range(3) for i in range(10))
    # The whole `score` output, as `job download --output-name score` reads it.
    with page.expect_download() as download:
        invocation.get_by_role("link", name="score (.tar.gz)").click()
    with tarfile.open(download.value.path()) as packed:
        names = [m.name for m in packed.getmembers() if m.isfile()]
        assert [Path(n).name for n in names] == ["predictions.csv"], names
        member = packed.extractfile(names[0])
        assert member is not None and len(member.read().decode().splitlines()) == 30
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "batch-endpoint")
    axe_check(page)

    # A model from a job's output.
    with srv.client() as api:
        job = {
            "command": TRAIN,
            "compute": f"azureml:{CLUSTER}",
            "outputs": {"model": {"type": "uri_folder"}},
        }
        submit(api, srv, "walk-train", job)
        wait_job(api, srv, "walk-train", ("Completed",), timeout=JOB_TIMEOUT_MS / 1000)
    page.goto(ws_url(srv, "models"))
    page.get_by_role("link", name="Register model").click()
    page.wait_for_url("**/models/_new")
    page.get_by_label("Name").fill("walk-model")
    page.get_by_label("Type").select_option("mlflow_model")
    page.get_by_label("Tags").fill(f"origin={XSS_IMG}")
    page.get_by_label("Description").fill(HOSTILE)
    page.get_by_label("A job's output").check()
    page.get_by_label("Job", exact=True).fill("walk-train")
    page.keyboard.press("Tab")  # the change event: the job's outputs are fetched
    page.locator("#f-output option[value='model']").wait_for(state="attached")
    page.get_by_label("Output", exact=True).select_option("model")
    axe_check(page)
    screenshot(page, "model-register")
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/models/walk-model/1")
    files = page.locator("#asset-files")
    files.get_by_role("link", name="model.pkl").wait_for()
    assert files.get_by_role("link", name="<img src=x onerror=console.error(3)>.txt").is_visible()
    assert page.locator(".props dd", has_text="onerror").first.inner_text() == HOSTILE  # the description
    assert page.locator(".props .tag").inner_text() == f"origin: {XSS_IMG}"
    assert page.locator("#flavors").get_by_text("python_function").is_visible()
    assert page.locator(".props").get_by_role("link", name="walk-train").is_visible()  # the job it came from
    assert page.get_by_text("No deployment uses this version").is_visible()
    with page.expect_download() as download:
        files.get_by_role("link", name="model.pkl").click()
    assert Path(download.value.path()).read_text() == "weights\n"

    # Deployed (as a batch deployment, over REST): the version is now used by it.
    with srv.client() as api:
        shown = api.get(f"{srv.ws_path}/batchEndpoints/walk-scorer/deployments/blue").json()
        with_model = {**deployment, "name": "green", "model": "azureml:walk-model:1"}
        with_model["code_configuration"] = shown["code_configuration"]
        put = api.put(f"{srv.ws_path}/batchEndpoints/walk-scorer/deployments/green", json=with_model)
        assert put.status_code == 201, put.text
    page.reload()
    used = page.locator("#used-by")
    assert used.get_by_text("Batch deployment green").is_visible()
    assert (
        used.get_by_role("link", name="walk-scorer").is_visible() and used.get_by_text("green").is_visible()
    )
    used.scroll_into_view_if_needed()  # the screenshot shows the flavors and the deployment
    screenshot(page, "model-version")
    axe_check(page)
    # A second version from files picked on this computer (packed and uploaded by the page).
    page.goto(ws_url(srv, "models", "walk-model"))
    page.wait_for_url("**/models/walk-model/1")  # a name opens its latest version
    axe_check(page)
    page.get_by_role("link", name="Register a version").click()
    page.wait_for_url("**/models/_new?name=walk-model&version=1")
    picked = [
        {"name": "model.pkl", "mimeType": "application/octet-stream", "buffer": b"weights v2\n"},
        {"name": "conda.yaml", "mimeType": "text/yaml", "buffer": b"dependencies: [python=3.11]\n"},
    ]
    page.get_by_label("Files", exact=True).set_input_files(files=picked)
    page.locator("#upload-status", has_text="Uploaded 2 files").wait_for()
    page.get_by_role("button", name="Register").click()
    page.wait_for_url("**/models/walk-model/2")
    assert page.locator("#asset-files").get_by_role("link", name="conda.yaml").is_visible()
    assert page.get_by_text("No deployment uses this version").is_visible()
    page.goto(ws_url(srv, "models"))
    page.get_by_role("link", name="walk-model").wait_for()
    screenshot(page, "models-list")
    axe_check(page)


def test_a_reader_sees_no_write_control_and_a_hand_posted_form_is_refused(
    studio_srv: RunningServer, page: Any
) -> None:
    srv = studio_srv
    with srv.client() as api:
        key = new_user(api, srv, "walk-reader", "Reader")
    sign_in(page, srv, key)
    page.goto(ws_url(srv, "batch-endpoints"))
    page.get_by_role("link", name="walk-scorer").wait_for()
    assert page.get_by_role("link", name="Create from YAML").count() == 0
    page.goto(ws_url(srv, "batch-endpoints", "walk-scorer"))
    page.locator("#invocation-jobs").wait_for()
    assert page.get_by_role("button", name="Invoke").count() == 0
    assert page.get_by_text("Add a deployment from YAML").count() == 0
    assert page.get_by_role("link", name=re.compile("Download predictions")).count() == 1  # reading is theirs
    axe_check(page)
    page.goto(ws_url(srv, "models", "walk-model", "1"))
    page.locator("#used-by").wait_for()
    assert page.get_by_role("button", name="Archive").count() == 0
    page.goto(ws_url(srv, "models"))
    page.get_by_role("link", name="walk-model").wait_for()
    assert page.get_by_role("link", name="Register model").count() == 0
    token = page.locator("body").get_attribute("hx-headers") or ""
    csrf = re.search(r'"X-CSRF-Token":\s*"([^"]+)"', token)
    assert csrf is not None
    archive = ws_url(srv, "models", "walk-model", "1", "archive")
    invoke = ws_url(srv, "batch-endpoints", "walk-scorer", "invoke")
    for url, form in ((archive, {}), (invoke, {"source": "asset", "data_asset": "azureml:x:1"})):
        expect_failed_load(page, url)
        refused = page.request.post(url, form={"csrf_token": csrf.group(1), **form}, max_redirects=0)
        assert refused.status == 403, url
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/models/walk-model/versions/1").json().get("archived") in (False, None)
        assert len(api.get(f"{srv.ws_path}/batchEndpoints/walk-scorer/jobs").json()["value"]) == 1
