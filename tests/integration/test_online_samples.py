"""Azure's online deployment samples in their own shapes, through the CLI (issue 25): files of our
own under tests/data/azureml_samples/online/ laid out as ``cli/endpoints/online/managed/sample/``
and ``model-1/`` are, run with ``cloudlet online-endpoint`` / ``online-deployment`` as the
sample's script runs ``az ml``.

``blue-deployment.yml`` names ``model: path: ../../model-1/model/``; its score.py reads
``$AZUREML_MODEL_DIR/model/sklearn_regression_model.pkl``: the folder lies under
AZUREML_MODEL_DIR by its name, as on Azure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cloudlet.control.online_replicas import default_python
from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served_for_inference

SAMPLES = Path(__file__).parent.parent / "data" / "azureml_samples" / "online"
TRAIN = """
import sys, joblib
from sklearn.linear_model import LogisticRegression
X = [[0, 0], [0, 1], [1, 0], [1, 1], [5, 5], [5, 6], [6, 5], [6, 6]]
joblib.dump(LogisticRegression().fit(X, [0, 0, 0, 0, 1, 1, 1, 1]), sys.argv[1])
"""
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served_for_inference(tmp_path_factory, "online-samples")


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cloudlet", *args]
    done = subprocess.run(argv, env=srv.cli_env(), cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    return done


@pytest.fixture()
def samples(tmp_path: Path) -> Path:
    root = tmp_path / "online"
    shutil.copytree(SAMPLES, root)
    (root / "model-1" / "model").mkdir()
    model = root / "model-1" / "model" / "sklearn_regression_model.pkl"
    subprocess.run([default_python(), "-c", TRAIN, str(model)], check=True)
    return root


def test_managed_sample_blue_deployment_as_written(srv: RunningServer, samples: Path) -> None:
    """The canonical managed sample: its model folder is AZUREML_MODEL_DIR/model, so init() loads."""
    sample = samples / "managed" / "sample"
    cli(srv, "online-endpoint", "create", "--file", "endpoint.yml", cwd=sample)
    shown = json.loads(
        cli(
            srv, "online-deployment", "create", "--file", "blue-deployment.yml", "--all-traffic", cwd=sample
        ).stdout
    )
    assert shown["provisioning_state"] == "Succeeded", shown.get("reason")
    assert shown["model"].startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/"), shown
    assert shown["model"].rstrip("/").endswith("/model"), shown
    answer = cli(
        srv,
        "online-endpoint",
        "invoke",
        "--name",
        "my-endpoint",
        "--request-file",
        "sample-request.json",
        cwd=sample,
    )
    assert json.loads(answer.stdout) == [0, 1]


PICKLE = """
import sys, cloudpickle
from sklearn.linear_model import LogisticRegression
X = [[0, 0], [0, 1], [1, 0], [1, 1], [5, 5], [5, 6], [6, 5], [6, 6]]
with open(sys.argv[1], "wb") as out:
    cloudpickle.dump(LogisticRegression().fit(X, [0, 0, 0, 0, 1, 1, 1, 1]), out)
"""


def test_mlflow_model_without_a_scoring_script(srv: RunningServer, samples: Path) -> None:
    """``cli/endpoints/online/ncd``: an MLflow model (``type: mlflow_model``) deployed with no
    code_configuration and no environment is scored with its own flavor (mlflow.pyfunc) in an
    environment built from the model's conda.yaml; Azure's ``input_data`` request answers a list,
    MLflow's ``dataframe_split`` ``{"predictions": …}``; a request of neither shape is refused."""
    ncd = samples / "ncd"
    pickle = ncd / "sklearn-classifier" / "model" / "model.pkl"
    subprocess.run([default_python(), "-c", PICKLE, str(pickle)], check=True)
    cli(srv, "online-endpoint", "create", "--name", "ncd-ep", "-f", "create-endpoint.yaml", cwd=ncd)
    shown = json.loads(
        cli(
            srv, "online-deployment", "create", "--name", "sklearn-deployment", "--endpoint-name", "ncd-ep",
            "-f", "sklearn-deployment.yaml", "--all-traffic", cwd=ncd,
        ).stdout
    )  # fmt: skip
    assert shown["provisioning_state"] == "Succeeded", shown.get("reason")
    assert "code_configuration" not in shown and shown["model_type"] == "mlflow_model", shown
    assert shown["environment"]["conda_file"]["name"] == "mlflow-env", shown["environment"]
    answer = cli(
        srv,
        "online-endpoint",
        "invoke",
        "-n",
        "ncd-ep",
        "--request-file",
        "sample-request-sklearn.json",
        cwd=ncd,
    )
    assert json.loads(answer.stdout) == [0, 1]
    split = {"dataframe_split": {"columns": ["a", "b"], "data": [[6.0, 6.0], [0.0, 1.0]]}}
    (ncd / "split.json").write_text(json.dumps(split))
    answer = cli(srv, "online-endpoint", "invoke", "-n", "ncd-ep", "--request-file", "split.json", cwd=ncd)
    assert json.loads(answer.stdout) == {"predictions": [1, 0]}
    (ncd / "bad.json").write_text(json.dumps({"rows": [[0, 0]]}))
    argv = [sys.executable, "-m", "cloudlet", "online-endpoint", "invoke", "-n", "ncd-ep", "-r", "bad.json"]
    bad = subprocess.run(argv, env=srv.cli_env(), cwd=ncd, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "input_data" in bad.stderr, bad.stderr


def test_a_custom_model_without_a_scoring_script_is_refused(srv: RunningServer, samples: Path) -> None:
    """Only an MLflow model may go without code_configuration: the 400 names the field and why."""
    sample = samples / "managed" / "sample"
    cli(srv, "online-endpoint", "create", "--name", "nocode-ep", "-f", "endpoint.yml", cwd=sample)
    doc = "name: plain\nmodel:\n  path: ../../model-1/model/\ninstance_type: Standard_DS3_v2\n"
    (sample / "plain.yml").write_text(doc)
    argv = [
        sys.executable,
        "-m",
        "cloudlet",
        "online-deployment",
        "create",
        "-e",
        "nocode-ep",
        "-f",
        "plain.yml",
    ]
    done = subprocess.run(argv, env=srv.cli_env(), cwd=sample, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout
    assert "code_configuration" in done.stderr and "mlflow_model" in done.stderr, done.stderr


SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient, load_online_deployment, load_online_endpoint
from azure.identity import DefaultAzureCredential

ml = MLClient.from_config(DefaultAzureCredential())
endpoint = load_online_endpoint("endpoint.yml")
endpoint.name = "sdk-sample-ep"
ml.online_endpoints.begin_create_or_update(endpoint).result()
blue = load_online_deployment("blue-deployment.yml")
blue.endpoint_name = "sdk-sample-ep"
made = ml.online_deployments.begin_create_or_update(blue).result()
answer = ml.online_endpoints.invoke(
    endpoint_name="sdk-sample-ep", deployment_name="blue", request_file="sample-request.json"
)
print("\nRESULT " + json.dumps({"state": made.provisioning_state, "answer": json.loads(answer)}))
"""


def test_managed_sample_through_the_sdk(srv: RunningServer, samples: Path) -> None:
    """The same sample loaded and deployed by the azure-ai-ml SDK (``load_online_deployment``): the
    SDK registers the model folder itself, and the replica finds it at AZUREML_MODEL_DIR/model."""
    sdk_python()
    sample = samples / "managed" / "sample"
    config = ["azureml", "config", "--path", str(sample / "config.json")]
    subprocess.run(
        [sys.executable, "-m", "cloudlet", *config], env=srv.cli_env(), check=True, capture_output=True
    )
    (result,) = run_sdk(SDK_SCRIPT, sample, azureml_env(srv.cli_env()), timeout=380)
    assert result == {"state": "Succeeded", "answer": [0, 1]}, result
