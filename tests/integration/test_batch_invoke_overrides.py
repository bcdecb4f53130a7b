"""Issue 25: ``batch-endpoint invoke`` overrides the deployment's settings for one batch job, as
``az ml batch-endpoint invoke`` does (cli/batch-score.sh, deploy-models/mnist-classifier):
``--mini-batch-size``, ``--instance-count``, ``--output-path`` with ``--set output_file_name=…``,
and ``--f inputs.yml`` (the deploy-pipelines samples' invocation file). Real server, agents and
scoring processes: the driver's log counts the mini-batches, the predictions lie at the path given.
Bad overrides are a 400 naming the field, with no job made.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import cli_json, create_compute, error_of, finished_parent, log_text, served

CLUSTER = "ovr-cluster"
SCORE = (
    "def init():\n    pass\n\ndef run(mini_batch):\n    return [open(p).read().strip() for p in mini_batch]\n"
)
OUT = "azureml://datastores/workspaceblobstore/paths/scored/{}/"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "batch-overrides", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def project(srv: RunningServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An endpoint whose default deployment scores one file per mini-batch, and 10 files."""
    root = tmp_path_factory.mktemp("overrides")
    (root / "src").mkdir()
    (root / "src" / "score.py").write_text(SCORE)
    (root / "rows").mkdir()
    for i in range(10):
        (root / "rows" / f"r{i:02d}.txt").write_text(f"row {i}\n")
    spec = {
        "name": "blue",
        "endpoint_name": "ovr",
        "code_configuration": {"code": "src", "scoring_script": "score.py"},
        "compute": f"azureml:{CLUSTER}",
        "settings": {"mini_batch_size": 1, "output_file_name": "predictions.csv"},
    }
    (root / "blue.yml").write_text(yaml.safe_dump(spec))
    with srv.client() as api:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, CLUSTER, {**body, "idle_time_before_scale_down": 120})
    cli_json(srv, "batch-endpoint", "create", "-n", "ovr", cwd=root)
    cli_json(srv, "batch-deployment", "create", "-f", "blue.yml", cwd=root)
    return root


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def scored(api: httpx.Client, srv: RunningServer, name: str) -> tuple[dict[str, Any], str]:
    done = finished_parent(api, srv, name, timeout=120)
    assert done["status"] == "Completed", done
    (child,) = done["children"]
    return done, log_text(api, srv, child["name"])


def stored(api: httpx.Client, srv: RunningServer, uri: str) -> dict[str, Any]:
    """What the datastore holds at URI (``azureml://datastores/<d>/paths/<p>``)."""
    store, _, path = uri.removeprefix("azureml://datastores/").partition("/paths/")
    answer = api.get(f"{srv.ws_path}/datastores/{store}/paths/{path}")
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_flags_override_the_deployment_for_one_job(
    api: httpx.Client, srv: RunningServer, project: Path
) -> None:
    args = ("batch-endpoint", "invoke", "-n", "ovr", "--input", "rows", "--job-name", "o1")
    overrides = ("--mini-batch-size", "4", "--instance-count", "2", "--output-path", OUT.format("o1"))
    cli_json(srv, *args, *overrides, "--set", "output_file_name=scores.csv", cwd=project)
    done, log = scored(api, srv, "o1")
    assert "batch driver: 3 mini-batches" in log, log  # 10 files, 4 a mini-batch (the deployment: 1)
    assert done["settings"]["mini_batch_size"] == 4 and done["settings"]["instance_count"] == 2, done
    assert stored(api, srv, OUT.format("o1") + "scores.csv")["kind"] == "file"
    out = project / "o1-out"
    cli_json(srv, "job", "download", "-n", "o1", "--output-name", "score", "-p", str(out))
    rows = next(out.rglob("scores.csv")).read_text().splitlines()
    assert rows == [f"row {i}" for i in range(10)]
    # the deployment itself is as it was: the next job scores one file a mini-batch again
    blue = cli_json(srv, "batch-deployment", "show", "-n", "blue", "-e", "ovr")
    assert blue["mini_batch_size"] == 1 and blue["output_file_name"] == "predictions.csv"
    cli_json(srv, "batch-endpoint", "invoke", "-n", "ovr", "--input", "rows", "--job-name", "o2", cwd=project)
    assert "batch driver: 10 mini-batches" in scored(api, srv, "o2")[1]


def test_an_invocation_file_gives_inputs_outputs_and_settings(
    api: httpx.Client, srv: RunningServer, project: Path
) -> None:
    """``az ml batch-endpoint invoke -n E --f inputs.yml`` (deploy-pipelines samples' shape)."""
    doc = {
        "inputs": {"input_data": {"type": "uri_folder", "path": "rows"}},
        "outputs": {"scores": {"type": "uri_folder", "mode": "upload", "path": OUT.format("o3")}},
        "mini_batch_size": 5,
    }
    (project / "inputs.yml").write_text(yaml.safe_dump(doc))
    args = ("batch-endpoint", "invoke", "-n", "ovr", "--f", "inputs.yml", "--job-name", "o3")
    cli_json(srv, *args, "--set", "mini_batch_size=2", cwd=project)  # --set wins over the file
    _, log = scored(api, srv, "o3")
    assert "batch driver: 5 mini-batches" in log, log
    assert stored(api, srv, OUT.format("o3") + "predictions.csv")["kind"] == "file"


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"mini_batch_size": 0}, "mini_batch_size"),
        ({"instance_count": "many"}, "instance_count"),
        ({"output_path": "s3://bucket/out"}, "output_path"),
        ({"output_path": "azureml://datastores/workspaceblobstore/paths/../x"}, "output_path"),
        ({"output_file_name": "../up.csv"}, "output_file_name"),
        ({"retry_settings": {"timeout": 0}}, "retry_settings.timeout"),
        ({"minibatch_size": 3}, "minibatch_size"),
    ],
)
def test_bad_overrides_are_400_naming_the_field_and_make_no_job(
    api: httpx.Client, srv: RunningServer, project: Path, override: dict[str, Any], field: str
) -> None:
    url = f"{srv.ws_path}/batchEndpoints/ovr/invoke"
    body = {
        "input": "azureml://datastores/workspaceblobstore/paths/nowhere/",
        "job_name": "bad-ovr",
        **override,
    }
    error = error_of(api.post(url, json=body))
    assert error["target"] == field, error
    assert field.split(".")[0] in error["message"], error
    assert api.get(f"{srv.ws_path}/jobs/bad-ovr").status_code == 404


def test_output_path_on_a_file_is_refused(api: httpx.Client, srv: RunningServer, project: Path) -> None:
    taken = OUT.format("o1") + "scores.csv"  # written by the first test
    if api.get(f"{srv.ws_path}/jobs/o1").status_code == 404:
        pytest.skip("needs the first test's output")
    body = {"input": OUT.format("o1"), "job_name": "bad-file", "output_path": taken}
    error = error_of(api.post(f"{srv.ws_path}/batchEndpoints/ovr/invoke", json=body))
    assert error["target"] == "output_path" and "is a file" in error["message"], error


SDK_INVOKE = r"""
import json
from azure.ai.ml import Input, MLClient, Output
from azure.core.exceptions import HttpResponseError
from azure.identity import DefaultAzureCredential

ml = MLClient.from_config(DefaultAzureCredential())
job = ml.batch_endpoints.invoke(
    endpoint_name="ovr",
    input=Input(type="uri_folder", path="rows"),
    job_name="o-sdk",
    outputs={"score": Output(type="uri_folder", path="%s")},
    params_override=[{"mini_batch_size": 5}, {"output_file_name": "sdk.csv"}, {"error_threshold": 2}],
)
try:
    ml.batch_endpoints.invoke(endpoint_name="ovr", input=Input(type="uri_folder", path="rows"),
                              job_name="o-sdk-bad", params_override=[{"mini_batch_size": 0}])
    refused = None
except HttpResponseError as exc:
    refused = str(exc)
print("RESULT " + json.dumps({"name": job.name, "refused": refused}), flush=True)
"""


def test_the_sdk_overrides_through_params_override_and_outputs(
    api: httpx.Client, srv: RunningServer, project: Path
) -> None:
    """``batch_endpoints.invoke(params_override=…, outputs=…)`` through the ARM facade."""
    sdk_python()
    config = ("azureml", "config", "--path", str(project / "config.json"))
    subprocess.run([sys.executable, "-m", "cloudlet", *config], env=srv.cli_env(), check=True)
    script = SDK_INVOKE % OUT.format("o-sdk")
    (result,) = run_sdk(script, project, azureml_env(srv.cli_env()), timeout=300)
    assert result["name"] == "o-sdk", result
    assert "properties.miniBatchSize" in result["refused"], result  # named as the SDK's body names it
    assert api.get(f"{srv.ws_path}/jobs/o-sdk-bad").status_code == 404
    done, log = scored(api, srv, "o-sdk")
    assert "batch driver: 2 mini-batches" in log, log
    assert done["settings"]["error_threshold"] == 2, done
    assert stored(api, srv, OUT.format("o-sdk") + "sdk.csv")["kind"] == "file"
