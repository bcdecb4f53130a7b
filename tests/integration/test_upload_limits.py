"""Uploads are bounded (issue 24, defects 4 and 6): an archive's unpacked bytes and entries are
counted while it unpacks and it stops at the limit with a 413 naming it, leaving nothing behind;
a workspace's storage quota (an administrator's setting) refuses writes past it with a 403 on
every upload route; a failed upload leaves no folder; a folder asked for as a log is a 400.
One real server with small limits (8 MiB, 50 entries), spoken to over HTTP."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import RunningServer
from tests.integration.test_blob_upload import arm_ws, start_upload
from tests.jobs_helpers import error_of, served, submit, wait_job

MIB = 1 << 20


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # usage measured at every upload: the quota test writes beside the API, as a job would
    env = {
        "CLOUDLET_MAX_UNPACKED_MIB": "8",
        "CLOUDLET_MAX_UNPACKED_FILES": "50",
        "CLOUDLET_STORAGE_USAGE_TTL_S": "0",
    }
    yield from served(tmp_path_factory, "uploads", extra_env=env)


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client


class Zeros:
    """A file of N zero bytes that is never held in memory."""

    def __init__(self, size: int) -> None:
        self.left = size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def zeros_bomb(size: int, name: str = "zeros.bin") -> bytes:
    """A tar.gz of SIZE zero bytes: ~1000 times smaller than what it unpacks to."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        info = tarfile.TarInfo(name)
        info.size = size
        archive.addfile(info, Zeros(size))  # type: ignore[arg-type]
    return buffer.getvalue()


def many_files(count: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for i in range(count):
            info = tarfile.TarInfo(f"f{i}.txt")
            archive.addfile(info, io.BytesIO(b""))
    return buffer.getvalue()


def datastore_dir(srv: RunningServer) -> Path:
    ws_dir = next((srv.home / "data" / "workspaces").iterdir())
    return ws_dir / "datastores" / "workspaceblobstore"


def leftovers(folder: Path) -> list[str]:
    return [str(p) for p in folder.rglob("*")] if folder.exists() else []


def test_an_archive_bomb_stops_at_the_unpacked_limit_and_leaves_nothing(
    api: httpx.Client, srv: RunningServer
) -> None:
    bomb = zeros_bomb(64 * MIB)
    assert len(bomb) < MIB  # the body is far under every body limit
    ds = f"{srv.ws_path}/datastores/workspaceblobstore"
    response = api.put(f"{ds}/paths/bombed/here", content=bomb)
    assert response.status_code == 413, response.text
    error = error_of(response)
    assert error["code"] == "ArchiveTooLarge" and "8 MiB" in error["message"]
    assert api.get(f"{ds}/paths/bombed").status_code == 404  # no folder left behind
    assert leftovers(datastore_dir(srv) / "bombed") == []
    assert api.put(f"{ds}/paths/bombed/here", content=zeros_bomb(MIB)).status_code == 201  # control


def test_an_archive_of_too_many_entries_is_refused_with_nothing_written(
    api: httpx.Client, srv: RunningServer
) -> None:
    ds = f"{srv.ws_path}/datastores/workspaceblobstore"
    response = api.put(f"{ds}/paths/many", content=many_files(51))
    assert response.status_code == 413, response.text
    assert error_of(response)["code"] == "ArchiveTooManyFiles" and "50" in error_of(response)["message"]
    assert leftovers(datastore_dir(srv) / "many") == []
    assert api.put(f"{ds}/paths/many", content=many_files(50)).status_code == 201  # control


def test_a_failed_upload_leaves_no_folder_and_keeps_what_was_there(
    api: httpx.Client, srv: RunningServer
) -> None:
    ds = f"{srv.ws_path}/datastores/workspaceblobstore"
    response = api.put(f"{ds}/paths/half/made/folder", content=b"not a tar.gz")
    assert error_of(response)["target"] == "body"
    assert api.get(f"{ds}/paths/half").status_code == 404
    # A good file then an over-limit one: all or nothing, and the earlier version stays.
    assert api.put(f"{ds}/paths/kept", content=zeros_bomb(10, "a.bin")).status_code == 201
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, size in (("a.bin", 20), ("b.bin", 9 * MIB)):
            info = tarfile.TarInfo(name)
            info.size = size
            archive.addfile(info, io.BytesIO(bytes(size)))
    assert api.put(f"{ds}/paths/kept", content=buffer.getvalue()).status_code == 413
    kept = datastore_dir(srv) / "kept"
    assert sorted(p.name for p in kept.iterdir()) == ["a.bin"] and (kept / "a.bin").stat().st_size == 10


def test_a_folder_asked_for_as_a_log_file_is_a_400(api: httpx.Client, srv: RunningServer) -> None:
    submit(api, srv, "logs-job", {"command": "echo hello", "resources": {"instance_type": "Standard_DS3_v2"}})
    wait_job(api, srv, "logs-job", ("Completed",))
    url = f"{srv.ws_path}/jobs/logs-job/logs"
    response = api.get(url, params={"file": "user_logs"})
    error = error_of(response)
    assert response.status_code == 400 and error["target"] == "file" and "folder" in error["message"]
    assert "hello" in api.get(url, params={"file": "user_logs/std_log.txt"}).json()["data"]  # control


def test_the_workspace_storage_quota_refuses_uploads_past_it(api: httpx.Client, srv: RunningServer) -> None:
    ws = srv.ws_path
    workspace = api.get(srv.ws_path).json()
    assert workspace["storage_quota_gib"] is None  # the server's default (100 GiB)
    # A job's 1 GiB output (sparse: it costs no disk) fills a 1 GiB quota.
    filler = datastore_dir(srv) / "azureml" / "filler"
    filler.mkdir(parents=True, exist_ok=True)
    with open(filler / "big.bin", "wb") as handle:
        handle.truncate(1 << 30)
    try:
        location = workspace["location"]
        set_quota = api.put(ws, json={"location": location, "storage_quota_gib": 1})
        assert set_quota.status_code in (200, 201), set_quota.text
        assert api.get(srv.ws_path).json()["storage_quota_gib"] == 1
        ds = f"{srv.ws_path}/datastores/workspaceblobstore"
        refused = api.put(f"{ds}/paths/over", content=zeros_bomb(10))
        assert refused.status_code == 403 and error_of(refused)["code"] == "WorkspaceStorageQuotaExceeded"
        assert "1 GiB" in error_of(refused)["message"]
        assert api.get(f"{ds}/paths/over").status_code == 404
        code = zeros_bomb(20, "main.py")
        digest = hashlib.sha256(code).hexdigest()
        assert api.put(f"{srv.ws_path}/codes/{digest}", content=code).status_code == 403
        # The Blob service (what azure-ai-ml uploads through) answers in its own terms.
        reference = start_upload(api, srv, "quota")
        sas = urlsplit(reference["credential"]["sasUri"])
        blob = httpx.put(
            f"{sas.scheme}://{sas.netloc}{sas.path}/x.txt?{sas.query}",
            content=b"hello",
            headers={"x-ms-blob-type": "BlockBlob"},
        )
        assert blob.status_code == 403 and blob.headers["x-ms-error-code"] == "WorkspaceStorageQuotaExceeded"
        bad = api.put(ws, json={"location": location, "storage_quota_gib": 0})
        assert error_of(bad)["target"].endswith("storage_quota_gib"), bad.text
        raised = api.put(ws, json={"location": location, "storage_quota_gib": 2})
        assert raised.status_code in (200, 201)
        assert api.put(f"{ds}/paths/over", content=zeros_bomb(10)).status_code == 201
    finally:
        os.unlink(filler / "big.bin")
        api.put(ws, json={"location": api.get(srv.ws_path).json()["location"], "storage_quota_gib": None})


def test_a_code_folder_past_the_snapshot_limit_is_refused_before_it_is_packed(
    api: httpx.Client, srv: RunningServer
) -> None:
    """A code version packs its folder in memory: one larger than a snapshot may be (2 GiB) is a
    413, not a server holding it all (sparse: the file costs no disk)."""
    seed = api.put(f"{srv.ws_path}/datastores/workspaceblobstore/paths/seed", content=zeros_bomb(1))
    assert seed.status_code == 201  # the datastore's folder exists from here on
    folder = datastore_dir(srv) / "LocalUpload" / "huge-code"
    folder.mkdir(parents=True)
    with open(folder / "weights.bin", "wb") as handle:
        handle.truncate(3 << 30)
    body = {"properties": {"codeUri": "azureml://datastores/workspaceblobstore/paths/LocalUpload/huge-code"}}
    try:
        answer = api.put(f"{arm_ws(srv)}/codes/huge/versions/1", json=body)
        assert answer.status_code == 413, answer.text
        assert answer.json()["error"]["code"] == "CodeTooLarge"
        assert api.get(f"{arm_ws(srv)}/codes/huge/versions/1").status_code == 404
    finally:
        os.unlink(folder / "weights.bin")
