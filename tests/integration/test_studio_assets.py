"""The studio's asset pages over real HTTP (issue 28 item 3): a data asset from uploaded files, its
files and downloads, a job that uses it listed under "used by"; a data asset from a job's output;
an environment and a component from YAML (a refusal at its field); archive and restore; a Reader
refused every write; CSRF."""

from __future__ import annotations

import html
import secrets
from collections.abc import Iterator

import httpx
import pytest
import yaml

from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import served, submit, wait_job
from tests.studio_http import csrf_of, home_of, sign_in, studio_client


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "studio-assets")


@pytest.fixture(scope="module")
def admin(srv: RunningServer) -> Iterator[tuple[httpx.Client, str, str]]:
    """A signed-in studio client, the workspace's studio URL and the session's CSRF token."""
    with studio_client(srv) as client:
        assert sign_in(client, srv.api_key).status_code == 303
        home = home_of(client)
        yield client, str(home.url.path), csrf_of(home)


def upload(client: httpx.Client, base: str, csrf: str, batch: str, path: str, body: bytes) -> None:
    answer = client.post(
        f"{base}data/_upload",
        params={"batch": batch, "path": path},
        content=body,
        headers={"X-CSRF-Token": csrf, "Content-Type": "application/octet-stream"},
    )
    assert answer.status_code == 200, answer.text


def test_a_data_asset_from_uploaded_files_its_files_and_its_users(
    srv: RunningServer, admin: tuple[httpx.Client, str, str]
) -> None:
    client, base, csrf = admin
    batch = secrets.token_hex(16)
    upload(client, base, csrf, batch, "a.csv", b"x,y\n1,2\n")
    upload(client, base, csrf, batch, "sub/b.txt", b"hello")
    again = client.post(f"{base}data/_upload", params={"batch": batch, "path": "a.csv"}, content=b"changed",
                        headers={"X-CSRF-Token": csrf})  # fmt: skip
    assert again.status_code == 409 and "already in this upload" in again.json()["error"]
    form = {"csrf_token": csrf, "name": "uploaded", "type": "uri_folder", "source": "upload", "upload": batch,
            "uploaded": "2 files", "tags": "team=vision", "description": "two files"}  # fmt: skip
    made = client.post(f"{base}data/_new", data=form)
    assert made.status_code == 303, made.text[:2000]
    assert made.headers["location"].endswith("/data/uploaded/1")
    page = client.get(made.headers["location"])
    assert page.status_code == 200
    assert "a.csv" in page.text and "b.txt" in page.text and "No job uses this version." in page.text
    got = client.get(f"{base}data/uploaded/1/download", params={"file": "sub/b.txt"})
    assert got.status_code == 200 and got.content == b"hello"
    packed = client.get(f"{base}data/uploaded/1/download")
    assert packed.status_code == 200 and packed.content[:2] == b"\x1f\x8b"  # the folder, gzip
    assert client.get(f"{base}data/uploaded/1/download", params={"file": "../x"}).status_code == 400
    again = client.get(f"{base}data/_new", params={"name": "uploaded", "version": "1"})
    assert 'value="uploaded"' in again.text and 'value="team=vision"' in again.text

    # One file as a uri_file; several files cannot be one.
    single = secrets.token_hex(16)
    upload(client, base, csrf, single, "table.csv", b"a,b\n")
    form = {"csrf_token": csrf, "name": "one-file", "type": "uri_file", "source": "upload", "upload": single,
            "uploaded": "table.csv", "count": "1"}  # fmt: skip
    made = client.post(f"{base}data/_new", data=form)
    assert made.status_code == 303, made.text[:2000]
    page = client.get(made.headers["location"])
    assert f"LocalUpload/{single}/table.csv" in page.text
    assert client.get(f"{base}data/one-file/1/download").content == b"a,b\n"
    refused = client.post(f"{base}data/_new", data={**form, "count": "2", "uploaded": "2 files"})
    assert refused.status_code == 400 and "a uri_file is one file" in refused.text

    with srv.client() as api:
        job = {"command": "ls ${{inputs.d}} > ${{outputs.o}}/seen.txt", "compute": "local",
               "inputs": {"d": {"type": "uri_folder", "path": "azureml:uploaded:1"}},
               "outputs": {"o": {"type": "uri_folder"}}}  # fmt: skip
        submit(api, srv, "reads-uploaded", job)
        assert wait_job(api, srv, "reads-uploaded", timeout=120)["status"] == "Completed"
    page = client.get(f"{base}data/uploaded/1")
    assert "reads-uploaded" in page.text and "inputs.d" in page.text

    # A version from that job's output: its path is where the output was written.
    form = {"csrf_token": csrf, "name": "from-job", "type": "uri_folder", "source": "job",
            "job": "reads-uploaded", "output": "o"}  # fmt: skip
    made = client.post(f"{base}data/_new", data=form)
    assert made.status_code == 303, made.text[:2000]
    page = client.get(made.headers["location"])
    assert "azureml://jobs/reads-uploaded/outputs/o" in page.text and "seen.txt" in page.text
    outputs = client.get(f"{base}data/_outputs", params={"job": "reads-uploaded"})
    assert '<option value="o"' in outputs.text
    with srv.client() as api:  # the REST door takes the same path
        body = {"type": "uri_folder", "path": "azureml://jobs/reads-uploaded/outputs/nope"}
        refused = api.post(f"{srv.ws_path}/data/other/versions", json=body)
        assert refused.status_code == 400 and "no output 'nope'" in refused.text

    # A model from a path inside that output (as Azure names one): the same form, the same rule.
    form = {"csrf_token": csrf, "name": "from-job-model", "type": "custom_model", "source": "job",
            "job": "reads-uploaded", "output": "o", "output_path": "seen.txt"}  # fmt: skip
    made = client.post(f"{base}models/_new", data=form)
    assert made.status_code == 303, made.text[:2000]
    assert made.headers["location"].endswith("/models/from-job-model/1")
    page = client.get(made.headers["location"])
    assert "azureml://jobs/reads-uploaded/outputs/o/paths/seen.txt" in page.text
    assert f'href="{base}jobs/reads-uploaded"' in page.text  # the job it came from
    assert client.get(f"{made.headers['location']}/download").content.endswith(b"\n")  # seen.txt itself
    with srv.client() as api:
        shown = api.get(f"{srv.ws_path}/models/from-job-model/versions/1").json()
        assert shown["job_name"] == "reads-uploaded" and shown["path"].endswith("/seen.txt"), shown
        body = {"path": "azureml://jobs/reads-uploaded/outputs/o/paths/../../etc"}
        refused = api.post(f"{srv.ws_path}/models/other/versions", json=body)
        assert refused.status_code == 400 and "path" in refused.text, refused.text


def test_an_environment_and_a_component_from_yaml(
    srv: RunningServer, admin: tuple[httpx.Client, str, str]
) -> None:
    client, base, csrf = admin
    env = {"name": "np-env", "image": "python:3.11-slim",
           "conda_file": {"dependencies": ["python=3.11", "pip", {"pip": ["numpy==2.1.0"]}]}}  # fmt: skip
    made = client.post(f"{base}environments/_new", data={"csrf_token": csrf, "yaml": yaml.safe_dump(env)})
    assert made.status_code == 303, made.text[:2000]
    page = client.get(made.headers["location"])
    assert "numpy==2.1.0" in page.text and "python:3.11-slim" in page.text
    assert "not built yet" in page.text

    with srv.client() as api:  # a job on it: its log is the build log the page shows
        slim = {"image": "python:3.11-slim"}
        assert api.post(f"{srv.ws_path}/environments/slim-env/versions", json=slim).status_code == 201
        submit(
            api, srv, "on-slim", {"command": "true", "compute": "local", "environment": "azureml:slim-env:1"}
        )
        assert wait_job(api, srv, "on-slim", timeout=120)["status"] == "Completed"
    page = client.get(f"{base}environments/slim-env/1")
    assert "on-slim" in page.text and "cloudlet-agent: Preparing environment &#39;slim-env&#39;" in page.text
    assert '<strong class="build-state">built</strong>' in page.text

    bad = client.post(
        f"{base}environments/_new", data={"csrf_token": csrf, "yaml": "name: e\nimage: 3\nbuild: {path: .}\n"}
    )
    assert bad.status_code == 400 and 'role="alert"' in bad.text

    component = {"name": "train", "type": "command", "command": "echo ${{inputs.lr}}",
                 "environment": "azureml:np-env:1",
                 "inputs": {"lr": {"type": "number", "default": 0.1, "description": "the rate"}},
                 "outputs": {"model": {"type": "uri_folder"}}}  # fmt: skip
    made = client.post(f"{base}components/_new", data={"csrf_token": csrf, "yaml": yaml.safe_dump(component)})
    assert made.status_code == 303, made.text[:2000]
    page = client.get(made.headers["location"])
    assert "the rate" in page.text and "0.1" in page.text and "azureml:np-env:1" in page.text
    listing = client.get(f"{base}components")
    assert "train" in listing.text
    again = client.get(f"{base}components/_new", params={"name": "train", "version": "1"})
    assert "name: train" in again.text and "the rate" in again.text  # the next version starts from it
    assert 'href="' + base + 'components/_new?name=train&amp;version=1"' in page.text

    with srv.client() as api:  # a pipeline whose step runs it: found by the bounded scan
        step = {"component": "azureml:train:1", "inputs": {"lr": 0.5}}
        pipeline = {"type": "pipeline", "jobs": {"fit": step}, "settings": {"default_compute": "local"}}
        submit(api, srv, "runs-train", pipeline)
    page = client.get(f"{base}components/train/1")
    assert "runs-train" in page.text and "jobs.fit.component" in page.text


def test_archive_restore_and_a_reader_refused(
    srv: RunningServer, admin: tuple[httpx.Client, str, str]
) -> None:
    client, base, csrf = admin
    with srv.client() as api:
        body = {"image": "python:3.11-slim", "description": "<img src=x onerror=alert(1)>"}
        assert api.post(f"{srv.ws_path}/environments/old-env/versions", json=body).status_code == 201
        key = new_user(api, srv, "asset-reader", "Reader")
    assert client.post(f"{base}environments/old-env/1/archive", data={"csrf_token": csrf}).status_code == 303
    link = 'environments/old-env/1"'
    assert link not in client.get(f"{base}environments").text
    assert link in client.get(f"{base}environments", params={"archived": "1"}).text
    page = client.get(f"{base}environments/old-env/1")
    assert "Restore" in page.text and html.escape("<img src=x onerror=alert(1)>") in page.text
    assert client.post(f"{base}environments/old-env/1/restore", data={"csrf_token": csrf}).status_code == 303
    assert client.post(f"{base}environments/old-env/1/archive").status_code == 403  # no CSRF token

    with studio_client(srv) as reader:
        assert sign_in(reader, key).status_code == 303
        page = reader.get(f"{base}environments/old-env/1")
        assert page.status_code == 200 and "Archive" not in page.text.replace("Archived", "")
        assert "+ Register" not in reader.get(f"{base}data").text
        assert reader.get(f"{base}components/_new").status_code == 403
        token = csrf_of(page)
        assert (
            reader.post(f"{base}environments/old-env/1/archive", data={"csrf_token": token}).status_code
            == 403
        )
        assert (
            reader.post(
                f"{base}environments/_new", data={"csrf_token": token, "yaml": "name: r\nimage: x\n"}
            ).status_code
            == 403
        )
        refused = reader.post(f"{base}data/_upload", params={"batch": "0" * 32, "path": "f"}, content=b"x",
                              headers={"X-CSRF-Token": token})  # fmt: skip
        assert refused.status_code == 403
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/environments/old-env/versions/1").json()["is_archived"] is False
