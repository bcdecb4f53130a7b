"""The SDK's parallel nodes (``azure.ai.ml.parallel.parallel_run_function``), the shape of Azure's
``sdk/python/jobs/parallel/`` notebooks, through the official azure-ai-ml SDK, unmodified: a
``@pipeline`` with a parallel node over a ``uri_folder`` of files (``tests/data/sdk_parallel/``, our
own small files and entry script), submitted with ``ml_client.jobs.create_or_update``, streamed to
the end; the rows ``run()`` returned, appended to the node's ``uri_file`` output, are downloaded
and the job is read back as the SDK's ``PipelineJob`` with its ``Parallel`` node. A parallel node
with no ``entry_script`` is refused with a 400 naming the field."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "sdk_parallel"

SDK_SCRIPT = r"""
import json, pathlib
from azure.ai.ml import Input, MLClient, Output
from azure.ai.ml.constants import AssetTypes
from azure.ai.ml.dsl import pipeline
from azure.ai.ml.entities import AmlCompute
from azure.ai.ml.parallel import parallel_run_function, RunFunction
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

ml_client = MLClient.from_config(DefaultAzureCredential())
ml_client.compute.begin_create_or_update(
    AmlCompute(name="cpu-cluster", size="Standard_DS3_v2", min_instances=0, max_instances=2)
).result()

file_batch_inference = parallel_run_function(
    name="file_batch_score",
    display_name="Batch Score with File Dataset",
    description="parallel component for batch score",
    inputs=dict(
        job_data_path=Input(type=AssetTypes.URI_FOLDER, description="The files to score in parallel"),
        suffix=Input(type="string", default="!"),
    ),
    outputs=dict(job_output_file=Output(type=AssetTypes.URI_FILE)),
    input_data="${{inputs.job_data_path}}",
    instance_count=2,
    max_concurrency_per_instance=2,
    mini_batch_size="2",
    mini_batch_error_threshold=1,
    error_threshold=-1,
    retry_settings=dict(max_retries=2, timeout=60),
    logging_level="DEBUG",
    environment_variables={"DATA_KIND": "words"},
    task=RunFunction(
        code="./src",
        entry_script="file_batch_inference.py",
        program_arguments="--suffix ${{inputs.suffix}}",
        environment="azureml://registries/azureml/environments/sklearn-1.5/labels/latest",
        append_row_to="${{outputs.job_output_file}}",
    ),
)

@pipeline()
def parallel_in_pipeline(pipeline_job_data_path):
    batch_inference_with_file_data = file_batch_inference(job_data_path=pipeline_job_data_path, suffix="ok")
    return {"pipeline_job_out_file": batch_inference_with_file_data.outputs.job_output_file}

pipeline_job = parallel_in_pipeline(
    pipeline_job_data_path=Input(type=AssetTypes.URI_FOLDER, path="./data/"),
)
pipeline_job.settings.default_compute = "cpu-cluster"
pipeline_job = ml_client.jobs.create_or_update(pipeline_job, experiment_name="pipeline_samples")
out("created", name=pipeline_job.name, type=pipeline_job.type)
ml_client.jobs.stream(pipeline_job.name)
done = ml_client.jobs.get(pipeline_job.name)
node = done.jobs["file_batch_score"]
out("done", status=str(done.status), steps=sorted(done.jobs), node_type=node.type,
    entry_script=node.task.entry_script, mini_batch_size=node.mini_batch_size)
version = str(node.component).rstrip("/").split("/")[-1].split(":")[-1]
component = ml_client.components.get("azureml_anonymous", version)
out("component", type=component.type, entry_script=component.task.entry_script,
    mini_batch_size=component.mini_batch_size, code=str(component.code))
ml_client.jobs.download(pipeline_job.name, download_path="./dl", output_name="pipeline_job_out_file")
out("rows", text=[p.read_text() for p in pathlib.Path("dl").rglob("*") if p.is_file()])
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-sdk-parallel")


def test_a_parallel_run_function_node_runs_as_written(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    shutil.copytree(SAMPLE, tmp_path, dirs_exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=400)}
    assert steps["created"]["type"] == "pipeline", steps
    done = steps["done"]
    assert done["status"].upper().endswith("COMPLETED"), done
    assert done["steps"] == ["file_batch_score"], done  # the node is named by its function
    assert (done["node_type"], done["entry_script"]) == ("parallel", "file_batch_inference.py"), done
    # The parallel component the SDK registered for the node, read back as one.
    component = steps["component"]
    assert (component["type"], component["entry_script"]) == ("parallel", "file_batch_inference.py"), (
        component
    )
    assert component["mini_batch_size"] == 2 and "/codes/" in component["code"], component
    [text] = steps["rows"]["text"]
    # A row per file, run() given mini-batches of two, init() its program arguments.
    assert sorted(text.split()) == [f"{c}.txt,{w}-ok" for c, w in zip("abcde", BATCH_WORDS, strict=True)], (
        text
    )


BATCH_WORDS = ("ant", "bee", "cat", "dog", "eel")


def _arm(srv: RunningServer) -> str:
    return (
        f"/subscriptions/{srv.subscription_id}/resourceGroups/default/providers/"
        "Microsoft.MachineLearningServices/workspaces/default"
    )


def test_a_parallel_node_without_an_entry_script_is_refused_naming_it(srv: RunningServer) -> None:
    node: dict[str, Any] = {
        "type": "parallel",
        "name": "score",
        "input_data": "${{inputs.job_data_path}}",
        "mini_batch_size": 2,
        "inputs": {
            "job_data_path": {
                "job_input_type": "uri_folder",
                "uri": "azureml://datastores/workspaceblobstore/paths/x/",
            }
        },
        "outputs": {},
        "task": {"type": "run_function", "code": "codes/" + "0" * 64},
        "componentId": "name: score\ntype: parallel\n",
    }
    body = {
        "properties": {
            "jobType": "Pipeline",
            "settings": {"default_compute": "local"},
            "jobs": {"score": node},
        }
    }
    with srv.client() as api:
        refused = api.put(f"{_arm(srv)}/jobs/no-entry-script", json=body)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["target"] == "properties.jobs.score.task.entry_script", error
        assert "entry_script" in error["message"], error
        assert api.get(f"{_arm(srv)}/jobs/no-entry-script").status_code == 404
