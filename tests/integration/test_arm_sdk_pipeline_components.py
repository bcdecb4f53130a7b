"""A ``@dsl.pipeline`` used as a component inside another pipeline, through the official azure-ai-ml
SDK, unmodified (issue 25.3): the SDK registers the inner pipeline as an anonymous pipeline
component (its steps' components first) and the outer pipeline names it by ``componentId`` in a
``type: pipeline`` step; the inner pipeline runs as a child pipeline whose output feeds the outer
pipeline's next step, and the outer pipeline's output is downloaded."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer
from tests.jobs_helpers import served

SDK_SCRIPT = r"""
import json, pathlib
from azure.ai.ml import Input, MLClient, Output, command
from azure.ai.ml.dsl import pipeline
from azure.ai.ml.entities import AmlCompute
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

ENV = "azureml://registries/azureml/environments/sklearn-1.5/labels/latest"
ml = MLClient.from_config(DefaultAzureCredential())
ml.compute.begin_create_or_update(
    AmlCompute(name="pc-cpu", size="Standard_DS3_v2", min_instances=0, max_instances=2,
               idle_time_before_scale_down=300)
).result()

prep = command(
    command="cat ${{inputs.raw}}/rows.csv > ${{outputs.prepped}}/data.txt"
            " && echo rows=${{inputs.rows}} >> ${{outputs.prepped}}/data.txt",
    environment=ENV,
    inputs={"rows": Input(type="integer"), "raw": Input(type="uri_folder")},
    outputs={"prepped": Output(type="uri_folder")},
    display_name="prep",
)
train = command(
    command="cat ${{inputs.data}}/data.txt && cp ${{inputs.data}}/data.txt ${{outputs.model}}/model.txt",
    environment=ENV,
    inputs={"data": Input(type="uri_folder")},
    outputs={"model": Output(type="uri_folder")},
    display_name="train",
)

@pipeline()
def data_pipeline(rows: int, raw: Input(type="uri_folder")):
    first = prep(rows=rows, raw=raw)
    return {"prepped": first.outputs.prepped}

@pipeline(default_compute="pc-cpu")
def outer(rows, raw):
    sub = data_pipeline(rows=rows, raw=raw)
    second = train(data=sub.outputs.prepped)
    return {"model": second.outputs.model}

pipe = outer(rows=7, raw=Input(type="uri_folder", path="./data"))
pipe.display_name = "sdk-nested"
created = ml.jobs.create_or_update(pipe)
out("created", name=created.name, type=created.type)
ml.jobs.stream(created.name)
done = ml.jobs.get(created.name)
out("done", status=str(done.status), steps=sorted(done.jobs))
ml.jobs.download(created.name, download_path="./dl", output_name="model")
out("download", text=[p.read_text() for p in pathlib.Path("dl").rglob("model.txt")])

from azure.ai.ml import load_component
registered = ml.components.create_or_update(load_component(source="hello_pc.yml"))
got = ml.components.get("hello_pc", version="1")
out("component", type=got.type, name=got.name, version=got.version, jobs=sorted(got.jobs))
"""
HELLO_PC = """
$schema: https://azuremlschemas.azureedge.net/latest/pipelineComponent.schema.json
name: hello_pc
version: 1
type: pipeline
inputs:
  greeting: {type: string, default: hello}
jobs:
  say:
    type: command
    component:
      command: echo ${{inputs.word}}
      environment: azureml://registries/azureml/environments/sklearn-1.5/labels/latest
      inputs:
        word: {type: string}
    inputs:
      word: ${{parent.inputs.greeting}}
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "arm-sdk-pipeline-components")


def test_a_dsl_pipeline_runs_as_a_component_of_another(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.csv").write_text("a,b\n1,2\n")
    (tmp_path / "hello_pc.yml").write_text(HELLO_PC)
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, azureml_env(srv.cli_env()), timeout=400)}
    assert steps["created"]["type"] == "pipeline", steps
    done = steps["done"]
    assert done["status"].upper().endswith("COMPLETED"), done
    assert done["steps"] == ["second", "sub"], done
    assert steps["download"]["text"] == ["a,b\n1,2\nrows=7\n"], steps["download"]
    # A pipeline component from its YAML, registered by the SDK and read back as one.
    assert steps["component"] == {
        "step": "component",
        "type": "pipeline",
        "name": "hello_pc",
        "version": "1",
        "jobs": ["say"],
    }
