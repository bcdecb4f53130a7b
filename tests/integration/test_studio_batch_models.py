"""The studio's batch endpoint and model pages over real HTTP (issue 28 items 2 and 3): an endpoint
and a deployment from YAML (its code as an uploaded archive), a refused YAML at its field, a
folder uploaded and invoked (the invocation listed as a job), a model registered from an upload
through the asset pages (its files as a tree, a file downloaded, its MLmodel's flavors), a job
output that does not exist refused at ``path``, archive and restore, "used by" a batch
deployment, a Reader shown no write control and refused every write (403, nothing changed), and
CSRF."""

from __future__ import annotations

import io
import secrets
import zipfile
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import create_compute, served
from tests.online_helpers import tar_gz
from tests.studio_http import csrf_of, events, sign_in, signed_in_admin, studio_client

CLUSTER = "studio-batch"
SCORE = "def init():\n    pass\n\ndef run(mini_batch):\n    return [str(len(mini_batch))]\n"
HOSTILE = '<img src=x onerror="alert(1)"></script><script>alert(2)</script>'
MLMODEL = f"""\
flavors:
  python_function:
    loader_module: mlflow.sklearn
    python_version: 3.11.4
  sklearn:
    sklearn_version: 1.3.0
    note: '{HOSTILE}'
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-batch-models", extra_env={"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def admin(srv: RunningServer) -> Iterator[tuple[httpx.Client, str]]:
    with srv.client() as api:
        body = {"type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0, "max_instances": 1}
        create_compute(api, srv, CLUSTER, body)
    yield from signed_in_admin(srv)


def zipped(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


def token(client: httpx.Client, url: str) -> str:
    page = client.get(url)
    assert page.status_code == 200, page.text[:2000]
    return csrf_of(page)


def deployment_yaml(name: str, model: str | None = None) -> str:
    extra = f"model: {model}\n" if model else ""
    return (
        f"name: {name}\ncode_configuration:\n  code: src\n  scoring_script: score.py\n"
        f"compute: azureml:{CLUSTER}\nmini_batch_size: 3\n{extra}"
    )


def test_endpoint_and_deployment_from_yaml_then_invoke_an_uploaded_folder(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    listed = client.get(f"{ws}batch-endpoints")
    assert listed.status_code == 200 and "No batch endpoint yet" in listed.text
    assert 'aria-current="page">Batch endpoints' in listed.text  # the Endpoints page's second tab
    csrf = token(client, f"{ws}batch-endpoints/_new")
    bad = client.post(
        f"{ws}batch-endpoints/_new", data={"csrf_token": csrf, "yaml": "name: bad-one\nauth_mode: nope\n"}
    )
    assert bad.status_code == 400 and "auth_mode" in bad.text and "line 2" in bad.text, bad.text[-3000:]
    text = f"name: scorer\ndescription: '{HOSTILE}'\n"
    made = client.post(f"{ws}batch-endpoints/_new", data={"csrf_token": csrf, "yaml": text})
    assert made.status_code == 303 and made.headers["location"].endswith("/batch-endpoints/scorer")
    code = client.post(
        f"{ws}jobs/_new/code", content=tar_gz({"score.py": SCORE}), headers={"X-CSRF-Token": csrf}
    ).json()["code"]
    fields = {"csrf_token": csrf, "yaml": deployment_yaml("blue"), "code": code, "set_default": "on"}
    added = client.post(f"{ws}batch-endpoints/scorer/deployments", data=fields)
    assert added.status_code == 303, added.text[-3000:]
    with srv.client() as api:
        shown = api.get(f"{srv.ws_path}/batchEndpoints/scorer/deployments/blue").json()
        assert shown["mini_batch_size"] == 3 and shown["code_configuration"]["code"] == code
        assert api.get(f"{srv.ws_path}/batchEndpoints/scorer").json()["defaults"] == {
            "deployment_name": "blue"
        }
    page = client.get(f"{ws}batch-endpoints/scorer")
    assert page.status_code == 200 and ">default<" in page.text and HOSTILE not in page.text
    assert "&lt;img src=x" in page.text
    refused = client.post(
        f"{ws}batch-endpoints/scorer/deployments", data={**fields, "yaml": "name: green\ncompute: nope\n"}
    )
    assert refused.status_code == 400 and "compute" in refused.text
    assert '<details class="add-deployment" open>' in refused.text  # the form, open at its error
    upload = client.post(
        f"{ws}batch-endpoints/scorer/upload?folder=rows",
        content=zipped({"a.csv": "1\n2\n", "sub/b.csv": "3\n"}),
        headers={"X-CSRF-Token": csrf},
    )
    assert upload.status_code == 200, upload.text
    uri = upload.json()["uri"]
    assert uri.startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/") and uri.endswith(
        "/rows"
    )
    with srv.client() as api:
        relative = uri.split("/paths/", 1)[1]
        stat = api.get(f"{srv.ws_path}/datastores/workspaceblobstore/paths/{relative}/sub/b.csv")
        assert stat.status_code == 200 and stat.json()["size"] == 2
    form = {
        "csrf_token": csrf,
        "source": "upload",
        "upload_uri": uri,
        "deployment_name": "blue",
        "job_name": "sb1",
    }
    invoked = client.post(f"{ws}batch-endpoints/scorer/invoke", data=form)
    assert invoked.status_code == 303 and "invoked=sb1" in invoked.headers["location"]
    page = client.get(f"{ws}batch-endpoints/scorer")
    assert 'data-job="sb1"' in page.text and f"{ws}jobs/sb1" in page.text
    with srv.client() as api:
        job = api.get(f"{srv.ws_path}/jobs/sb1").json()
        assert job["type"] == "batch_scoring" and job["inputs"]["data"]["path"] == uri
    # The same folder as a data asset, picked from the workspace's data assets.
    with srv.client() as api:
        made_asset = api.post(f"{srv.ws_path}/data/rows/versions", json={"path": uri, "type": "uri_folder"})
        assert made_asset.status_code == 201, made_asset.text
    page = client.get(f"{ws}batch-endpoints/scorer")
    assert '<option value="azureml:rows:1">' in page.text
    picked = {**form, "source": "asset", "data_asset": "azureml:rows:1", "job_name": "sb3"}
    assert client.post(f"{ws}batch-endpoints/scorer/invoke", data=picked).status_code == 303
    with srv.client() as api:
        job = api.get(f"{srv.ws_path}/jobs/sb3").json()
        assert job["inputs"]["data"]["path"] in ("azureml:rows:1", uri), job["inputs"]
    empty = client.post(
        f"{ws}batch-endpoints/scorer/invoke", data={**form, "upload_uri": "", "job_name": "sb2"}
    )
    assert empty.status_code == 400 and "upload a folder first" in empty.text
    assert '<details class="add-deployment">' in empty.text  # not the deployment form's error


def test_the_invocations_table_is_live_until_every_invocation_is_final(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    csrf = token(client, f"{ws}batch-endpoints/scorer")
    form = {"csrf_token": csrf, "source": "asset", "data_asset": "azureml:rows:1", "job_name": "sb-live"}
    assert (
        client.post(
            f"{ws}batch-endpoints/scorer/invoke", data={**form, "deployment_name": "blue"}
        ).status_code
        == 303
    )
    assert (
        'sse-connect="' in client.get(f"{ws}batch-endpoints/scorer").text
    )  # a running one: the table is live
    tables: list[str] = []
    with client.stream("GET", f"{ws}batch-endpoints/scorer/invocations/live") as response:
        assert response.status_code == 200
        for kind, _, data in events(response):
            if kind == "end":
                break
            assert kind == "invocations", (kind, data)
            tables.append(data)
    assert 'id="invocation-jobs"' in tables[0] and "<html" not in tables[0], tables[0]
    assert 'data-job="sb-live"' in tables[0] and len(tables) >= 2 and len(set(tables)) == len(tables)
    assert "Completed" in tables[-1] and "when it completes" not in tables[-1], tables[-1]
    assert (
        'sse-connect="' not in client.get(f"{ws}batch-endpoints/scorer").text
    )  # all final: nothing to follow
    with srv.client() as api, studio_client(srv) as outsider:
        sign_in(outsider, new_user(api, srv, "batch-outsider", role=None))
        assert outsider.get(f"{ws}batch-endpoints/scorer/invocations/live").status_code == 404


def upload_model_file(client: httpx.Client, ws: str, csrf: str, batch: str, path: str, text: str) -> int:
    """One file of a model's upload, as the register form's script sends it (the asset pages' route)."""
    answer = client.post(
        f"{ws}models/_upload",
        params={"batch": batch, "path": path},
        content=text.encode(),
        headers={"X-CSRF-Token": csrf, "Content-Type": "application/octet-stream"},
    )
    return answer.status_code


def test_register_a_model_from_an_upload_its_files_and_archive(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    csrf = token(client, f"{ws}models/_new")
    batch = secrets.token_hex(16)
    files = {"MLmodel": MLMODEL, "model.pkl": "bytes", f"data/{HOSTILE.replace('/', '_')}.txt": "x"}
    for path, text in files.items():
        assert upload_model_file(client, ws, csrf, batch, path, text) == 200
    form = {
        "csrf_token": csrf,
        "name": "clf",
        "type": "mlflow_model",
        "tags": f"stage=dev, evil={HOSTILE.replace(',', ';')}",
        "description": HOSTILE,
        "source": "upload",
        "upload": batch,
        "uploaded": "3 files",
        "count": "3",
    }
    made = client.post(f"{ws}models/_new", data=form)
    assert made.status_code == 303 and made.headers["location"].endswith("/models/clf/1"), made.text[-2000:]
    page = client.get(made.headers["location"])
    assert page.status_code == 200 and HOSTILE not in page.text
    assert 'id="asset-files"' in page.text and "model.pkl" in page.text and "data/" in page.text
    assert ">python_function<" in page.text and "sklearn_version" in page.text
    assert "note: &lt;img src=x" in page.text  # the MLmodel's text and flavors, escaped
    assert "No job uses this version" in page.text and "No deployment uses this version" in page.text
    body = client.get(made.headers["location"] + "/download", params={"file": "model.pkl"})
    assert (
        body.status_code == 200
        and body.content == b"bytes"
        and "attachment" in body.headers["content-disposition"]
    )
    escaping = client.get(made.headers["location"] + "/download", params={"file": "../../etc/passwd"})
    assert escaping.status_code in (400, 404)
    listed = client.get(f"{ws}models")
    assert "clf" in listed.text and "mlflow_model" in listed.text and "stage: dev" in listed.text
    missing = client.post(
        f"{ws}models/_new", data={**form, "source": "job", "job": "no-such-job", "output": "model"}
    )
    assert missing.status_code == 400 and "no job &#39;no-such-job&#39;" in missing.text, missing.text[-2000:]
    archived = client.post(f"{ws}models/clf/1/archive", data={"csrf_token": csrf})
    assert archived.status_code == 303
    assert "No models yet" in client.get(f"{ws}models").text
    assert "clf" in client.get(f"{ws}models?archived=1").text
    assert client.post(f"{ws}models/clf/1/restore", data={"csrf_token": csrf}).status_code == 303
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/models/clf/versions/1").json().get("archived") in (False, None)


def test_used_by_names_the_batch_deployment(srv: RunningServer, admin: tuple[httpx.Client, str]) -> None:
    client, ws = admin
    csrf = token(client, f"{ws}batch-endpoints/scorer")
    code = client.post(
        f"{ws}jobs/_new/code", content=tar_gz({"score.py": SCORE}), headers={"X-CSRF-Token": csrf}
    ).json()["code"]
    fields = {"csrf_token": csrf, "yaml": deployment_yaml("with-model", "azureml:clf:1"), "code": code}
    added = client.post(f"{ws}batch-endpoints/scorer/deployments", data=fields)
    assert added.status_code == 303, added.text[-3000:]
    with srv.client() as api:  # a job whose input is the model
        job = {
            "command": "ls ${{inputs.m}}",
            "compute": f"azureml:{CLUSTER}",
            "inputs": {"m": {"type": "custom_model", "path": "azureml:clf@latest"}},
        }
        assert api.put(f"{srv.ws_path}/jobs/uses-clf", json=job).status_code == 201
    page = client.get(f"{ws}models/clf/1")
    used = page.text.split('id="used-by"')[1]
    assert "Batch deployment" in used and "with-model" in used and "model: azureml:clf:1" in used
    assert f"{ws}batch-endpoints/scorer" in used
    assert f"{ws}jobs/uses-clf" in used and "inputs.m" in used


def test_a_reader_sees_no_write_control_and_every_write_is_refused(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    _, ws = admin
    with srv.client() as api:
        key = new_user(api, srv, "batch-reader", "Reader")
    with studio_client(srv) as reader:
        assert sign_in(reader, key).status_code == 303
        page = reader.get(f"{ws}batch-endpoints/scorer")
        assert page.status_code == 200 and "Invoke" not in page.text and "Add a deployment" not in page.text
        csrf = csrf_of(page)
        listed = reader.get(f"{ws}batch-endpoints")
        assert "Create from YAML" not in listed.text
        model = reader.get(f"{ws}models/clf/1")
        assert model.status_code == 200 and "/models/clf/1/archive" not in model.text
        assert "Register model" not in reader.get(f"{ws}models").text
        assert reader.get(f"{ws}models/_new").status_code == 403
        assert reader.get(f"{ws}batch-endpoints/_new").status_code == 403
        writes: list[tuple[str, dict[str, Any]]] = [
            (f"{ws}batch-endpoints/_new", {"yaml": "name: reader-ep\n"}),
            (f"{ws}batch-endpoints/scorer/deployments", {"yaml": deployment_yaml("reader-dep")}),
            (
                f"{ws}batch-endpoints/scorer/invoke",
                {"source": "asset", "data_asset": "azureml:x:1", "job_name": "rj"},
            ),
            (f"{ws}models/_new", {"name": "reader-model", "source": "upload", "upload": "0" * 32}),
            (f"{ws}models/clf/1/archive", {}),
        ]
        for url, form in writes:
            refused = reader.post(url, data={"csrf_token": csrf, **form})
            assert refused.status_code == 403, (url, refused.status_code)
        assert upload_model_file(reader, ws, csrf, "0" * 32, "a", "b") == 403
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/batchEndpoints/reader-ep").status_code == 404
        assert api.get(f"{srv.ws_path}/jobs/rj").status_code == 404
        assert api.get(f"{srv.ws_path}/models/clf/versions/1").json().get("archived") in (False, None)


def test_writes_without_the_csrf_token_are_refused(
    srv: RunningServer, admin: tuple[httpx.Client, str]
) -> None:
    client, ws = admin
    assert client.post(f"{ws}batch-endpoints/_new", data={"yaml": "name: no-csrf\n"}).status_code == 403
    assert client.post(f"{ws}models/clf/1/archive", data={}).status_code == 403
    refused = client.post(f"{ws}models/_upload", params={"batch": "0" * 32, "path": "a"}, content=b"b")
    assert refused.status_code == 403
