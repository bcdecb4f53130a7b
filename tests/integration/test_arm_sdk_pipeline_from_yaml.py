"""Azure's flagship SDK pipeline notebook
(``sdk/python/jobs/pipelines/1a_pipeline_with_components_from_yaml``) through the official
azure-ai-ml SDK, its code cells as written: three named, versioned command components loaded with
``load_component`` from YAML files (``tests/data/sdk_pipeline_from_yaml/``, the notebook's shape
with our own small scripts), composed with ``@pipeline``, submitted with
``ml_client.jobs.create_or_update`` (which registers each as an *anonymous* component: the URL
names ``azureml_anonymous`` while the body's spec keeps ``train_model``) and streamed to the end.
Then the pipeline's outputs, downloaded, show that all three steps ran in order."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sdk_pipeline_from_yaml"

# Setup the notebook assumes (an attached cluster named cpu-cluster), then its cells as written.
SDK_SCRIPT = r"""
import contextlib, io, json, pathlib
from azure.ai.ml.entities import AmlCompute

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

# ---- the notebook, cell by cell ----
from azure.identity import DefaultAzureCredential, InteractiveBrowserCredential

from azure.ai.ml import MLClient, Input
from azure.ai.ml.dsl import pipeline
from azure.ai.ml import load_component

try:
    credential = DefaultAzureCredential()
    credential.get_token("https://management.azure.com/.default")
except Exception as ex:
    credential = InteractiveBrowserCredential()

ml_client = MLClient.from_config(credential=credential)
cluster_name = "cpu-cluster"
ml_client.compute.begin_create_or_update(  # (the workspace's cluster the notebook expects)
    AmlCompute(name=cluster_name, size="Standard_DS3_v2", min_instances=0, max_instances=2)
).result()
print(ml_client.compute.get(cluster_name))

parent_dir = "."
train_model = load_component(source=parent_dir + "/train_model.yml")
score_data = load_component(source=parent_dir + "/score_data.yml")
eval_model = load_component(source=parent_dir + "/eval_model.yml")
print(train_model)

@pipeline()
def pipeline_with_components_from_yaml(
    training_input,
    test_input,
    training_max_epochs=20,
    training_learning_rate=1.8,
    learning_rate_schedule="time-based",
):
    train_with_sample_data = train_model(
        training_data=training_input,
        max_epochs=training_max_epochs,
        learning_rate=training_learning_rate,
        learning_rate_schedule=learning_rate_schedule,
    )
    score_with_sample_data = score_data(
        model_input=train_with_sample_data.outputs.model_output, test_data=test_input
    )
    score_with_sample_data.outputs.score_output.mode = "upload"
    eval_with_sample_data = eval_model(
        scoring_result=score_with_sample_data.outputs.score_output
    )
    return {
        "trained_model": train_with_sample_data.outputs.model_output,
        "scored_data": score_with_sample_data.outputs.score_output,
        "evaluation_report": eval_with_sample_data.outputs.eval_output,
    }

pipeline_job = pipeline_with_components_from_yaml(
    training_input=Input(type="uri_folder", path=parent_dir + "/data/"),
    test_input=Input(type="uri_folder", path=parent_dir + "/data/"),
    training_max_epochs=20,
    training_learning_rate=1.8,
    learning_rate_schedule="time-based",
)
pipeline_job.settings.default_compute = "cpu-cluster"
print(pipeline_job)

pipeline_job = ml_client.jobs.create_or_update(
    pipeline_job, experiment_name="pipeline_samples"
)
out("created", name=pipeline_job.name, type=pipeline_job.type, experiment=pipeline_job.experiment_name)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    ml_client.jobs.stream(pipeline_job.name)
out("stream", text=buf.getvalue())
# ---- end of the notebook: what it produced ----
done = ml_client.jobs.get(pipeline_job.name)
out("done", status=str(done.status), steps=sorted(done.jobs))
ml_client.jobs.download(pipeline_job.name, download_path="./dl", output_name="evaluation_report")
out("eval", text=[p.read_text() for p in pathlib.Path("dl").rglob("eval_result.txt")])
ref = str(done.jobs["train_with_sample_data"].component)  # the registered component's ARM id
train = ml_client.components.get("azureml_anonymous", ref.rstrip("/").split("/")[-1].split(":")[-1])
out("component", ref=ref, name=train.name, display=train.display_name, anonymous=train._is_anonymous)
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-sdk-pipeline-yaml")


def test_notebook_pipeline_of_named_yaml_components_runs_as_written(
    srv: RunningServer, tmp_path: Path
) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    shutil.copytree(SAMPLE, tmp_path, dirs_exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=500)}

    assert steps["created"]["type"] == "pipeline" and steps["created"]["experiment"] == "pipeline_samples"
    log = steps["stream"]["text"]
    assert "Execution Summary" in log and "Completed" in log, log
    done = steps["done"]
    assert done["status"].upper().endswith("COMPLETED"), done
    assert done["steps"] == ["eval_with_sample_data", "score_with_sample_data", "train_with_sample_data"]
    [text] = steps["eval"]["text"]
    # All three ran in order, with the pipeline's literal inputs and the data folder.
    assert text.startswith("Eval done of:\nScored with the following model:\n"), text
    assert "epochs=20 lr=1.8 schedule=time-based data=['sample1.csv']" in text, text
    component = steps["component"]
    assert component["name"] == "azureml_anonymous" and component["anonymous"] is True, component
    assert component["display"] == "Train Model", component
