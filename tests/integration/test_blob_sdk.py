"""The official azure-ai-ml SDK, unmodified, over HTTPS, uploading through the Blob service subset
(api/blob.py): a code folder (hash look-up, startPendingUpload, blob upload, the version PUT
checked against the folder's content hash; the second time the look-up finds it and nothing is
uploaded), the default datastore, and a local data file and folder uploaded with listSecrets'
SAS, as job inputs are. One SDK process; files checked byte for byte on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.azureml_helpers import azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer, _kill_with_its_nodes, start_server

SDK_SCRIPT = r"""
import json
from azure.ai.ml import MLClient
from azure.ai.ml.entities._assets import Code
from azure.ai.ml._artifacts._artifact_utilities import _upload_and_generate_remote_uri
from azure.identity import DefaultAzureCredential

def out(step, **kw):
    print("RESULT " + json.dumps({"step": step, **kw}), flush=True)

ml = MLClient.from_config(DefaultAzureCredential())
code = ml._code.create_or_update(Code(path="./src"))
out("code", id=code.id, path=code.path)
again = ml._code.create_or_update(Code(path="./src"))
out("again", id=again.id)
store = ml.datastores.get_default()
out("datastore", store=store.name, names=[d.name for d in ml.datastores.list()])
for name in ("local.csv", "data"):
    uri = _upload_and_generate_remote_uri(ml._operation_scope, ml._datastores, name, show_progress=False)
    out("upload", name=name, uri=uri)
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("blob-sdk") / "home")
    yield server
    _kill_with_its_nodes(server)


def test_sdk_uploads_code_and_data(srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "src" / "main.py").write_text("print('hello from the SDK')\n")
    (tmp_path / "src" / "pkg" / "weights.bin").write_bytes(os.urandom(5 << 20))
    (tmp_path / "local.csv").write_text("a,b\n1,2\n")
    (tmp_path / "data" / "part").mkdir(parents=True)
    (tmp_path / "data" / "part" / "0.csv").write_text("x\n")
    env = azureml_env(srv.cli_env())
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    steps = {(r["step"], r.get("name")): r for r in run_sdk(SDK_SCRIPT, tmp_path, env, timeout=240)}

    code = steps[("code", None)]
    assert steps[("again", None)]["id"] == code["id"]  # found by its hash: not uploaded again
    folder = code["path"].split("/workspaceblobstore/", 1)[1]
    store = srv.home / "data" / "workspaces" / "1" / "datastores" / "workspaceblobstore"
    for path in (tmp_path / "src").rglob("*"):
        if path.is_file():
            assert (store / folder / path.relative_to(tmp_path / "src")).read_bytes() == path.read_bytes()
    with httpx.Client(base_url=srv.endpoint, headers={"Authorization": f"Bearer {srv.api_key}"}) as api:
        arm = code["id"].split("/codes/", 1)[0]
        hashed = api.get(f"{code['id']}").json()["properties"]["properties"]["hash_sha256"]
        found = api.get(f"{arm}/codes/any/versions", params={"hash": hashed, "hashVersion": "202208"})
        assert [v["id"] for v in found.json()["value"]] == [code["id"]]

    assert steps[("datastore", None)]["names"] == ["workspaceartifactstore", "workspaceblobstore"]
    for name, inner in (("local.csv", "local.csv"), ("data", "data/part/0.csv")):
        uri = steps[("upload", name)]["uri"]
        assert uri.startswith("azureml://datastores/workspaceblobstore/paths/LocalUpload/"), uri
        relative = uri.split("/paths/", 1)[1]
        landed = store / relative / inner.split("/", 1)[1] if "/" in inner else store / relative
        assert landed.read_bytes() == (tmp_path / inner).read_bytes()
    assert json.loads((tmp_path / "config.json").read_text())["workspace_name"] == "default"
