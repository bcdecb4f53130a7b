"""The official azure-ai-ml SDK, unmodified, over HTTPS: environments, data and models through the
ARM facade (api/arm/assets.py), then a command job that uses them (``environment="py@latest"``, a
data and a model input) and one with an inline environment (``CliV2AnonymousEnvironment``).

One module-scoped server and one SDK process (each SDK import costs seconds); what the SDK did is
checked against the native REST API and the datastore on disk."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer, _kill_with_its_nodes, start_server

PROVIDER = "providers/Microsoft.MachineLearningServices"
CLUSTER = {
    "type": "amlcompute",
    "size": "Standard_DS3_v2",
    "min_instances": 0,
    "max_instances": 1,
    "idle_time_before_scale_down": 60,
}

SDK_SCRIPT = r"""
import contextlib, io, json
from azure.ai.ml import MLClient, Input, Output, command
from azure.ai.ml.entities import Data, Environment, Model
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}, default=str), flush=True)

ml = MLClient.from_config(DefaultAzureCredential())

env = ml.environments.create_or_update(Environment(name="py", image="python:3.11-slim"))
out("env", name=env.name, version=env.version, image=env.image, id=env.id)
again = ml.environments.create_or_update(Environment(name="py", image="python:3.11-slim"))
out("env-again", version=again.version)
conda = ml.environments.create_or_update(Environment(
    name="py", image="python:3.11-slim",
    conda_file={"name": "c", "dependencies": ["python=3.11", "pip", {"pip": ["six==1.16.0"]}]}))
out("env-conda", version=conda.version, conda=conda.conda_file)
got = ml.environments.get("py", version="1")
out("env-get", version=got.version, image=got.image)
latest = ml.environments.get("py", label="latest")
out("env-latest", version=latest.version)
out("env-list", names=sorted(e.name for e in ml.environments.list()))
out("env-versions", versions=[e.version for e in ml.environments.list(name="py")])

data = ml.data.create_or_update(Data(name="d", path="./local_folder", type="uri_folder"))
out("data", name=data.name, version=data.version, path=data.path, type=data.type)
got = ml.data.get("d", version="1")
out("data-get", version=got.version, path=got.path, type=got.type)
out("data-list", names=sorted(d.name for d in ml.data.list()))
try:
    ml.data.create_or_update(Data(name="d", version="1", path="./model_dir", type="uri_folder"))
    out("data-immutable", status=200)
except HttpResponseError as exc:
    out("data-immutable", status=exc.status_code, message=str(exc)[:600])
for version in ("1", "2"):
    made = ml.data.create_or_update(
        Data(name="scratch", version=version, path="./local_folder/a.txt", type="uri_file"))
    out("scratch-" + version, version=made.version, type=made.type)
ml.data.archive("scratch", version="2")
out("archived-one", latest=ml.data.get("scratch", label="latest").version,
    versions=[d.version for d in ml.data.list(name="scratch")])
ml.data.archive("scratch")
out("archived-all", names=sorted(d.name for d in ml.data.list()))
ml.data.restore("scratch")
out("restored", names=sorted(d.name for d in ml.data.list()),
    latest=ml.data.get("scratch", label="latest").version)

model = ml.models.create_or_update(Model(name="m", path="./model_dir", type="mlflow_model"))
out("model", name=model.name, version=model.version, path=model.path, type=model.type)
got = ml.models.get("m", version="1")
out("model-get", version=got.version, type=got.type)
out("model-list", names=sorted(m.name for m in ml.models.list()))
ml.models.archive("m", version="1")
ml.environments.archive("py", version="1")
out("archived-model-env", models=[m.name for m in ml.models.list()],
    envs=[e.version for e in ml.environments.list(name="py")])
ml.models.restore("m", version="1")
ml.environments.restore("py", version="1")
out("restored-model-env", models=[m.name for m in ml.models.list()],
    envs=[e.version for e in ml.environments.list(name="py")])

job = command(
    command="cat ${{inputs.d}}/a.txt && cat ${{inputs.m}}/MLmodel && echo done > ${{outputs.out}}/x",
    environment="py@latest",
    inputs={"d": Input(type="uri_folder", path="azureml:d:1"),
            "m": Input(type="mlflow_model", path="azureml:m:1")},
    outputs={"out": Output(type="uri_folder")},
    compute="cpu-cluster",
)
submitted = ml.jobs.create_or_update(job)
out("job", name=submitted.name, env=submitted.environment)
streamed = io.StringIO()
with contextlib.redirect_stdout(streamed):
    ml.jobs.stream(submitted.name)
out("job-done", status=ml.jobs.get(submitted.name).status, log=streamed.getvalue()[-4000:])

inline = command(command="echo inline", environment=Environment(image="python:3.11-slim"),
                 compute="cpu-cluster")
inline_job = ml.jobs.create_or_update(inline)
out("inline", name=inline_job.name, env=inline_job.environment)
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("arm-assets") / "home")
    with server.client() as api:
        assert api.put(server.ws_path + "/computes/cpu-cluster", json=CLUSTER).status_code == 201
    yield server
    _kill_with_its_nodes(server)


def arm_ws(srv: RunningServer) -> str:
    return f"/subscriptions/{srv.subscription_id}/resourceGroups/default/{PROVIDER}/workspaces/default"


def steps_of(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["step"]: r for r in results}


def test_sdk_assets_and_a_job_that_uses_them(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    (tmp_path / "local_folder").mkdir()
    (tmp_path / "local_folder" / "a.txt").write_text("data from the SDK\n")
    (tmp_path / "model_dir").mkdir()
    (tmp_path / "model_dir" / "MLmodel").write_text("flavors:\n  python_function: {}\nmodel-marker: m1\n")
    env = azureml_env(srv.cli_env())
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = steps_of(run_sdk(SDK_SCRIPT, tmp_path, env, timeout=280))

    # environments: create (version 1), the same again (still 1), a different one (the next)
    assert (steps["env"]["version"], steps["env"]["image"]) == ("1", "python:3.11-slim")
    assert steps["env"]["id"].endswith("/workspaces/default/environments/py/versions/1")
    assert steps["env-again"]["version"] == "1"
    assert steps["env-conda"]["version"] == "2"
    assert steps["env-conda"]["conda"]["dependencies"][2] == {"pip": ["six==1.16.0"]}
    assert steps["env-get"] == {"step": "env-get", "version": "1", "image": "python:3.11-slim"}
    assert steps["env-latest"]["version"] == "2"
    assert steps["env-list"]["names"] == ["py"] and steps["env-versions"]["versions"] == ["2", "1"]
    # data: uploaded through the Blob service, stored in short form; versions immutable (409)
    data = steps["data"]
    assert (data["version"], data["type"]) == ("1", "uri_folder")
    assert data["path"].startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/"), data
    store = srv.home / "data" / "workspaces" / "1" / "datastores" / "workspaceblobstore"
    assert (store / data["path"].split("/paths/", 1)[1] / "a.txt").read_text() == "data from the SDK\n"
    assert steps["data-get"]["path"] == data["path"] and steps["data-list"]["names"] == ["d"]
    immutable = steps["data-immutable"]
    assert immutable["status"] == 409 and "AssetVersionImmutable" in immutable["message"], immutable
    assert "Target: properties.dataUri" in immutable["message"]
    # archive one version (latest skips it), every version (hidden from the list), restore
    assert steps["scratch-2"] == {"step": "scratch-2", "version": "2", "type": "uri_file"}
    assert steps["archived-one"] == {"step": "archived-one", "latest": "1", "versions": ["1"]}
    assert steps["archived-all"]["names"] == ["d"]
    assert steps["restored"] == {"step": "restored", "names": ["d", "scratch"], "latest": "2"}
    # models
    model = steps["model"]
    assert (model["version"], model["type"]) == ("1", "mlflow_model")
    assert model["path"].startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/"), model
    assert steps["model-get"]["type"] == "mlflow_model" and steps["model-list"]["names"] == ["m"]
    # the SDK archives by re-PUTting what it read: the same version, isArchived changed
    assert steps["archived-model-env"] == {"step": "archived-model-env", "models": [], "envs": ["2"]}
    assert steps["restored-model-env"] == {"step": "restored-model-env", "models": ["m"], "envs": ["2", "1"]}
    # the job: py@latest, both inputs read (its streamed log), the versions recorded at submission
    assert steps["job"]["env"] == "py:2"
    done = steps["job-done"]
    assert done["status"] == "Completed", done
    assert "data from the SDK" in done["log"] and "model-marker: m1" in done["log"], done["log"]
    with srv.client() as api:
        view = api.get(f"{srv.ws_path}/jobs/{steps['job']['name']}").json()
        used = {(u["field"], u["kind"], u["name"], u["version"]) for u in view["assets"]}
        assert used == {
            ("inputs.d", "data", "d", "1"),
            ("inputs.m", "model", "m", "1"),
            ("environment", "environment", "py", "2"),
        }, view["assets"]
        # the inline environment: an anonymous version, named by its hash, resolved at submission
        anonymous, _, digest = steps["inline"]["env"].partition(":")
        assert anonymous == "CliV2AnonymousEnvironment" and len(digest) >= 32, steps["inline"]
        inline = api.get(f"{srv.ws_path}/jobs/{steps['inline']['name']}").json()
        assert inline["environment"]["name"] == anonymous and inline["environment"]["version"] == digest
        assert inline["environment"]["image"] == "python:3.11-slim"


def target_of(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"], error
    return str(error["target"])


def test_arm_versions_order_pages_and_refusals(srv: RunningServer) -> None:
    arm = arm_ws(srv)
    body = {
        "properties": {"dataType": "uri_file", "dataUri": "https://example.com/a.csv", "tags": {"t": "1"}}
    }
    with srv.client() as api:
        assert api.put(f"{arm}/data/edge/versions/1", json=body).status_code == 201
        again = api.put(f"{arm}/data/edge/versions/1", json=body)
        assert again.status_code == 200 and again.json()["properties"]["tags"] == {"t": "1"}
        assert api.put(f"{arm}/data/edge/versions/2", json=body).status_code == 201
        # the SDK's name@latest look-up: newest first, one per page
        newest = api.get(f"{arm}/data/edge/versions", params={"$orderBy": "createdtime desc", "$top": "1"})
        assert [v["name"] for v in newest.json()["value"]] == ["2"] and newest.json()["nextLink"], newest.text
        oldest = api.get(f"{arm}/data/edge/versions", params={"$orderBy": "createdtime asc", "tags": "t=1"})
        assert [v["name"] for v in oldest.json()["value"]] == ["1", "2"]
        container = api.get(f"{arm}/data/edge").json()["properties"]
        assert (container["latestVersion"], container["nextVersion"], container["isArchived"]) == (
            "2",
            "3",
            False,
        )
        assert target_of(api.get(f"{arm}/data/edge/versions", params={"$orderBy": "name"})) == "$orderBy"
        assert target_of(api.get(f"{arm}/data", params={"listViewType": "Some"})) == "listViewType"
        assert target_of(api.put(f"{arm}/data/edge", json={"properties": {}})) == "properties.isArchived"
        assert target_of(api.get(f"{arm}/data/ghost"), 404)
        # native rules, named as the ARM body names them
        other = "azureml://subscriptions/s/resourcegroups/r/workspaces/elsewhere/datastores/d/paths/x"
        refused = api.put(f"{arm}/data/edge/versions/3", json={"properties": {"dataUri": other}})
        assert (
            target_of(refused) == "properties.dataUri" and "elsewhere" in refused.json()["error"]["message"]
        )
        bad_type = {"properties": {"dataType": "table", "dataUri": "https://example.com/a.csv"}}
        assert target_of(api.put(f"{arm}/data/edge/versions/3", json=bad_type)) == "properties.dataType"
        local = {"properties": {"modelType": "custom_model", "modelUri": "./model"}}
        assert target_of(api.put(f"{arm}/models/m2/versions/1", json=local)) == "properties.modelUri"
        empty = api.put(f"{arm}/environments/e2/versions/1", json={"properties": {"description": "x"}})
        assert target_of(empty) == "properties" and "image" in empty.json()["error"]["message"]
        bad_conda = {"properties": {"condaFile": "- just\n- a list\n"}}
        assert (
            target_of(api.put(f"{arm}/environments/e2/versions/1", json=bad_conda)) == "properties.condaFile"
        )
        # an in-use version cannot be deleted (the native 409, naming the job) until the job ends
        job = {
            "command": "sleep 120",
            "compute": "azureml:cpu-cluster",
            "inputs": {"e": {"type": "uri_file", "path": "azureml:edge:1"}},
        }
        assert api.put(f"{srv.ws_path}/jobs/uses-edge", json=job).status_code in (200, 201)
        in_use = api.delete(f"{arm}/data/edge/versions/1")
        assert target_of(in_use, 409) == "version" and "uses-edge" in in_use.json()["error"]["message"]
        assert in_use.json()["error"]["code"] == "AssetInUse"
        assert api.post(f"{srv.ws_path}/jobs/uses-edge/cancel").status_code in (200, 202)
        deadline = time.monotonic() + 60
        while api.get(f"{srv.ws_path}/jobs/uses-edge").json()["status"] not in (
            "Canceled",
            "Failed",
            "Completed",
        ):
            assert time.monotonic() < deadline, "the job was not canceled"
            time.sleep(0.2)
        assert api.delete(f"{arm}/data/edge/versions/1").status_code == 200
        assert target_of(api.get(f"{arm}/data/edge/versions/1"), 404)
        assert [v["name"] for v in api.get(f"{arm}/data/edge/versions").json()["value"]] == ["2"]
