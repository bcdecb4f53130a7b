"""Batch endpoints through the official azure-ai-ml SDK. First, a batch job made with the CLI
(``cloudlet batch-endpoint invoke``): its child ``<job>-score`` is a command job to ``jobs.get``, and
its predictions come back with ``jobs.download(child, output_name="score")``, as Azure ML's batch
endpoint samples do, and with ``jobs.download(<the batch job>, output_name="score")``. Then the SDK
alone through the ARM facade: ``batch_endpoints`` create/get/list, ``batch_deployments`` create
(uploading code and a model) and get, a default set by update, ``batch_endpoints.invoke`` over a
local folder and over a registered data asset, ``jobs.get`` of the batch job (pipeline-shaped,
tagged ``azureml.batchrun``), ``jobs.list(parent_job_name=…)``, the ``score`` output downloaded
from the child and from the batch job, and ``batch_endpoints.list_jobs``; ``jobs.stream`` of the
running batch job prints its scoring log (the driver's and ``run()``'s lines) and returns once it
has completed, and of a failed one (past ``error_threshold``) prints the log and raises the job's
error, as the SDK does on Azure ML."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, served, wait_job

SDK_SCRIPT = r"""
import json
from pathlib import Path
from azure.ai.ml import MLClient
from azure.identity import DefaultAzureCredential

ml = MLClient.from_config(DefaultAzureCredential())
child = ml.jobs.get("sdk-batch-score")
ml.jobs.download(child.name, download_path="./dl", output_name="score")
rows = next(Path("dl").rglob("predictions.csv")).read_text().splitlines()
ml.jobs.download("sdk-batch", download_path="./dl-parent", output_name="score")
combined = (Path("dl-parent") / "predictions.csv").read_text().splitlines()
result = {"step": "download", "status": str(child.status), "rows": len(rows), "combined": sorted(combined)}
print("RESULT " + json.dumps(result), flush=True)
"""
SCORE = (
    "def init():\n    pass\n\ndef run(mini_batch):\n    return [open(p).read().strip() for p in mini_batch]\n"
)
# The facade's: init() takes a moment, so the batch job is still running when jobs.stream starts
# following it (the SDK prints logs only while a job runs); run() says what it scores.
LIVE_SCORE = """
import time

def init():
    time.sleep(3)

def run(mini_batch):
    print("scoring", len(mini_batch), "files", flush=True)
    return [open(p).read().strip() for p in mini_batch]
"""
BAD_SCORE = "def init():\n    pass\n\ndef run(mini_batch):\n    raise ValueError('no model for these rows')\n"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "batch-sdk", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


def cli(srv: RunningServer, cwd: Path, *args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cloudlet", *args], env=srv.cli_env(), capture_output=True, text=True, cwd=cwd
    )
    assert done.returncode == 0, done.stderr


def test_sdk_downloads_a_batch_jobs_score_output(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(SCORE)
    (tmp_path / "rows").mkdir()
    for i in range(4):
        (tmp_path / "rows" / f"r{i}.txt").write_text(f"row {i}\n")
    spec = {
        "name": "blue",
        "endpoint_name": "sdkscorer",
        "code_configuration": {"code": "src", "scoring_script": "score.py"},
        "compute": "sdk-batch-cpu",
        "mini_batch_size": 2,
    }
    (tmp_path / "blue.yml").write_text(yaml.safe_dump(spec))
    with srv.client() as api:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, "sdk-batch-cpu", body)
        cli(srv, tmp_path, "batch-endpoint", "create", "-n", "sdkscorer")
        cli(srv, tmp_path, "batch-deployment", "create", "-f", "blue.yml")
        cli(
            srv,
            tmp_path,
            "batch-endpoint",
            "invoke",
            "-n",
            "sdkscorer",
            "--input",
            "rows",
            "--job-name",
            "sdk-batch",
        )
        assert wait_job(api, srv, "sdk-batch", timeout=120)["status"] == "Completed"
    cli(srv, tmp_path, "azureml", "config", "--path", str(tmp_path / "config.json"))
    (result,) = run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=300)
    assert result["status"] in ("Completed", "JobStatus.COMPLETED") and result["rows"] == 4, result
    assert result["combined"] == [f"row {i}" for i in range(4)], result


FACADE_SCRIPT = r"""
import contextlib, io, json, time
from pathlib import Path
from azure.ai.ml import Input, MLClient
from azure.ai.ml.entities import (BatchEndpoint, BatchRetrySettings, CodeConfiguration, Data, Model,
                                  ModelBatchDeployment, ModelBatchDeploymentSettings)
from azure.core.exceptions import ResourceNotFoundError
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}), flush=True)

ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
ml = MLClient.from_config(DefaultAzureCredential())
ml.batch_endpoints.begin_create_or_update(BatchEndpoint(name="facade")).result()
deployment = ModelBatchDeployment(
    name="blue", endpoint_name="facade", model=Model(path="./model", name="facade-model"),
    code_configuration=CodeConfiguration(code="./src", scoring_script="score.py"),
    environment=ENV, compute="sdk-batch-cpu",
    settings=ModelBatchDeploymentSettings(
        mini_batch_size=2, max_concurrency_per_instance=1, output_action="append_row",
        output_file_name="predictions.csv", retry_settings=BatchRetrySettings(max_retries=1, timeout=30),
        error_threshold=-1),
)
ml.batch_deployments.begin_create_or_update(deployment).result()
endpoint = ml.batch_endpoints.get("facade")
endpoint.defaults.deployment_name = "blue"
ml.batch_endpoints.begin_create_or_update(endpoint).result()
shown = ml.batch_deployments.get("blue", endpoint_name="facade")
default = ml.batch_endpoints.get("facade").defaults.deployment_name
out("deployment", mini_batch=shown.mini_batch_size, default=default,
    listed=[e.name for e in ml.batch_endpoints.list()])
def finished(name):
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        job = ml.jobs.get(name)  # the batch job itself: the parent
        if str(job.status).upper().endswith(("COMPLETED", "FAILED", "CANCELED")):
            return job
        time.sleep(0.5)
    raise AssertionError(f"{name} is still {job.status}")

def rows_of(folder):
    found = sorted(Path(folder).rglob("predictions.csv"))
    return [str(p.relative_to(folder)) for p in found], (found[0].read_text().splitlines() if found else [])

job = ml.batch_endpoints.invoke(endpoint_name="facade", input=Input(type="uri_folder", path="./rows"))
live = io.StringIO()
with contextlib.redirect_stdout(live):
    ml.jobs.stream(job.name)  # follows the running batch job: its scoring log, until it ends
streamed = str(ml.jobs.get(job.name).status)
parent = finished(job.name)
children = [c.name for c in ml.jobs.list(parent_job_name=job.name)]
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    ml.jobs.stream(job.name)  # an ended batch job prints its header only
child = ml.jobs.get(job.name + "-score")
ml.jobs.download(child.name, download_path="./dl", output_name="score")
ml.jobs.download(job.name, download_path="./dl-parent", output_name="score")
files, rows = rows_of("dl-parent")
out("invoke", job=job.name, status=str(child.status), rows=len(rows_of("dl")[1]),
    parent_status=str(parent.status), parent_type=parent.type, batchrun=parent.tags.get("azureml.batchrun"),
    children=children, parent_files=files, parent_rows=sorted(rows), stream=buf.getvalue(),
    live=live.getvalue(), streamed=streamed)

ml.data.create_or_update(Data(name="facade-rows", version="1", path="./rows", type="uri_folder"))
asset_job = ml.batch_endpoints.invoke(
    endpoint_name="facade", input=Input(type="uri_folder", path="azureml:facade-rows:1"))
asset_parent = finished(asset_job.name)
ml.jobs.download(asset_job.name, download_path="./dl-asset", output_name="score")
out("asset", status=str(asset_parent.status), rows=len(rows_of("dl-asset")[1]), job=asset_job.name)
out("list_jobs", names=[j.name for j in ml.batch_endpoints.list_jobs(endpoint_name="facade")],
    invoked=[job.name, asset_job.name])
# Last: invoke(deployment_name=…) leaves its header in the SDK's shared default headers
# (EndpointInvokeFields.DEFAULT_HEADER is updated in place), so later invokes would pick red too.
red = ModelBatchDeployment(
    name="red", endpoint_name="facade", model=Model(path="./model", name="facade-model-red"),
    code_configuration=CodeConfiguration(code="./bad", scoring_script="score.py"),
    environment=ENV, compute="sdk-batch-cpu",
    settings=ModelBatchDeploymentSettings(
        mini_batch_size=2, max_concurrency_per_instance=1, output_action="append_row",
        output_file_name="predictions.csv", retry_settings=BatchRetrySettings(max_retries=0, timeout=30),
        error_threshold=0),
)
ml.batch_deployments.begin_create_or_update(red).result()
bad = ml.batch_endpoints.invoke(
    endpoint_name="facade", deployment_name="red", input=Input(type="uri_folder", path="./rows"))
failed, raised = io.StringIO(), None
try:
    with contextlib.redirect_stdout(failed):
        ml.jobs.stream(bad.name)
except Exception as exc:  # the SDK raises a failed job's error
    raised = f"{type(exc).__name__}: {exc}"
out("failed", raised=raised, stream=failed.getvalue(), status=str(ml.jobs.get(bad.name).status), job=bad.name)
"""


def jobs_of(srv: RunningServer) -> list[tuple[str, str, str, Any]]:
    """The facade endpoint's jobs as the server has them (for a failure's message)."""
    with srv.client() as api:
        jobs = api.get(f"{srv.ws_path}/batchEndpoints/facade/jobs").json()["value"]
    return [(j["name"], j["status"], j["status_message"], j.get("error")) for j in jobs]


def test_sdk_drives_batch_endpoints_through_the_facade(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(LIVE_SCORE)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "score.py").write_text(BAD_SCORE)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.txt").write_text("1\n")
    (tmp_path / "rows").mkdir()
    for i in range(5):
        (tmp_path / "rows" / f"r{i}.txt").write_text(f"row {i}\n")
    with srv.client() as api:
        if api.get(f"{srv.ws_path}/computes/sdk-batch-cpu").status_code == 404:
            body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
            create_compute(api, srv, "sdk-batch-cpu", body)
    cli(srv, tmp_path, "azureml", "config", "--path", str(tmp_path / "config.json"))
    try:
        steps = {
            r["step"]: r for r in run_sdk(FACADE_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=300)
        }
    except AssertionError as exc:
        raise AssertionError(jobs_of(srv), str(exc)) from None
    listed = steps["deployment"].pop("listed")
    assert "facade" in listed, listed  # beside the module's other endpoints (its other test's)
    assert steps["deployment"] == {"step": "deployment", "mini_batch": 2, "default": "blue"}
    invoke = steps["invoke"]
    assert invoke["status"] in ("Completed", "JobStatus.COMPLETED") and invoke["rows"] == 5, invoke
    # The batch job itself: pipeline-shaped, tagged as a batch run, its one child the scoring job,
    # and jobs.download(<batch job>, output_name="score") writes the combined file at download_path.
    assert invoke["parent_status"].upper().endswith("COMPLETED"), invoke
    assert invoke["parent_type"] == "pipeline" and invoke["batchrun"] == "true", invoke
    assert invoke["children"] == [invoke["job"] + "-score"], invoke
    assert f"RunId: {invoke['job']}" in invoke["stream"], invoke  # jobs.stream of the batch job runs
    # ... and while it runs, it prints the scoring child's log (the driver's and run()'s lines)
    # and returns once the batch job has completed, as on Azure ML
    live = invoke["live"]
    assert invoke["streamed"].upper().endswith("COMPLETED"), invoke
    assert "Streaming user_logs/std_log.txt" in live, live
    assert "batch driver: 3 mini-batches on 1 processes" in live, live
    assert "scoring 2 files" in live and "scoring 1 files" in live, live
    assert "batch driver: 3 mini-batches scored, 0 failed (0 files), 5 rows" in live, live
    assert live.index("5 rows") < live.index("Execution Summary"), live
    # a failed batch job: stream prints the log up to the failure, then raises the job's error
    failed = steps["failed"]
    assert failed["status"].upper().endswith("FAILED"), failed
    assert failed["raised"] and failed["raised"].startswith("JobException"), failed
    assert "error_threshold" in failed["raised"], failed
    assert "giving up: ValueError: no model for these rows" in failed["stream"], failed
    assert invoke["parent_files"] == ["predictions.csv"], invoke
    assert invoke["parent_rows"] == [f"row {i}" for i in range(5)], invoke
    assert steps["asset"]["status"].upper().endswith("COMPLETED"), (steps["asset"], jobs_of(srv))
    assert steps["asset"]["rows"] == 5, steps["asset"]  # a registered data asset scored the same
    listed = steps["list_jobs"]
    assert set(listed["invoked"]) <= set(listed["names"]), listed
