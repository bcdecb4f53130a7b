"""Acceptance: data, model and environment assets through ``cloudlet data|model|environment …`` (a
subprocess per command) against a real server with real node agents, and jobs that use them:
``azureml:name@latest`` data, a model input, a model output registered when the job completes, an
environment asset built once per content hash. The HTTP API sets scenes and checks what happened.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cloudlet.client import AssetTypes, Data, Input, MLClient, Model, Output, command
from tests.conftest import RunningServer
from tests.jobs_helpers import log_text, served, submit, wait_job, wait_until

CLUSTER = "assets-cluster"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "assets-cli")


@pytest.fixture(scope="module")
def cluster(srv: RunningServer, api: httpx.Client) -> str:
    body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 2}
    response = api.put(f"{srv.ws_path}/computes/{CLUSTER}", json={**body, "idle_time_before_scale_down": 120})
    assert response.status_code in (200, 201), response.text
    return CLUSTER


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


def ok_json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return json.loads(result.stdout)


def failed(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


def write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def run_job(
    api: httpx.Client, srv: RunningServer, name: str, body: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    submit(api, srv, name, body)
    done = wait_job(api, srv, name, timeout=120)
    return done, log_text(api, srv, name)


def test_data_versions_upload_once_archive_and_latest(srv: RunningServer, tmp_path: Path) -> None:
    (tmp_path / "iris.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    spec = {
        "$schema": "https://azuremlschemas.azureedge.net/latest/data.schema.json",
        "name": "iris",
        "type": "uri_file",
        "path": "./iris.csv",
        "description": "the iris sample",
        "tags": {"source": "test"},
    }
    first = cli(srv, "data", "create", "--file", str(write_yaml(tmp_path / "data.yml", spec)))
    created = ok_json(first)
    assert (created["name"], created["version"], created["type"]) == ("iris", "1", "uri_file"), created
    assert created["path"].startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/"), created
    assert created["path"].endswith("/iris.csv") and "uploaded" in first.stderr, first.stderr
    # The same bytes again: a second version, nothing uploaded, the same path.
    again = cli(srv, "data", "create", "--file", str(tmp_path / "data.yml"))
    second = ok_json(again)
    assert second["version"] == "2" and second["path"] == created["path"], second
    assert "unchanged, already on the server" in again.stderr, again.stderr
    # Flags instead of a file, with an explicit version; a taken version with another path is refused.
    explicit = ok_json(
        cli(srv, "data", "create", "-n", "iris", "-v", "10", "--type", "uri_file", "--path", created["path"])
    )
    assert explicit["version"] == "10"
    refused = failed(cli(srv, "data", "create", "-n", "iris", "-v", "10", "--path", "https://example.com/x"))
    assert "AssetVersionImmutable" in refused and "create a new version" in refused, refused
    # An update of a version's description is allowed.
    updated = ok_json(
        cli(srv, "data", "create", "--file", str(tmp_path / "data.yml"), "-v", "10", "-d", "new")
    )
    assert updated["description"] == "new" and updated["path"] == created["path"]

    assert ok_json(cli(srv, "data", "show", "-n", "iris", "-l", "latest"))["version"] == "10"
    assert ok_json(cli(srv, "data", "list"))[0]["version"] == "10"
    ok_json(cli(srv, "data", "archive", "-n", "iris", "-v", "10"))
    # Archived: hidden from list and @latest, still shown by explicit version.
    assert ok_json(cli(srv, "data", "show", "-n", "iris"))["version"] == "2"
    assert [d["version"] for d in ok_json(cli(srv, "data", "list", "-n", "iris"))] == ["2", "1"]
    archived = ok_json(cli(srv, "data", "show", "-n", "iris", "-v", "10"))
    assert archived["is_archived"] is True
    assert [d["version"] for d in ok_json(cli(srv, "data", "list", "-n", "iris", "--archived-only"))] == [
        "10"
    ]
    # Auto-increment continues past the archived version.
    assert ok_json(cli(srv, "data", "create", "--file", str(tmp_path / "data.yml")))["version"] == "11"
    missing = failed(cli(srv, "data", "show", "-n", "nope"))
    assert "not found" in missing, missing


def test_job_reads_data_at_latest_resolved_at_submission(
    srv: RunningServer, api: httpx.Client, cluster: str, tmp_path: Path
) -> None:
    folder = tmp_path / "rows"
    folder.mkdir()
    (folder / "part.txt").write_text("first version\n", encoding="utf-8")
    with MLClient(home=srv.home) as client:
        one = client.data.create_or_update(Data(name="rows", path=str(folder), type="uri_folder"))
        assert one.version == "1" and client.data.last_uploads[0].skipped is False
    body = {
        "command": "sleep 1; cat ${{inputs.rows}}/part.txt",
        "compute": f"azureml:{cluster}",
        "inputs": {"rows": {"type": "uri_folder", "path": "azureml:rows@latest"}},
    }
    submit(api, srv, "rows-latest", body)
    # A newer version made while the job waits does not change what it reads.
    (folder / "part.txt").write_text("second version\n", encoding="utf-8")
    with MLClient(home=srv.home) as client:
        assert client.data.create_or_update(Data(name="rows", path=str(folder))).version == "2"
    done = wait_job(api, srv, "rows-latest", timeout=120)
    assert done["status"] == "Completed", done
    assert log_text(api, srv, "rows-latest").endswith("first version\n")
    assert done["inputs"]["rows"]["path"] == one.path, done["inputs"]
    used = {"field": "inputs.rows", "role": "input", "kind": "data", "name": "rows", "version": "1"}
    assert done["assets"] == [used], done["assets"]
    # Explicit versions, ARM-id references and a missing version.
    done, log = run_job(api, srv, "rows-v2", {**body, "inputs": {"rows": {"path": "azureml:rows:2"}}})
    assert done["status"] == "Completed" and log.endswith("second version\n"), (done, log)
    # An mltable asset is a folder with its MLTable file, mounted like a uri_folder.
    table = tmp_path / "table"
    table.mkdir()
    (table / "MLTable").write_text("paths:\n  - file: ./part.csv\n", encoding="utf-8")
    with MLClient(home=srv.home) as client:
        client.data.create_or_update(Data(name="tbl", path=str(table), type=AssetTypes.MLTABLE))
    tbl = {"t": {"type": "mltable", "path": "azureml:tbl@latest"}}
    done, log = run_job(
        api, srv, "reads-mltable", {**body, "command": "cat ${{inputs.t}}/MLTable", "inputs": tbl}
    )
    assert done["status"] == "Completed" and "file: ./part.csv" in log, (done, log)
    bad = api.put(
        f"{srv.ws_path}/jobs/rows-bad", json={**body, "inputs": {"rows": {"path": "azureml:rows:9"}}}
    )
    assert bad.status_code == 400, bad.text
    error = bad.json()["error"]
    assert error["target"] == "inputs.rows.path" and "rows:9" in error["message"], error


def test_deleting_a_version_in_use_is_refused_naming_the_job(
    srv: RunningServer, api: httpx.Client, cluster: str, tmp_path: Path
) -> None:
    (tmp_path / "f.txt").write_text("x\n", encoding="utf-8")
    ok_json(cli(srv, "data", "create", "-n", "held", "--type", "uri_file", "--path", str(tmp_path / "f.txt")))
    body = {
        "command": "echo started; sleep 60",
        "compute": f"azureml:{cluster}",
        "inputs": {"f": {"type": "uri_file", "path": "azureml:held:1"}},
    }
    submit(api, srv, "holds-data", body)
    refused = failed(cli(srv, "data", "delete", "-n", "held", "-v", "1"))
    assert "AssetInUse" in refused and "holds-data" in refused, refused
    assert api.post(f"{srv.ws_path}/jobs/holds-data/cancel").status_code == 202
    assert wait_job(api, srv, "holds-data", timeout=30)["status"] == "Canceled"
    assert cli(srv, "data", "delete", "-n", "held", "-v", "1").returncode == 0
    assert api.get(f"{srv.ws_path}/data/held/versions/1").status_code == 404


def test_model_input_and_output_registered_on_completion(
    srv: RunningServer, api: httpx.Client, cluster: str, tmp_path: Path
) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "MLmodel").write_text("flavors:\n  python_function: {}\n", encoding="utf-8")
    spec = {"name": "base-model", "type": "mlflow_model", "path": "./model", "description": "a base"}
    created = ok_json(cli(srv, "model", "create", "--file", str(write_yaml(tmp_path / "model.yml", spec))))
    assert (created["version"], created["type"]) == ("1", "mlflow_model"), created
    body = {
        "command": "cat ${{inputs.base}}/MLmodel && cp -r ${{inputs.base}}/. ${{outputs.trained}}/ "
        "&& echo tuned > ${{outputs.trained}}/note.txt && "
        "if echo x >> ${{inputs.base}}/MLmodel 2>/dev/null; then echo WROTE; else echo refused-write; fi",
        "compute": f"azureml:{cluster}",
        "inputs": {"base": {"type": "mlflow_model", "path": "azureml:base-model:1"}},
        "outputs": {"trained": {"type": "mlflow_model", "name": "tuned-model"}},
    }
    done, log = run_job(api, srv, "tune-1", body)
    assert done["status"] == "Completed", (done, log)
    assert "python_function" in log and "refused-write" in log, log  # mounted read-only
    registered = ok_json(cli(srv, "model", "show", "-n", "tuned-model"))
    assert (registered["version"], registered["type"], registered["job_name"]) == (
        "1",
        "mlflow_model",
        "tune-1",
    )
    assert registered["path"] == "azureml://datastores/workspaceblobstore/paths/azureml/tune-1/trained"
    shown = api.get(f"{srv.ws_path}/jobs/tune-1").json()["assets"]
    assert [(u["role"], u["name"], u["version"]) for u in shown] == [
        ("input", "base-model", "1"),
        ("output", "tuned-model", "1"),
    ], shown
    # The registered model is an input of the next job; a second run registers version 2.
    follow = {
        "command": "cat ${{inputs.m}}/note.txt",
        "compute": f"azureml:{cluster}",
        "inputs": {"m": {"type": "mlflow_model", "path": "azureml:tuned-model@latest"}},
    }
    done, log = run_job(api, srv, "use-tuned", follow)
    assert done["status"] == "Completed" and log.endswith("tuned\n"), (done, log)
    assert run_job(api, srv, "tune-2", body)[0]["status"] == "Completed"
    listed = ok_json(cli(srv, "model", "list", "-n", "tuned-model"))
    assert [m["version"] for m in listed] == ["2", "1"], listed
    # An explicit version that exists is refused at submission, not at completion.
    taken = {**body, "outputs": {"trained": {"type": "mlflow_model", "name": "tuned-model", "version": "1"}}}
    refused = api.put(f"{srv.ws_path}/jobs/tune-3", json=taken)
    assert refused.status_code == 409 and refused.json()["error"]["target"] == "outputs.trained.version"
    # A failed job registers nothing.
    failing = {**body, "command": "exit 3", "outputs": {"trained": {"type": "custom_model", "name": "never"}}}
    assert run_job(api, srv, "tune-fails", failing)[0]["status"] == "Failed"
    assert api.get(f"{srv.ws_path}/models/never").status_code == 404
    # The client, as azure.ai.ml code writes it: a model input and a named model output.
    with MLClient(home=srv.home) as client:
        model = client.models.get("tuned-model", version="1")
        assert isinstance(model, Model) and model.job_name == "tune-1"
        job = command(
            command="cp ${{inputs.m}}/note.txt ${{outputs.o}}/",
            inputs={"m": Input(type=AssetTypes.MLFLOW_MODEL, path="azureml:tuned-model:1")},
            outputs={"o": Output(type=AssetTypes.CUSTOM_MODEL, name="client-model", version="7")},
            compute=cluster,
        )
        submitted = client.jobs.create_or_update(job)
        assert wait_job(api, srv, submitted.name, timeout=120)["status"] == "Completed"
        made = client.models.get("client-model", label="latest")
        assert (made.version, made.type, made.job_name) == ("7", "custom_model", submitted.name)
        assert [m.name for m in client.models.list()] == ["base-model", "client-model", "tuned-model"]


def test_environment_asset_used_by_jobs_is_built_once(
    srv: RunningServer, api: httpx.Client, cluster: str, tmp_path: Path
) -> None:
    write_yaml(
        tmp_path / "conda.yaml",
        {"name": "e", "dependencies": ["python=3.11", "pip", {"pip": ["six==1.16.0"]}]},
    )
    spec = {
        "$schema": "https://azuremlschemas.azureedge.net/latest/environment.schema.json",
        "name": "six-env",
        "image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest",
        "conda_file": "conda.yaml",
    }
    created = ok_json(
        cli(srv, "environment", "create", "--file", str(write_yaml(tmp_path / "env.yml", spec)))
    )
    assert created["version"] == "1" and created["conda_file"]["dependencies"][2] == {"pip": ["six==1.16.0"]}
    # pip requirements through build.path (a folder with requirements.txt): the same package set.
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "requirements.txt").write_text("# pinned\nsix==1.16.0\n", encoding="utf-8")
    build = {"name": "six-env", "build": {"path": "./ctx"}}
    second = ok_json(
        cli(srv, "environment", "create", "--file", str(write_yaml(tmp_path / "env2.yml", build)))
    )
    assert second["version"] == "2" and second["pip"] == ["six==1.16.0"], second
    job = {"command": "python -c 'import six; print(six.__version__)'", "compute": f"azureml:{cluster}"}
    done, first_log = run_job(api, srv, "env-asset-1", {**job, "environment": "azureml:six-env:1"})
    assert done["status"] == "Completed" and first_log.endswith("1.16.0\n"), (done, first_log)
    assert done["environment"]["name"] == "six-env" and done["environment"]["version"] == "1", done
    done, log = run_job(api, srv, "env-asset-2", {**job, "environment": "azureml:six-env@latest"})
    assert done["status"] == "Completed" and log.endswith("1.16.0\n"), (done, log)
    assert done["environment"]["version"] == "2"
    # A conda file alone, twice: two versions, one package set (a conda environment's pip,
    # setuptools and wheel with six), one build.
    conda_only = {"name": "six-env", "conda_file": "conda.yaml"}
    for version in ("3", "4"):
        made = ok_json(
            cli(srv, "environment", "create", "--file", str(write_yaml(tmp_path / "env3.yml", conda_only)))
        )
        assert made["version"] == version and "image" not in made
    done, built = run_job(api, srv, "env-asset-3", {**job, "environment": "azureml:six-env:3"})
    assert done["status"] == "Completed" and built.endswith("1.16.0\n"), (done, built)
    done, reused = run_job(api, srv, "env-asset-4", {**job, "environment": "azureml:six-env:4"})
    assert done["status"] == "Completed" and reused.endswith("1.16.0\n"), (done, reused)
    assert "Preparing environment" in built and "Preparing environment" not in reused, (built, reused)
    assert "reused" in reused, reused
    unknown = api.put(f"{srv.ws_path}/jobs/env-missing", json={**job, "environment": "azureml:no-env:1"})
    assert unknown.status_code == 400 and unknown.json()["error"]["target"] == "environment", unknown.text
    ok_json(cli(srv, "environment", "archive", "-n", "six-env"))
    archived = api.put(
        f"{srv.ws_path}/jobs/env-archived", json={**job, "environment": "azureml:six-env@latest"}
    )
    assert archived.status_code == 400 and "archived" in archived.json()["error"]["message"], archived.text
    ok_json(cli(srv, "environment", "restore", "-n", "six-env"))
    assert [e["version"] for e in ok_json(cli(srv, "environment", "list"))] == ["4"]


def test_api_refuses_bad_asset_documents(srv: RunningServer, api: httpx.Client) -> None:
    wait_until(lambda: api.get(f"{srv.ws_path}/data").status_code == 200, 10, "the data list")
    body = {"name": "x", "path": "https://example.com/data.csv", "type": "uri_file"}
    created = api.put(f"{srv.ws_path}/data/web/versions/1", json=body | {"name": "web"})
    assert created.status_code == 201, created.text
    invalid = api.post(f"{srv.ws_path}/data/web/versions", json={"name": "web", "path": "s3://bucket/x"})
    assert invalid.status_code == 400 and invalid.json()["error"]["target"] == "path", invalid.text
    local = api.post(f"{srv.ws_path}/models/m/versions", json={"name": "m", "path": "./model"})
    assert local.status_code == 400 and "uploads it once" in local.json()["error"]["message"], local.text


def test_example_asset_files_run_as_written(srv: RunningServer, api: httpx.Client) -> None:
    assets = EXAMPLES / "assets"
    ok_json(cli(srv, "compute", "create", "--file", str(EXAMPLES / "compute" / "cluster.yml")))
    data = ok_json(cli(srv, "data", "create", "--file", str(assets / "data-iris.yml")))
    assert (data["name"], data["type"]) == ("iris", "uri_folder") and data["path"].endswith("/data"), data
    env = ok_json(cli(srv, "environment", "create", "--file", str(assets / "environment.yml")))
    assert env["name"] == "train-env" and env["conda_file"]["name"] == "train-env", env
    trained = cli(srv, "job", "create", "--file", str(assets / "train-job.yml"), "--stream")
    assert trained.returncode == 0, trained.stdout + trained.stderr
    assert "read iris-sample.csv: 30 rows so far" in trained.stdout, trained.stdout
    assert "Completed" in trained.stdout.strip().splitlines()[-1], trained.stdout
    model = ok_json(cli(srv, "model", "show", "-n", "iris-softmax"))
    assert (model["version"], model["type"]) == ("1", "custom_model"), model
    scored = cli(srv, "job", "create", "--file", str(assets / "score-job.yml"), "--stream")
    assert scored.returncode == 0 and "model softmax_regression accuracy" in scored.stdout, scored.stdout


def test_a_model_kept_at_a_url_is_refused_as_a_job_input(srv: RunningServer, api: httpx.Client) -> None:
    body = {"name": "web-model", "type": "mlflow_model", "path": "https://example.com/model"}
    assert api.put(f"{srv.ws_path}/models/web-model/versions/1", json=body).status_code == 201
    job = {
        "command": "ls ${{inputs.m}}",
        "compute": "local",
        "inputs": {"m": {"type": "mlflow_model", "path": "azureml:web-model:1"}},
    }
    refused = api.put(f"{srv.ws_path}/jobs/web-model-job", json=job)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["target"] == "inputs.m.path" and "uri_file or uri_folder only" in error["message"], error
