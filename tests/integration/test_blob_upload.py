"""The Blob service subset (api/blob.py) and the ARM codes and datastores routes, driven as
azure-ai-ml drives them, with the real ``azure-storage-blob`` client against a real server: a
folder uploaded through the SAS URL of startPendingUpload lands byte for byte in the datastore,
registers as a code version whose content hash is checked and which a hash look-up then finds,
and becomes a native snapshot. Refusals: a tampered, expired or missing signature, a path outside
the signature's folder or the datastore, a wrong MD5, an unverifiable checksum, a block list
naming unstaged blocks, an overwrite the client did not ask for, a Reader's write.

Plain http (the Blob client allows a SAS over http); the SDK itself speaks https to the TLS
listener, which serves the same routes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urljoin

import httpx
import pytest
from azure.core.exceptions import HttpResponseError, ResourceExistsError, ResourceNotFoundError
from azure.storage.blob import BlobServiceClient, ContainerClient
from sqlalchemy import create_engine, text

from cloudlet.services.assets import blob_sas
from cloudlet.store import db
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import log_text, served, submit, wait_job

BIG = 5 * 1024 * 1024 + 3  # above the client's (lowered) single-put size: sent as blocks


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "blob")


def arm_ws(srv: RunningServer) -> str:
    return (
        f"/subscriptions/{srv.subscription_id}/resourceGroups/default"
        "/providers/Microsoft.MachineLearningServices/workspaces/default"
    )


def sdk_content_hash(folder: Path) -> str:
    """azure-ai-ml 1.35's content hash of a folder (_asset_utils.get_content_hash), as the SDK
    computes it before asking for a version with that hash."""
    files = sorted(
        ((p, p.relative_to(folder).as_posix()) for p in folder.rglob("*") if p.is_file()),
        key=lambda item: item[1].lower(),
    )
    digest = hashlib.sha256(str(len(files)).encode())
    for path, name in files:
        digest.update(f"#{name}#".encode())
        digest.update(str(path.stat().st_size).encode())
    for path, _ in files:
        digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project") / "src"
    for i in range(24):
        sub = root / f"pkg{i % 4}" / ("deep" if i % 3 == 0 else "")
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"m{i}.py").write_text(f"print({i})\n" * (i + 1))
    (root / "main.py").write_text("print('hello from uploaded code')\n")
    (root / "empty.txt").write_bytes(b"")
    (root / "Weights.bin").write_bytes(os.urandom(BIG))
    return root


def upload_folder(sas_uri: str, folder: Path, seen: list[str]) -> str:
    """What azure-ai-ml's BlobStorageClient.upload does with a container SAS URL: look at the
    indicator file, upload each file beneath ``<folder name>/`` (overwrite=False, MD5 checked),
    then mark the indicator file's metadata as complete. Returns the indicator blob's name; the
    URLs it requested are added to ``seen``."""
    client = ContainerClient.from_container_url(sas_uri, max_single_put_size=4 << 20, max_block_size=1 << 20)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    names = [f"{folder.name}/{p.relative_to(folder).as_posix()}" for p in files]
    indicator = names[0]
    with pytest.raises(ResourceNotFoundError):
        client.get_blob_client(indicator).get_blob_properties()
    for path, name in zip(files, names, strict=True):
        with open(path, "rb") as data:
            client.upload_blob(
                name=name,
                data=data,
                validate_content=path.stat().st_size > 0,
                overwrite=False,
                raw_request_hook=lambda request: seen.append(request.http_request.url),
            )
    client.get_blob_client(indicator).set_blob_metadata({"upload_status": "completed", "name": "n"})
    return indicator


def token_secret(srv: RunningServer) -> str:
    engine = create_engine(db.sqlite_url(srv.home))
    with engine.connect() as conn:
        secret = str(conn.execute(text("SELECT token_secret FROM installation")).scalar_one())
    engine.dispose()
    return secret


def start_upload(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    response = api.post(
        f"{arm_ws(srv)}/codes/{name}/versions/1/startPendingUpload",
        json={"pendingUploadType": "TemporaryBlobReference"},
    )
    assert response.status_code == 200, response.text
    reference: dict[str, Any] = response.json()["blobReferenceForConsumption"]
    return reference


def test_code_upload_through_sas_then_hash_lookup_and_snapshot(
    srv: RunningServer, api: httpx.Client, project: Path
) -> None:
    digest = sdk_content_hash(project)
    lookup = f"{arm_ws(srv)}/codes/any/versions?hash={digest}&hashVersion=202208"
    assert api.get(lookup).json() == {"value": []}

    reference = start_upload(api, srv, "c0ffee")
    sas_uri, blob_uri = reference["credential"]["sasUri"], reference["blobUri"]
    seen: list[str] = []
    indicator = upload_folder(sas_uri, project, seen)
    assert any("comp=blocklist" in url for url in seen), "the big file was not sent as blocks"
    assert sum("comp=block&" in url for url in seen) == 6  # 5 MiB + 3 bytes in 1 MiB blocks

    # The SDK's code URI: urljoin(blobUri, f"{container}/{relative path}").
    container = ContainerClient.from_container_url(sas_uri).container_name
    code_uri = urljoin(blob_uri, f"{container}/{project.name}")
    body = {
        "properties": {
            "codeUri": code_uri,
            "isAnonymous": True,
            "properties": {"hash_sha256": digest, "hash_version": 202208},  # a number, as the SDK sends
        }
    }
    put = api.put(f"{arm_ws(srv)}/codes/c0ffee/versions/1", json=body)
    assert put.status_code == 201, put.text
    assert put.json()["id"].endswith("/codes/c0ffee/versions/1")
    again = api.put(f"{arm_ws(srv)}/codes/c0ffee/versions/1", json=body)
    assert again.status_code == 200, again.text

    def register_v2(_: int) -> int:
        with srv.client() as client:
            return client.put(f"{arm_ws(srv)}/codes/c0ffee/versions/2", json=body).status_code

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(register_v2, range(4))) == [200, 200, 200, 201]

    # On disk, in the workspace's datastore, byte for byte.
    account = blob_uri.split("/blob/", 1)[1].split("/", 1)[0]
    ws_id = blob_sas.workspace_of(account)
    store = srv.home / "data" / "workspaces" / str(ws_id) / "datastores" / "workspaceblobstore"
    landed = store / "LocalUpload" / container / project.name
    for path in project.rglob("*"):
        if path.is_file():
            assert (landed / path.relative_to(project)).read_bytes() == path.read_bytes(), path
    assert sorted(p.relative_to(landed) for p in landed.rglob("*")) == sorted(
        p.relative_to(project) for p in project.rglob("*")
    )

    # The hash look-up finds it now, under any code name, and the version reads back.
    found = api.get(lookup).json()["value"]
    assert [v["id"].rsplit("/codes/", 1)[1] for v in found] == ["c0ffee/versions/1", "c0ffee/versions/2"]
    shown = api.get(f"{arm_ws(srv)}/codes/c0ffee/versions/1").json()
    assert shown["properties"]["codeUri"] == code_uri
    assert shown["properties"]["properties"]["hash_sha256"] == digest

    # The bridge: the version is a native snapshot (what a job's code and the agent download use).
    snapshots = list((srv.home / "data" / "workspaces" / str(ws_id) / "codes").glob("*.tar.gz"))
    assert len(snapshots) == 1
    snapshot = snapshots[0].name.removesuffix(".tar.gz")
    assert api.get(f"{srv.ws_path}/codes/{snapshot}").status_code == 200
    with tarfile.open(fileobj=io.BytesIO(snapshots[0].read_bytes()), mode="r:gz") as archive:
        members = {m.name: archive.extractfile(m).read() for m in archive if m.isfile()}  # type: ignore[union-attr]
    assert members["Weights.bin"] == (project / "Weights.bin").read_bytes()
    assert members["main.py"] == (project / "main.py").read_bytes()
    # ... and a job runs it: the agent fetches the snapshot and starts in the unpacked folder.
    submit(
        api,
        srv,
        "uploaded-code",
        {"command": "cat main.py && ls pkg0", "compute": "local", "code": f"codes/{snapshot}"},
    )
    done = wait_job(api, srv, "uploaded-code")
    assert done["status"] == "Completed", done
    assert "hello from uploaded code" in log_text(api, srv, "uploaded-code")

    # What the SDK reads back: the completion marker, listings (flat and by folder), downloads.
    client = ContainerClient.from_container_url(sas_uri)
    assert client.get_blob_client(indicator).get_blob_properties().metadata["upload_status"] == "completed"
    listed = {b.name: b for b in client.list_blobs(name_starts_with=f"{project.name}/", include=["metadata"])}
    assert len(listed) == sum(1 for p in project.rglob("*") if p.is_file())
    assert listed[indicator].metadata == {"upload_status": "completed", "name": "n"}
    assert listed[f"{project.name}/Weights.bin"].size == BIG
    expected_md5 = hashlib.md5((project / "main.py").read_bytes()).digest()
    assert bytes(listed[f"{project.name}/main.py"].content_settings.content_md5) == expected_md5
    top = {b.name for b in client.walk_blobs(name_starts_with=f"{project.name}/", delimiter="/")}
    assert top == {f"{project.name}/pkg{i}/" for i in range(4)} | {
        f"{project.name}/{n}" for n in ("main.py", "empty.txt", "Weights.bin")
    }
    big = client.download_blob(f"{project.name}/Weights.bin", max_concurrency=2).readall()
    assert big == (project / "Weights.bin").read_bytes()
    assert client.download_blob(f"{project.name}/empty.txt").readall() == b""
    pages = list(client.list_blobs(name_starts_with=f"{project.name}/pkg", results_per_page=5).by_page())
    assert sum(len(list(p)) for p in pages) == 24 and len(pages) == 5


def test_refusals(srv: RunningServer, api: httpx.Client, project: Path) -> None:
    reference = start_upload(api, srv, "refusals")
    sas_uri = reference["credential"]["sasUri"]
    base, query = sas_uri.split("?", 1)
    client = ContainerClient.from_container_url(sas_uri)

    def status(method: str, url: str, **kwargs: Any) -> tuple[int, str]:
        response = httpx.request(method, url, **kwargs)
        return response.status_code, response.headers.get("x-ms-error-code", "")

    put_blob = {"x-ms-blob-type": "BlockBlob"}

    def put(url: str, **headers: str) -> tuple[int, str]:
        return status("PUT", url, content=b"x", headers={**put_blob, **headers})

    # No signature, a tampered one, an expired one.
    assert put(f"{base}/a.txt") == (401, "NoAuthenticationInformation")
    tampered = query.replace("sp=racwl", "sp=racwdl")
    assert put(f"{base}/a.txt?{tampered}") == (403, "AuthenticationFailed")
    bad_sig = query[:-2] + ("AA" if not query.endswith("AA") else "BB")
    assert status("GET", f"{base}/a.txt?{bad_sig}")[0] == 403
    account = base.split("/blob/", 1)[1].split("/", 1)[0]
    ws_id = blob_sas.workspace_of(account)
    assert ws_id is not None
    folder = "LocalUpload/" + base.rsplit("/", 1)[1]
    # Expired: minted (for the same issuer) a little over its lifetime ago.
    minted_at = datetime.now(UTC) - blob_sas.DEFAULT_TTL - timedelta(minutes=1)
    fields = dict(parse_qsl(query))
    issuer = blob_sas.Issuer(int(fields["skoid"]), fields.get("sktid"))
    secret = token_secret(srv)
    expired = blob_sas.mint(secret, ws_id, "workspaceblobstore", issuer, folder, "racwl", now=minted_at)
    assert put(f"{base}/a.txt?{expired}") == (403, "AuthenticationFailed")
    # A signature for one workspace is not another's.
    other = base.replace(f"/blob/{account}/", f"/blob/ws{ws_id + 1}/")
    assert status("GET", f"{other}/a.txt?{query}")[0] == 403

    # Paths: out of the signature's folder, out of the datastore, through '..'.
    store_root = base.rsplit("/LocalUpload/", 1)[0]
    assert put(f"{store_root}/LocalUpload/elsewhere/x?{query}") == (403, "AuthorizationFailure")
    assert put(f"{base}/%2e%2e/%2e%2e/escape.txt?{query}")[0] == 400
    assert status("GET", f"{base}/%2e%2e/%2e%2e/%2e%2e/cloudlet.db?{query}")[0] == 400
    ws_dir = srv.home / "data" / "workspaces" / str(ws_id)
    assert not list(ws_dir.rglob("escape.txt"))
    # A link planted in the datastore (a job can make one) is never followed, to read or to write.
    folder_on_disk = ws_dir / "datastores" / "workspaceblobstore" / folder
    folder_on_disk.mkdir(parents=True, exist_ok=True)
    outside = srv.home / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not yours")
    (folder_on_disk / "link").symlink_to(outside)
    (folder_on_disk / "file-link").symlink_to(outside / "secret.txt")
    assert status("GET", f"{base}/link/secret.txt?{query}")[0] == 404
    assert status("GET", f"{base}/file-link?{query}")[0] == 404
    assert put(f"{base}/link/planted.txt?{query}")[0] == 409
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert "file-link" not in {b.name for b in client.list_blobs()}

    # '..' is no datastore (it would be the workspace's own folder, its code snapshots), natively
    # or as a container.
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w:gz") as archive:
        member = tarfile.TarInfo("planted.txt")
        member.size = 1
        archive.addfile(member, io.BytesIO(b"x"))
    dotdot = f"{srv.ws_path}/datastores/%2e%2e/paths/codes"
    planted = api.put(dotdot, content=tarball.getvalue(), headers={"Content-Type": "application/gzip"})
    assert planted.status_code == 400 and planted.json()["error"]["target"] == "datastore", planted.text
    assert api.get(f"{srv.ws_path}/datastores/%2e%2e/paths/codes").status_code == 400
    assert status("GET", f"{base.split('/workspaceblobstore/')[0]}/%2e%2e/codes?{query}")[0] in (400, 403)

    # A wrong MD5 stores nothing; a checksum cloudlet cannot verify is refused.
    wrong_md5 = base64.b64encode(hashlib.md5(b"other").digest()).decode()
    assert put(f"{base}/md5.txt?{query}", **{"Content-MD5": wrong_md5}) == (400, "Md5Mismatch")
    with pytest.raises(ResourceNotFoundError):
        client.get_blob_client("md5.txt").get_blob_properties()
    crc = {"x-ms-content-crc64": base64.b64encode(b"12345678").decode()}
    assert put(f"{base}/crc.txt?{query}", **crc) == (400, "UnsupportedHeader")

    # Blocks stay invisible until committed; a list naming a block never staged is refused.
    blob = client.get_blob_client("blocks.bin")
    blob.stage_block("YmxvY2sx", b"first")
    with pytest.raises(ResourceNotFoundError):
        blob.get_blob_properties()
    assert not [b for b in client.list_blobs() if b.name == "blocks.bin"]
    with pytest.raises(HttpResponseError) as refused:
        blob.commit_block_list(["YmxvY2sx", "YmxvY2sy"])
    assert refused.value.status_code == 400
    blob.stage_block("YmxvY2sy", b"second")
    blob.commit_block_list(["YmxvY2sx", "YmxvY2sy"])
    assert blob.download_blob().readall() == b"firstsecond"

    # overwrite=False (the SDK's) on an existing blob; overwrite=True replaces it.
    client.upload_blob("once.txt", b"1")
    with pytest.raises(ResourceExistsError):
        client.upload_blob("once.txt", b"2")
    client.upload_blob("once.txt", b"3", overwrite=True)
    assert client.download_blob("once.txt").readall() == b"3"

    # A code version whose hash does not match what was uploaded is refused, naming the field.
    container = client.container_name
    body = {
        "properties": {
            "codeUri": urljoin(reference["blobUri"], f"{container}/blocks.bin"),
            "properties": {"hash_sha256": "0" * 64, "hash_version": "202208"},
        }
    }
    refused_put = api.put(f"{arm_ws(srv)}/codes/refusals/versions/1", json=body)
    assert refused_put.status_code == 400, refused_put.text
    assert refused_put.json()["error"]["target"] == "properties.properties.hash_sha256"
    elsewhere = {"properties": {"codeUri": "https://example.com/blob/ws999/workspaceblobstore/x"}}
    refused_uri = api.put(f"{arm_ws(srv)}/codes/refusals/versions/2", json=elsewhere)
    assert refused_uri.status_code == 400 and refused_uri.json()["error"]["target"] == "properties.codeUri"


def test_datastores_and_secrets(srv: RunningServer, api: httpx.Client) -> None:
    listed = api.get(f"{arm_ws(srv)}/datastores", params={"isDefault": "true"}).json()["value"]
    assert [d["name"] for d in listed] == ["workspaceblobstore"]
    store = api.get(f"{arm_ws(srv)}/datastores/workspaceblobstore").json()["properties"]
    assert store["datastoreType"] == "AzureBlob" and store["credentials"]["credentialsType"] == "Sas"
    assert api.get(f"{arm_ws(srv)}/datastores/nope").status_code == 404
    secrets = api.post(f"{arm_ws(srv)}/datastores/workspaceblobstore/listSecrets").json()
    assert secrets["secretsType"] == "Sas"

    # The SDK's account URL, https://{accountName}.blob.{suffix} (http here): the fragment drops.
    account_url = f"http://{store['accountName']}.blob.core.windows.net"
    service = BlobServiceClient(account_url=account_url, credential=secrets["sasToken"])
    container = service.get_container_client(store["containerName"])
    container.upload_blob("data/local.csv", b"a,b\n1,2\n")
    assert container.download_blob("data/local.csv").readall() == b"a,b\n1,2\n"
    ws_id = blob_sas.workspace_of(store["accountName"].split("/blob/", 1)[1].rstrip("#"))
    on_disk = srv.home / "data" / "workspaces" / str(ws_id) / "datastores" / "workspaceblobstore" / "data"
    assert (on_disk / "local.csv").read_bytes() == b"a,b\n1,2\n"
    assert api.get(f"{srv.ws_path}/datastores/workspaceblobstore/paths/data/local.csv").json()["size"] == 8

    # A Reader's signature reads and lists, and writes nothing.
    reader = new_user(api, srv, "blob-reader", "Reader")
    with srv.client(reader) as as_reader:
        read_only = as_reader.post(f"{arm_ws(srv)}/datastores/workspaceblobstore/listSecrets").json()
        upload = as_reader.post(f"{arm_ws(srv)}/codes/x/versions/1/startPendingUpload", json={})
        assert upload.status_code == 403
    reading = BlobServiceClient(account_url=account_url, credential=read_only["sasToken"])
    box = reading.get_container_client("workspaceblobstore")
    assert box.download_blob("data/local.csv").readall() == b"a,b\n1,2\n"
    with pytest.raises(HttpResponseError) as refused:
        box.upload_blob("data/other.csv", b"x")
    assert refused.value.status_code == 403
    # A user without a role on the workspace does not learn it exists.
    stranger = new_user(api, srv, "blob-stranger", None)
    with srv.client(stranger) as as_stranger:
        assert as_stranger.post(f"{arm_ws(srv)}/datastores/workspaceblobstore/listSecrets").status_code == 404
        pending = as_stranger.post(f"{arm_ws(srv)}/codes/x/versions/1/startPendingUpload", json={})
        assert pending.status_code == 404
    # Nobody without a key reaches the ARM routes.
    anonymous = httpx.post(f"{srv.endpoint}{arm_ws(srv)}/datastores/workspaceblobstore/listSecrets")
    assert anonymous.status_code == 401
