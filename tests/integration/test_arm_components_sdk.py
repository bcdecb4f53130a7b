"""The official azure-ai-ml SDK, unmodified, over HTTPS: components through the ARM facade
(api/arm/components.py). ``components.create_or_update(load_component("train.yml"))`` (its local
code uploaded, its inline environment registered), ``get`` by version and ``@latest``, ``list``,
archive and restore; the anonymous components the SDK registers for a ``@dsl.pipeline``'s steps
(what ``jobs.create_or_update`` does before it sends the pipeline); and a registered component run
as a command job on a cluster. Checked against the native REST API."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cloudlet.domain.assets.components import command_job_doc, parse_component
from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer, _kill_with_its_nodes, start_server
from tests.jobs_helpers import log_text, submit, wait_job

PROVIDER = "providers/Microsoft.MachineLearningServices"
CLUSTER = {
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "min_instances": 0,
    "max_instances": 1,
    "idle_time_before_scale_down": 60,
}
TRAIN = {
    "$schema": "https://azuremlschemas.azureedge.net/latest/commandComponent.schema.json",
    "type": "command",
    "name": "train_model",
    "display_name": "Train",
    "inputs": {
        "training_data": {"type": "uri_folder"},
        "epochs": {"type": "integer", "default": 3, "min": 1, "max": 10},
        "rate": {"type": "number", "default": 0.5},
        "note": {"type": "string", "optional": True},
    },
    "outputs": {"model": {"type": "uri_folder"}},
    "code": "./src",
    "environment": {"image": "python:3.11-slim"},
    "command": (
        "python train.py --data ${{inputs.training_data}} --epochs ${{inputs.epochs}} "
        "--rate ${{inputs.rate}} $[[--note ${{inputs.note}}]] --out ${{outputs.model}}"
    ),
}
TRAIN_PY = """
import argparse, pathlib
p = argparse.ArgumentParser()
for a in ("--data", "--epochs", "--rate", "--note", "--out"):
    p.add_argument(a)
a = p.parse_args()
print("sdk-component-ran", a.epochs, a.rate, a.note, sorted(x.name for x in pathlib.Path(a.data).iterdir()))
pathlib.Path(a.out, "model.txt").write_text("trained")
"""

SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient, Input, Output, command, load_component
from azure.ai.ml.dsl import pipeline
from azure.ai.ml.entities import Environment
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

def io_of(component):
    return {
        "inputs": {k: {"type": v.type, "default": v.default, "optional": v.optional}
                   for k, v in component.inputs.items()},
        "outputs": {k: v.type for k, v in component.outputs.items()},
    }

ml = MLClient.from_config(DefaultAzureCredential())
made = ml.components.create_or_update(load_component("train.yml"))
out("create", name=made.name, version=made.version, id=made.id, code=made.code,
    env=made.environment, command=made.command, **io_of(made))
again = ml.components.create_or_update(load_component("train.yml"))
out("again", version=again.version, code=again.code)
got = ml.components.get("train_model", version="1")
out("get", version=got.version, display_name=got.display_name, deterministic=got.is_deterministic,
    env=got.environment, code=got.code, **io_of(got))
out("latest", version=ml.components.get("train_model").version)
out("list", names=sorted(c.name for c in ml.components.list()))
out("versions", versions=[c.version for c in ml.components.list(name="train_model")])
ml.components.archive("train_model", version="2")
out("archived", latest=ml.components.get("train_model").version,
    versions=[c.version for c in ml.components.list(name="train_model")])
ml.components.restore("train_model", version="2")
out("restored", latest=ml.components.get("train_model").version)

prep = command(
    command="mkdir -p ${{outputs.prepped}} && cp -r ${{inputs.raw}}/. ${{outputs.prepped}}",
    environment=Environment(image="python:3.11-slim"),
    inputs={"raw": Input(type="uri_folder")},
    outputs={"prepped": Output(type="uri_folder")},
    display_name="prep",
)

@pipeline(default_compute="cpu-cluster")
def two_steps(raw):
    first = prep(raw=raw)
    second = got(training_data=first.outputs.prepped, epochs=4)
    return {"model": second.outputs.model}

job = two_steps(raw=Input(type="uri_folder", path="./data"))
ml.jobs._resolve_arm_id_or_upload_dependencies(job)  # what jobs.create_or_update does first
out("pipeline", components={k: str(j.component) for k, j in job.jobs.items()}, raw=job.inputs.raw.path)
job2 = two_steps(raw=Input(type="uri_folder", path="./data"))
ml.jobs._resolve_arm_id_or_upload_dependencies(job2)  # the same steps again: the same versions
out("pipeline-again", components={k: str(j.component) for k, j in job2.jobs.items()})

"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("arm-components") / "home")
    with server.client() as api:
        assert api.put(server.ws_path + "/computes/cpu-cluster", json=CLUSTER).status_code == 201
    yield server
    _kill_with_its_nodes(server)


def arm_ws(srv: RunningServer) -> str:
    return f"/subscriptions/{srv.subscription_id}/resourceGroups/default/{PROVIDER}/workspaces/default"


def steps_of(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["step"]: r for r in results}


def test_sdk_components(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(TRAIN_PY)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rows.csv").write_text("a,b\n1,2\n")
    (tmp_path / "train.yml").write_text(yaml.safe_dump(TRAIN))
    env = azureml_env(srv.cli_env())
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = steps_of(run_sdk(SDK_SCRIPT, tmp_path, env, timeout=280))
    ws = arm_ws(srv)

    # create: the local code uploaded and registered, the inline environment an anonymous one
    made = steps["create"]
    assert (made["name"], made["version"]) == ("train_model", "1")
    assert made["id"] == f"{ws}/components/train_model/versions/1"
    assert made["code"].startswith(f"{ws}/codes/") and made["code"].endswith("/versions/1"), made
    assert made["env"].startswith(f"{ws}/environments/CliV2AnonymousEnvironment/versions/"), made
    assert made["command"] == TRAIN["command"]
    assert made["inputs"]["epochs"] == {"type": "integer", "default": 3, "optional": False}
    assert made["inputs"]["note"] == {"type": "string", "default": None, "optional": True}
    assert made["inputs"]["rate"]["default"] == 0.5 and made["outputs"] == {"model": "uri_folder"}
    # again: the next version (the SDK auto-increments), the same code
    assert steps["again"]["version"] == "2" and steps["again"]["code"] == made["code"]
    got = steps["get"]
    assert (got["version"], got["display_name"], got["deterministic"]) == ("1", "Train", True)
    assert got["inputs"] == made["inputs"] and got["env"] == made["env"] and got["code"] == made["code"]
    assert steps["latest"]["version"] == "2"
    assert steps["list"]["names"] == ["train_model"] and steps["versions"]["versions"] == ["2", "1"]
    assert steps["archived"] == {"step": "archived", "latest": "1", "versions": ["1"]}
    assert steps["restored"]["latest"] == "2"
    # a pipeline's steps: the inline command registered as an anonymous component (its content
    # hash the version, the same both times), the registered one named as it is
    components = steps["pipeline"]["components"]
    anonymous = components["first"]
    assert anonymous.startswith(f"{ws}/components/azureml_anonymous/versions/"), components
    assert components["second"] == f"{ws}/components/train_model/versions/1"
    assert steps["pipeline-again"]["components"] == components

    with srv.client() as api:
        versions = api.get(f"{srv.ws_path}/components/azureml_anonymous/versions").json()["value"]
        assert [v["version"] for v in versions] == [anonymous.rsplit("/", 1)[1]]  # registered once
        assert (
            versions[0]["display_name"] == "prep"
            and versions[0]["outputs"]["prepped"]["type"] == "uri_folder"
        )
        stored = api.get(f"{srv.ws_path}/components/train_model/versions/1").json()
        assert stored["code"].startswith("codes/"), stored  # the snapshot the agents download
        # What the SDK registered runs: the component as a command job on the cluster.
        spec = parse_component(
            {k: v for k, v in stored.items() if k not in ("id", "is_archived", "creation_context")}
        )
        raw = steps["pipeline"]["raw"]
        doc = command_job_doc(spec, {"training_data": raw, "note": "sdk"}, {}, {"compute": "cpu-cluster"})
        submit(api, srv, "sdk-component-job", doc)
        done = wait_job(api, srv, "sdk-component-job", timeout=180)
        text = log_text(api, srv, "sdk-component-job")
        assert done["status"] == "Completed", (done, text)
        assert "sdk-component-ran 3 0.5 sdk ['rows.csv']" in text, text
        # ARM errors name the ARM property
        bad = {"properties": {"componentSpec": {"type": "command", "command": "echo ${{inputs.x}}"}}}
        refused = api.put(f"{ws}/components/bad_one/versions/1", json=bad)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["target"] == "properties.componentSpec.command", refused.text
