"""Azure's batch deployment samples in their own shapes, through the CLI (issue 25): files of our
own under tests/data/azureml_samples/batch/ laid out as ``cli/endpoints/batch/deploy-models/``.

- Today's modelBatchDeployment YAML (``type: model``, ``settings:``, ``resources:``, an inline
  ``model: {name, path}``) is taken as written; the scoring script finds the model folder at
  ``$AZUREML_MODEL_DIR/<folder>/`` as Azure lays it out.
- An MLflow model registered with ``model create --type mlflow_model`` and deployed without
  code_configuration or environment (``heart-classifier-mlflow/deployment-simple``) is scored by
  its own flavor in an environment built from its conda.yaml; ``predictions.csv`` has a row per
  input row, ``row,prediction,file``, as Azure writes it.
- Pipeline-component deployments (``type: pipeline``, ``deploy-pipelines/``): a pipeline component
  from its YAML file (one step a registered component) and a registered one by reference; invoking
  the endpoint runs the component as a pipeline job with the invocation's input.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudlet.control.online_replicas import default_python
from tests.conftest import RunningServer
from tests.jobs_helpers import cli_json, create_compute, finished_parent, log_text, served

SAMPLES = Path(__file__).parent.parent / "data" / "azureml_samples"
CLUSTER = "batch-cluster"
PICKLE = """
import sys, cloudpickle
from sklearn.linear_model import LogisticRegression
X = [[0, 0], [0, 1], [1, 0], [1, 1], [5, 5], [5, 6], [6, 5], [6, 6]]
with open(sys.argv[1], "wb") as out:
    cloudpickle.dump(LogisticRegression().fit(X, [0, 0, 0, 0, 1, 1, 1, 1]), out)
"""
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "batch-samples", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(client, srv, CLUSTER, {**body, "idle_time_before_scale_down": 300})
        yield client


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> Any:
    return cli_json(srv, *args, cwd=cwd, timeout=120)


def finished(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    return finished_parent(api, srv, name, timeout=400)


def test_todays_deployment_shape_with_an_inline_model_folder(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    root = tmp_path / "mnist-shaped"
    shutil.copytree(SAMPLES / "batch" / "mnist-shaped", root)
    model = root / "deployment-custom" / "model"
    model.mkdir()
    (model / "model.json").write_text(json.dumps({"threshold": 0.5}))
    data = root / "data"
    data.mkdir()
    for index, value in enumerate((0.1, 0.9, 0.7)):
        (data / f"digit-{index}.txt").write_text(f"{value}\n")
    cli(srv, "batch-endpoint", "create", "-f", "endpoint.yml", cwd=root)
    made = cli(
        srv,
        "batch-deployment",
        "create",
        "--file",
        "deployment-custom/deployment.yml",
        "--set-default",
        cwd=root,
    )
    assert made["mini_batch_size"] == 2 and made["max_concurrency_per_instance"] == 2, made
    assert made["retry_settings"] == {"max_retries": 3, "timeout": 30}, made
    assert made["model"].endswith("/model") and made["model_type"] == "custom_model", made
    rows = _scored_rows(api, srv, "mnist-batch", root, tmp_path / "out")
    assert rows == ["digit-0.txt 0", "digit-1.txt 1", "digit-2.txt 1"]


def _scored_rows(api: httpx.Client, srv: RunningServer, endpoint: str, root: Path, out: Path) -> list[str]:
    """Invoke ENDPOINT on ROOT/data as the sample's script does, wait for the job to complete, and
    return the lines of the predictions.csv it wrote."""
    started = cli(srv, "batch-endpoint", "invoke", "--name", endpoint, "--input", "data", cwd=root)
    done = finished(api, srv, started["name"])
    assert done["status"] == "Completed", done
    cli(
        srv,
        "job",
        "download",
        "--name",
        started["name"],
        "--output-name",
        "score",
        "--download-path",
        str(out),
    )
    return next(out.rglob("predictions.csv")).read_text().splitlines()


def test_mlflow_model_without_code_or_environment(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    root = tmp_path / "heart-classifier-mlflow"
    shutil.copytree(SAMPLES / "batch" / "heart-classifier-mlflow", root)
    shutil.copytree(SAMPLES / "online" / "ncd" / "sklearn-classifier" / "model", root / "model")
    subprocess.run([default_python(), "-c", PICKLE, str(root / "model" / "model.pkl")], check=True)
    register = ("model", "create", "--name", "heart-classifier-mlflow", "--type", "mlflow_model")
    registered = cli(srv, *register, "--path", "model", cwd=root)
    assert registered["type"] == "mlflow_model", registered
    cli(srv, "batch-endpoint", "create", "-f", "endpoint.yml", cwd=root)
    made = cli(
        srv,
        "batch-deployment",
        "create",
        "--file",
        "deployment-simple/deployment.yml",
        "--set-default",
        cwd=root,
    )
    assert "code_configuration" not in made and made["model_type"] == "mlflow_model", made
    assert made["environment"]["conda_file"]["name"] == "mlflow-env", made["environment"]
    rows = _scored_rows(api, srv, "heart-classifier-batch", root, tmp_path / "out")
    expected = ["0,0,unlabeled-0.csv", "1,1,unlabeled-0.csv"]
    assert rows == [*expected, "0,1,unlabeled-1.csv", "1,0,unlabeled-1.csv", "2,0,unlabeled-1.csv"], rows


def test_a_custom_model_without_code_is_refused(srv: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "weights.txt").write_text("1\n")
    doc = "name: nocode\nendpoint_name: heart-classifier-batch\nmodel:\n  path: m\ncompute: batch-cluster\n"
    (tmp_path / "d.yml").write_text(doc)
    cli(srv, "batch-endpoint", "create", "-n", "plain-batch")
    argv = [
        sys.executable,
        "-m",
        "cloudlet",
        "batch-deployment",
        "create",
        "-f",
        "d.yml",
        "-e",
        "plain-batch",
    ]
    done = subprocess.run(argv, env=srv.cli_env(), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout
    assert "code_configuration" in done.stderr and "mlflow_model" in done.stderr, done.stderr


def test_pipeline_component_deployments_run_the_pipeline_with_the_invocation_input(
    api: httpx.Client, srv: RunningServer, tmp_path: Path
) -> None:
    # deploy-pipelines/batch-scoring-with-preprocessing's steps, then hello-batch's.
    root = tmp_path / "pipeline-shaped"
    shutil.copytree(SAMPLES / "batch" / "pipeline-shaped", root)
    cli(srv, "component", "create", "-f", "components/prepare/prepare.yml", cwd=root)
    cli(srv, "batch-endpoint", "create", "-f", "endpoint.yml", cwd=root)
    made = cli(srv, "batch-deployment", "create", "--file", "deployment.yml", "--set-default", cwd=root)
    assert made["type"] == "pipeline" and made["settings"]["default_compute"] == CLUSTER, made
    assert set(made["component"]["jobs"]) == {"preprocess_job", "score_job"}, made
    started = cli(
        srv, "batch-endpoint", "invoke", "--name", "rows-pipeline-batch", "--input", "data", cwd=root
    )
    done = finished(api, srv, started["name"])
    assert done["status"] == "Completed", done
    assert done["type"] == "pipeline" and done["tags"]["batch_deployment"] == "rows-prepros"
    out = tmp_path / "out"
    cli(
        srv,
        "job",
        "download",
        "--name",
        started["name"],
        "--output-name",
        "scores",
        "--download-path",
        str(out),
    )
    assert next(out.rglob("scores.csv")).read_text().split() == [
        "alpha,5,append",
        "beta,4,append",
        "gamma,5,append",
    ]
    listed = cli(srv, "batch-endpoint", "list-jobs", "--name", "rows-pipeline-batch")
    assert started["name"] in [j["name"] for j in listed], listed

    cli(srv, "component", "create", "-f", "hello-component/hello.yml", cwd=root)
    cli(srv, "batch-deployment", "create", "--file", "hello-deployment.yml", cwd=root)
    hello = cli(
        srv,
        "batch-endpoint",
        "invoke",
        "-n",
        "rows-pipeline-batch",
        "-d",
        "hello-batch-dpl",
        "--input",
        "data",
        cwd=root,
    )
    done = finished(api, srv, hello["name"])
    assert done["status"] == "Completed", done
    step = next(c for c in done["children"] if c["key"] == "main_job")
    assert "hello from a pipeline batch deployment" in log_text(api, srv, step["reused_from"] or step["name"])


def test_a_pipeline_deployment_is_refused_naming_the_field(api: httpx.Client, srv: RunningServer) -> None:
    cli(srv, "batch-endpoint", "create", "-f", str(SAMPLES / "batch" / "pipeline-shaped" / "endpoint.yml"))
    base = {
        "type": "pipeline",
        "component": "azureml:no_such_pipeline@latest",
        "settings": {"default_compute": CLUSTER},
    }
    path = f"{srv.ws_path}/batchEndpoints/rows-pipeline-batch/deployments/bad"
    for body, target in (
        (base, "component"),
        ({**base, "settings": {}}, "settings.default_compute"),
        (
            {
                **base,
                "settings": {"default_compute": "nope"},
                "component": {"type": "pipeline", "jobs": {"a": {"command": "true"}}},
            },
            "settings.default_compute",
        ),
        ({**base, "compute": CLUSTER}, "compute"),
        (
            {**base, "component": {"type": "pipeline", "jobs": {"a": {"command": "echo ${{inputs.x}}"}}}},
            "component.jobs.a.command",
        ),
    ):
        refused = api.put(path, json=body)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["target"] == target, (body, refused.text)
    assert api.get(path).status_code == 404
