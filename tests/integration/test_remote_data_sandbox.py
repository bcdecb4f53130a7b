"""Job data over HTTP with the agent as root and the job in its bubblewrap sandbox as an
unprivileged user (the local provider, run with ``CLOUDLET_SHARED_FILESYSTEM=0`` as a remote host
would be): the job writes its outputs as the sandbox user, cannot write its input's copy, and the
links it plants in its outputs are never uploaded (the root agent packs without following them)."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, delete_compute, log_text, served, submit, wait_job, wait_until

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0, reason="needs root and bubblewrap (scripts/setup.sh)"
)
SANDBOX_UID = 65534
CLUSTER = "rds-cluster"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    env = {"CLOUDLET_SHARED_FILESYSTEM": "0", "CLOUDLET_SANDBOX": "bwrap"}
    yield from served(tmp_path_factory, "remote-data-sandbox", extra_env=env)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_sandboxed_job_writes_its_outputs_over_http_and_its_links_stay_behind(
    api: httpx.Client, srv: RunningServer
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("a.txt")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"alpha\n"))
    url = f"{srv.ws_path}/datastores/workspaceblobstore/paths/rds-in"
    assert (
        api.put(url, content=buffer.getvalue(), headers={"Content-Type": "application/gzip"}).status_code
        == 201
    )
    body = {
        "type": "amlcompute",
        "size": "Standard_DS2_v2",
        "min_instances": 0,
        "max_instances": 1,
        "idle_time_before_scale_down": 60,
    }
    create_compute(api, srv, CLUSTER, body)
    try:
        command = (
            "echo in at ${{inputs.data}}; cat ${{inputs.data}}/a.txt; echo uid $(id -u); "
            "(echo x > ${{inputs.data}}/a.txt) 2>/dev/null || echo the input copy is read-only; "
            "echo result > ${{outputs.result}}/r.txt; ln -s /etc/shadow ${{outputs.result}}/leak; "
            "ln -s /etc/passwd outputs/leak2; echo kept > outputs/kept.txt; "
            "echo step-3 > $CLOUDLET_CHECKPOINT_DIR/c"
        )
        job = {
            "command": command,
            "compute": f"azureml:{CLUSTER}",
            "inputs": {
                "data": {"type": "uri_folder", "path": "azureml://datastores/workspaceblobstore/paths/rds-in"}
            },
            "outputs": {"result": {"type": "uri_folder"}},
        }
        submit(api, srv, "rds-job", job)
        done = wait_job(api, srv, "rds-job", timeout=120)
        text = log_text(api, srv, "rds-job")
        assert done["status"] == "Completed", text
        assert "alpha" in text and f"uid {SANDBOX_UID}" in text and "the input copy is read-only" in text, (
            text
        )
        seen_at = text.split("in at ", 1)[1].split()[0]
        assert seen_at.startswith(str(srv.home / "nodes")) and "/data/r-" in seen_at, seen_at
        assert "leak is not uploaded: a symbolic link" in text and "leak2 is not uploaded" in text, text
        out = members(api.get(f"{srv.ws_path}/jobs/rds-job/outputs/result").content)
        assert set(out) == {"r.txt"}, out
        artifacts = members(api.get(f"{srv.ws_path}/jobs/rds-job/artifacts").content)
        assert any(n.endswith("outputs/kept.txt") for n in artifacts), artifacts
        assert not any("leak2" in n for n in artifacts), artifacts
        store = next((srv.home / "data" / "workspaces").glob("*/datastores/workspaceblobstore/rds-in"))
        assert (store / "a.txt").read_text() == "alpha\n"
        checkpoint = store.parent / "checkpoints" / "rds-job" / "c"
        assert checkpoint.read_text() == "step-3\n"
        written = store.parent / "azureml" / "rds-job" / "result"
        assert sorted(p.name for p in written.iterdir()) == ["r.txt"]
        assert not Path(written / "leak").is_symlink()
        copies = Path(seen_at).parent  # <node dir>/data/<run>: removed once all is uploaded
        wait_until(lambda: not copies.exists(), 30, f"{copies} to be removed")
    finally:
        delete_compute(api, srv, CLUSTER)


def test_an_output_the_server_cannot_take_fails_the_job_with_the_reason(
    api: httpx.Client, srv: RunningServer
) -> None:
    # The output's folder on the server already holds a folder `x`; the job replaces it with a
    # file in its copy, which cannot be written over that folder: the upload is refused.
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("x/inner.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"in\n"))
    url = f"{srv.ws_path}/datastores/workspaceblobstore/paths/rds-conflict"
    put = api.put(url, content=buffer.getvalue(), headers={"Content-Type": "application/gzip"})
    assert put.status_code == 201
    body = {
        "type": "amlcompute",
        "size": "Standard_DS2_v2",
        "min_instances": 0,
        "max_instances": 1,
        "idle_time_before_scale_down": 60,
    }
    create_compute(api, srv, CLUSTER, body)
    try:
        job = {
            "command": (
                'O=${{outputs.result}}; echo out at $O; cat "$O/x/inner.txt"; rm -r "$O/x"; '
                'echo file > "$O/x"'
            ),
            "compute": f"azureml:{CLUSTER}",
            "outputs": {
                "result": {
                    "type": "uri_folder",
                    "path": "azureml://datastores/workspaceblobstore/paths/rds-conflict",
                }
            },
        }
        submit(api, srv, "rds-refused", job)
        done = wait_job(api, srv, "rds-refused", timeout=120)
        text = log_text(api, srv, "rds-refused")
        assert done["status"] == "Failed", (done, text)
        assert done["error"]["code"] == "OutputUploadFailed", done
        assert "in\n" in text, text  # the output's earlier content was downloaded first
        assert "the run's outputs could not be uploaded to the server" in text and "rds-conflict" in text, (
            text
        )
        store = next((srv.home / "data" / "workspaces").glob("*/datastores/workspaceblobstore/rds-conflict"))
        assert (store / "x" / "inner.txt").read_text() == "in\n"  # the folder stays a folder
        kept = Path(text.split("out at ", 1)[1].split()[0])  # the copy is kept for a look
        assert kept.is_relative_to(srv.home / "nodes") and (kept / "x").read_text() == "file\n"
    finally:
        delete_compute(api, srv, CLUSTER)
