"""Acceptance: job files in the shapes of Azure ML's examples (``examples/azureml/``, after
azureml-examples' ``cli/jobs/basics``) run to Completed as written, with no ``--set``, through
``cloudlet job create -f F`` (a subprocess per command) against a real server with real agents:

- no ``compute``: serverless on the workspace's default instance type (Standard_DS3_v2 unless an
  administrator sets another);
- ``./outputs`` and ``./logs`` exist when the process starts and are kept as the attempt's default
  artifacts (``cloudlet job download -n J --all``);
- ``https://`` inputs are downloaded by the node before the process starts, cached by URL and
  ETag; ``wasbs://``/``abfss://`` public blobs are read over https, a Blob folder as its listed
  blobs; other clouds' schemes are refused; a failed download fails the job saying so;
- a CUDA image on a CPU size is a warning on the job, which runs on the CPU; an incompatible CUDA
  on a GPU size is refused (T14);
- ``job stream --attempt N`` and ``job show`` reach every attempt's log.

The https input names Azure's public URL; the module's server reaches it through a proxy the test
starts (``tests/web_origin.py``), which answers for that host with a certificate of a test CA.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cloudlet.client.artifacts import unpack
from tests.conftest import RunningServer
from tests.jobs_helpers import (
    create_compute,
    error_of,
    job,
    log_text,
    served,
    submit,
    wait_job,
    wait_until,
)
from tests.web_origin import WebOrigin, make_certificates, web_origin

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "azureml"
AZURE_HOST = "azuremlexamples.blob.core.windows.net"
DFS_HOST = "azuremlexamples.dfs.core.windows.net"
IRIS_URL = f"https://{AZURE_HOST}/datasets/iris.csv"
IRIS = b"sepal_length,sepal_width,petal_length,petal_width,species\n" + b"5.1,3.5,1.4,0.2,setosa\n" * 29
DOWNLOAD_LIMIT = 1_000_000  # the module's nodes refuse bigger downloads
CUDA_IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-cuda11.8-cudnn8-ubuntu22.04"


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebOrigin]:
    certificates = make_certificates(tmp_path_factory.mktemp("ca"), (AZURE_HOST,))
    files = {
        "/datasets/iris.csv": IRIS,
        "/datasets/too-big.bin": b"\0" * (DOWNLOAD_LIMIT + 1),
        "/datasets/shards/part-1.csv": b"a,1\n",
        "/datasets/shards/part-2.csv": b"b,2\n",
        "/datasets/shards/nested/part-3.csv": b"c,3\n",
    }
    with web_origin(files, certificates, (AZURE_HOST,)) as served_origin:
        yield served_origin


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, origin: WebOrigin) -> Iterator[RunningServer]:
    env = {
        "https_proxy": origin.url,
        "no_proxy": "127.0.0.1,localhost",
        "SSL_CERT_FILE": str(origin.bundle),
        "CLOUDLET_MAX_DOWNLOAD_BYTES": str(DOWNLOAD_LIMIT),
    }
    yield from served(tmp_path_factory, "azureml-examples", extra_env=env)


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cloudlet", *args],
        env={**srv.cli_env(), "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, (
        f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    )
    return result


def run_example(srv: RunningServer, file: str) -> tuple[str, str]:
    """``cloudlet job create -f examples/azureml/FILE --stream`` as written: (job name, its log)."""
    name, log, _ = run_example_noting(srv, file)
    return name, log


def run_example_noting(srv: RunningServer, file: str) -> tuple[str, str, str]:
    """``run_example``, with what the CLI said on stderr."""
    streamed = ok(cli(srv, "job", "create", "-f", str(EXAMPLES / file), "--stream"))
    match = re.search(r"job (\S+) submitted", streamed.stderr)
    assert match is not None, streamed.stderr
    assert "Completed" in streamed.stdout.strip().splitlines()[-1], streamed.stdout
    return match.group(1), streamed.stdout, streamed.stderr


def shown(srv: RunningServer, name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(ok(cli(srv, "job", "show", "-n", name)).stdout)
    return body


# -- no compute: serverless on the workspace's default size ---------------------------------------
def test_hello_world_runs_serverless_on_the_default_instance_type(
    srv: RunningServer, api: httpx.Client
) -> None:
    assert "compute" not in (EXAMPLES / "hello-world.yml").read_text()
    name, log = run_example(srv, "hello-world.yml")
    assert "hello world\n" in log, log
    job_view = shown(srv, name)
    assert job_view["status"] == "Completed" and job_view["compute"] == "serverless", job_view
    assert job_view["resources"]["instance_type"] == "Standard_DS3_v2", job_view["resources"]
    # The same file as the REST body, $schema and all.
    doc = yaml.safe_load((EXAMPLES / "hello-world.yml").read_text())
    assert "$schema" in doc
    submit(api, srv, "hello-rest", doc)
    done = wait_job(api, srv, "hello-rest", timeout=120)
    assert done["status"] == "Completed" and done["resources"]["instance_type"] == "Standard_DS3_v2", done
    assert "hello world\n" in log_text(api, srv, "hello-rest")


def test_an_administrator_sets_the_workspaces_default_instance_type(
    srv: RunningServer, api: httpx.Client
) -> None:
    created = json.loads(
        ok(
            cli(srv, "workspace", "create", "-n", "small-jobs", "--default-instance-type", "standard_d2s_v3")
        ).stdout
    )
    assert created["default_instance_type"] == "Standard_D2s_v3", created  # the catalogue's spelling
    ws_path = srv.workspace_path("small-jobs")
    put = api.put(f"{ws_path}/jobs/default-size", json={"command": "true"})
    assert put.status_code == 201, put.text
    assert put.json()["resources"]["instance_type"] == "Standard_D2s_v3", put.json()
    # A size the job names wins over the default.
    own = {"command": "true", "resources": {"instance_type": "Standard_DS3_v2"}}
    put = api.put(f"{ws_path}/jobs/own-size", json=own)
    assert put.status_code == 201 and put.json()["resources"]["instance_type"] == "Standard_DS3_v2", put.text
    unknown = api.put(ws_path, json={"location": "local", "default_instance_type": "Standard_Nope"})
    error = error_of(unknown)
    assert unknown.status_code == 400 and error["target"] == "default_instance_type", error
    assert "list-sizes" in error["message"], error
    reset = api.put(ws_path, json={"location": "local", "default_instance_type": None})
    assert reset.status_code == 200 and reset.json()["default_instance_type"] == "Standard_DS3_v2", reset.text
    for name in ("default-size", "own-size"):  # their nodes go with them before the module ends
        url = f"{ws_path}/jobs/{name}"
        wait_until(lambda u=url: api.get(u).json()["status"] == "Completed", 120, f"{name} to end")


# -- ./outputs and ./logs: the default artifacts ---------------------------------------------------
def test_outputs_and_logs_are_kept_and_downloaded_with_all(srv: RunningServer, tmp_path: Path) -> None:
    name, log = run_example(srv, "hello-world-output.yml")
    assert "wrote ./outputs/helloworld.txt" in log, log
    ok(cli(srv, "job", "download", "-n", name, "--all", "--download-path", str(tmp_path)))
    artifacts = tmp_path / "artifacts"
    assert (artifacts / "outputs" / "helloworld.txt").read_text() == "hello world\n"
    assert (artifacts / "logs" / "progress.log").read_text() == "wrote ./outputs/helloworld.txt\n"
    assert "wrote ./outputs/helloworld.txt" in (artifacts / "user_logs" / "std_log.txt").read_text()


def test_outputs_and_logs_are_folders_when_the_process_starts(
    srv: RunningServer, api: httpx.Client, tmp_path: Path
) -> None:
    """Before the command runs (no mkdir in it): writable, empty, and what each attempt wrote is
    that attempt's (GET …/artifacts?attempt=N)."""
    command = "test -d outputs && test -d logs && ls -A outputs logs && echo kept > outputs/a.txt"
    submit(api, srv, "artifact-dirs", {"command": command})
    done = wait_job(api, srv, "artifact-dirs", timeout=120)
    assert done["status"] == "Completed", (done, log_text(api, srv, "artifact-dirs"))
    assert log_text(api, srv, "artifact-dirs") == "logs:\n\noutputs:\n", log_text(api, srv, "artifact-dirs")
    response = api.get(f"{srv.ws_path}/jobs/artifact-dirs/artifacts", params={"attempt": 1})
    assert response.status_code == 200 and response.headers["content-type"] == "application/gzip"
    unpack(response.content, tmp_path)
    assert (tmp_path / "outputs" / "a.txt").read_text() == "kept\n"
    beyond = api.get(f"{srv.ws_path}/jobs/artifact-dirs/artifacts", params={"attempt": 2})
    assert beyond.status_code == 400 and error_of(beyond)["target"] == "attempt", beyond.text


# -- https inputs ----------------------------------------------------------------------------------
def test_an_https_input_is_downloaded_by_the_node_and_cached(srv: RunningServer, origin: WebOrigin) -> None:
    assert IRIS_URL in (EXAMPLES / "hello-world-input.yml").read_text()
    before = len(origin.requests_for("/datasets/iris.csv"))
    name, log = run_example(srv, "hello-world-input.yml")
    assert "hello world 42\n" in log, log
    assert "rows: 30\n" in log and "sepal_length,sepal_width" in log, log
    assert f"downloaded {IRIS_URL}" in log, log
    assert shown(srv, name)["inputs"]["iris_csv"]["path"] == IRIS_URL
    # The second run asks whether it changed (ETag) and uses the host's cached copy.
    _, again = run_example(srv, "hello-world-input.yml")
    assert "rows: 30\n" in again and "unchanged, using the node's cached copy" in again, again
    requests = origin.requests_for("/datasets/iris.csv")[before:]
    assert [(r.host, r.conditional, r.status) for r in requests] == [
        (AZURE_HOST, False, 200),
        (AZURE_HOST, True, 304),
    ], requests


def test_a_failed_download_fails_the_job_with_the_reason(srv: RunningServer, api: httpx.Client) -> None:
    for name, path, why in (
        ("missing-input", f"https://{AZURE_HOST}/datasets/missing.csv", "HTTP 404"),
        ("too-big-input", f"https://{AZURE_HOST}/datasets/too-big.bin", f"limit of {DOWNLOAD_LIMIT} bytes"),
    ):
        body = {"command": "echo never", "inputs": {"data": {"type": "uri_file", "path": path}}}
        submit(api, srv, name, body)
        failed = wait_job(api, srv, name, timeout=120)
        assert failed["status"] == "Failed" and failed["error"]["code"] == "InputDownloadFailed", failed
        text = log_text(api, srv, name)
        assert f"input 'data': cannot download {path}" in text and why in text, text
        assert "never" not in text, text


def test_azure_storage_paths_are_read_over_https_files_and_folders(
    srv: RunningServer, api: httpx.Client, origin: WebOrigin
) -> None:
    """``wasbs://`` and ``abfss://`` public blobs as the samples name them, and an https:// Blob
    "folder" (the batch samples' inputs): a file is downloaded, a folder is its blobs, listed."""
    body = {
        "command": "cat ${{inputs.rows}} | wc -l; ls ${{inputs.shards}}; cat ${{inputs.shards}}/part-2.csv;"
        " ls ${{inputs.lake}}/nested",
        "inputs": {
            "rows": {"type": "uri_file", "path": f"wasbs://datasets@{AZURE_HOST}/iris.csv"},
            "shards": {"type": "uri_folder", "path": f"https://{AZURE_HOST}/datasets/shards"},
            "lake": {"type": "uri_folder", "path": f"abfss://datasets@{DFS_HOST}/shards/"},
        },
    }
    submit(api, srv, "azure-storage-inputs", body)
    done = wait_job(api, srv, "azure-storage-inputs", timeout=120)
    text = log_text(api, srv, "azure-storage-inputs")
    assert done["status"] == "Completed", (done, text)
    assert done["inputs"]["rows"]["path"] == IRIS_URL, done["inputs"]  # shown as what is read
    assert "30\n" in text and "nested\npart-1.csv\npart-2.csv\n" in text, text
    assert "b,2\n" in text and "part-3.csv" in text, text
    assert f"downloaded the folder https://{AZURE_HOST}/datasets/shards (3 files)" in text, text


@pytest.mark.parametrize(
    "uri",
    [
        "wasbs://data@account.example.com/iris.csv",  # not Azure Storage's host: no https form
        "s3://bucket/iris.csv",
        "gs://bucket/iris.csv",
        "adl://account.azuredatalakestore.net/iris.csv",
    ],
)
def test_other_clouds_storage_is_refused_naming_what_is_supported(
    srv: RunningServer, api: httpx.Client, uri: str
) -> None:
    body = {"command": "cat ${{inputs.data}}", "inputs": {"data": {"type": "uri_file", "path": uri}}}
    response = api.put(f"{srv.ws_path}/jobs/cloud-input", json=body)
    error = error_of(response)
    assert response.status_code == 400 and error["code"] == "UnsupportedInputScheme", error
    assert error["target"] == "inputs.data.path", error
    scheme = uri.split("://", 1)[0]
    assert f"{scheme}://" in error["message"] and "http(s)://" in error["message"], error
    assert "azureml://datastores/" in error["message"], error
    assert api.get(f"{srv.ws_path}/jobs/cloud-input").status_code == 404


# -- CUDA images -----------------------------------------------------------------------------------
def test_a_cuda_image_on_a_cpu_size_warns_and_runs_on_the_cpu(srv: RunningServer, api: httpx.Client) -> None:
    assert CUDA_IMAGE in (EXAMPLES / "hello-world-cuda.yml").read_text()
    name, log, said = run_example_noting(srv, "hello-world-cuda.yml")
    assert re.search(r"hello from \d+ CPUs", log), log
    assert "warning: the environment is built for CUDA 11.8" in said, said
    [warning] = shown(srv, name)["warnings"]
    assert "CUDA 11.8" in warning and "Standard_DS3_v2 has no GPU" in warning, warning
    assert "runs on the CPU" in warning, warning
    # On a GPU size, a CUDA its GPUs cannot run stays an error (T14), and nothing is recorded.
    body = {
        "command": "nvidia-smi",
        "environment": {"image": "mcr.microsoft.com/azureml/openmpi3.1.2-cuda9.0-cudnn7-ubuntu18.04"},
        "resources": {"instance_type": "Standard_NC4as_T4_v3"},
    }
    refused = api.put(f"{srv.ws_path}/jobs/old-cuda-on-t4", json=body)
    error = error_of(refused)
    assert refused.status_code == 400 and error["code"] == "CudaIncompatible", error
    assert "CUDA 9.0" in error["message"] and "10.0+" in error["message"], error
    assert api.get(f"{srv.ws_path}/jobs/old-cuda-on-t4").status_code == 404


# -- every attempt's log ---------------------------------------------------------------------------
ATTEMPTS = (
    'echo "attempt $CLOUDLET_ATTEMPT" | tee ./logs/attempt.txt; '
    'if [ "$CLOUDLET_ATTEMPT" = 1 ]; then sleep 120; fi; echo done'
)


def test_stream_and_show_reach_every_attempts_log(
    srv: RunningServer, api: httpx.Client, tmp_path: Path
) -> None:
    cluster = {
        "type": "amlcompute",
        "size": "Standard_DS3_v2",
        "min_instances": 0,
        "max_instances": 1,
        "tier": "low_priority",
        "idle_time_before_scale_down": 2,
    }
    create_compute(api, srv, "lowpri", cluster)
    submit(api, srv, "retried", {"command": ATTEMPTS, "compute": "azureml:lowpri"})
    wait_until(lambda: "attempt 1" in log_text(api, srv, "retried"), 90, "attempt 1 to run")
    [node_id] = job(api, srv, "retried")["attempts"][0]["nodes"]
    evicted = api.post(f"{srv.ws_path}/computes/lowpri/evict", json={"node_id": node_id})
    assert evicted.status_code == 200, evicted.text
    done = wait_job(api, srv, "retried", timeout=120)
    assert done["status"] == "Completed" and done["attempt"] == 2, done

    first = ok(cli(srv, "job", "stream", "-n", "retried", "--attempt", "1"))
    assert first.stdout.startswith("attempt 1\n") and "attempt 2" not in first.stdout, first.stdout
    second = ok(cli(srv, "job", "stream", "-n", "retried", "--attempt", "2"))
    assert second.stdout.startswith("attempt 2\ndone\n"), second.stdout
    latest = ok(cli(srv, "job", "stream", "-n", "retried"))
    assert latest.stdout.startswith("attempt 2\n"), latest.stdout

    attempts = shown(srv, "retried")["attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2], attempts
    for entry in attempts:
        response = api.get(entry["log"])
        assert response.status_code == 200, response.text
        assert response.json()["data"].startswith(f"attempt {entry['attempt']}\n"), response.json()
        # Each attempt keeps its own ./logs (and ./outputs).
        archive = api.get(entry["artifacts"])
        assert archive.status_code == 200, archive.text
        folder = tmp_path / f"attempt-{entry['attempt']}"
        unpack(archive.content, folder)
        assert (folder / "logs" / "attempt.txt").read_text() == f"attempt {entry['attempt']}\n"

    beyond = cli(srv, "job", "stream", "-n", "retried", "--attempt", "3")
    assert beyond.returncode != 0 and "attempt 3 does not exist" in beyond.stderr, beyond.stderr
    assert "from 1 to 2" in beyond.stderr, beyond.stderr
    assert cli(srv, "job", "stream", "-n", "retried", "--attempt", "0").returncode != 0
    zero = api.get(f"{srv.ws_path}/jobs/retried/logs", params={"attempt": 0})
    assert zero.status_code in (400, 422), zero.text


# -- a curated environment -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server whose nodes reach PyPI as configured on this host (no test CA, no proxy)."""
    yield from served(tmp_path_factory, "azureml-curated")


def test_a_curated_environment_job_runs_as_written(plain_srv: RunningServer, tmp_path: Path) -> None:
    name, log = run_example(plain_srv, "hello-sklearn.yml")
    assert re.search(r"training accuracy [01]\.\d{3} on 200 samples", log), log
    ok(cli(plain_srv, "job", "download", "-n", name, "--all", "-p", str(tmp_path)))
    assert (tmp_path / "artifacts" / "outputs" / "model.pkl").stat().st_size > 0
    # Issue 25.1: what the samples import there, as in Azure's image (matplotlib, pyarrow …); the
    # environment built above is reused.
    imports = (
        Path(__file__).resolve().parents[1] / "data" / "azureml_environments" / "curated-sklearn-imports.yml"
    )
    streamed = ok(cli(plain_srv, "job", "create", "-f", str(imports), "--stream"))
    assert re.search(r"sample imports ok 1\.5\.\d+", streamed.stdout), streamed.stdout


# -- the samples' data set-up ----------------------------------------------------------------------
def test_sample_data_put_in_place_with_the_cli_is_read_as_the_samples_name_it(
    srv: RunningServer, tmp_path: Path
) -> None:
    """Azure's setup script uploads example-data to the workspace's blob store and registers
    ``sampledata``; here ``cloudlet datastore upload`` and ``data create`` do it, and a job reads
    both ``azureml://datastores/workspaceblobstore/paths/example-data/…`` and
    ``azureml:sampledata@latest``."""
    local = tmp_path / "example-data"
    (local / "sub").mkdir(parents=True)
    (local / "titanic.csv").write_text("survived,age\n1,22\n0,38\n")
    (local / "sub" / "note.txt").write_text("beneath\n")
    uploaded = json.loads(
        ok(
            cli(
                srv,
                "datastore",
                "upload",
                "-s",
                str(local),
                "--destination-path",
                "example-data",
                "-o",
                "json",
            )
        ).stdout
    )
    assert uploaded["uri"] == "azureml://datastores/workspaceblobstore/paths/example-data", uploaded
    folder = "azureml://datastores/workspaceblobstore/paths/example-data/"
    ok(cli(srv, "data", "create", "--name", "sampledata", "--path", folder, "--type", "uri_folder"))
    job_file = tmp_path / "reads-samples.yml"
    job_file.write_text(
        yaml.safe_dump(
            {
                "command": "cat ${{inputs.titanic}}; cat ${{inputs.sample}}/sub/note.txt",
                "inputs": {
                    "titanic": {"type": "uri_file", "path": folder + "titanic.csv"},
                    "sample": {"type": "uri_folder", "path": "azureml:sampledata@latest"},
                },
                "compute": "local",
            }
        )
    )
    created = ok(cli(srv, "job", "create", "-f", str(job_file), "--stream"))
    assert "survived,age\n1,22" in created.stdout and "beneath\n" in created.stdout, created.stdout
    back = tmp_path / "back"
    ok(cli(srv, "datastore", "download", "--path", "example-data/sub", "--download-path", str(back)))
    assert (back / "note.txt").read_text() == "beneath\n"  # a folder's contents, as upload takes them
