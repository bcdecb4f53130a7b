"""The official azure-ai-ml SDK, unmodified, against a real server over HTTPS: pointed at cloudlet
only by ``cloudlet azureml env`` and ``cloudlet azureml config`` (issue 12: computes, auth).

One module-scoped server; one SDK process does the compute calls (each SDK import costs seconds),
and the token checks speak HTTP over TLS with httpx."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from tests.azureml_helpers import SDK_VERSION, azureml_env, run_sdk, sdk_python
from tests.conftest import RunningServer, _kill_with_its_nodes, start_server
from tests.instance_helpers import Kernel, create_instance, delete_instance

PRINCIPALS = "/api/v1/principals"
PROVIDER = "providers/Microsoft.MachineLearningServices"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("arm") / "home")
    yield server
    _kill_with_its_nodes(server)


def new_user(api: httpx.Client, srv: RunningServer, name: str, role: str | None, ws: str = "default") -> str:
    assert api.post(PRINCIPALS, json={"name": name}).status_code == 201
    key = api.post(f"{PRINCIPALS}/{name}/keys")
    assert key.status_code == 201, key.text
    if role:
        assigned = api.put(f"{srv.workspace_path(ws)}/roleAssignments/{name}", json={"role": role})
        assert assigned.status_code == 200, assigned.text
    return str(key.json()["api_key"])


def tls(srv: RunningServer, bearer: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    verify = ssl.create_default_context(cafile=srv.ca_file)
    return httpx.Client(base_url=srv.https_url, verify=verify, headers=headers, timeout=30)


def arm_ws(srv: RunningServer, ws: str = "default") -> str:
    return f"/subscriptions/{srv.subscription_id}/resourceGroups/default/{PROVIDER}/workspaces/{ws}"


def msi_token(srv: RunningServer, credential: str, resource: str) -> dict[str, Any]:
    with tls(srv) as client:
        response = client.get(
            "/msi/token",
            params={"api-version": "2019-08-01", "resource": resource},
            headers={"X-IDENTITY-HEADER": credential},
        )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def reason_of(response: httpx.Response) -> str:
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "AuthenticationFailed" and error["message"]
    return str(error["details"][0]["code"])


SDK_SCRIPT = r"""
import json, os
from azure.ai.ml import MLClient
from azure.ai.ml.entities import AmlCompute, ComputeInstance
from azure.core.exceptions import HttpResponseError, ResourceNotFoundError
from azure.identity import DefaultAzureCredential

def out(**kw):
    print("RESULT " + json.dumps(kw, default=str), flush=True)

ml = MLClient.from_config(DefaultAzureCredential())
ws = ml.workspaces.get(ml.workspace_name)
out(step="workspace", name=ws.name, location=ws.location)
out(step="workspaces", names=sorted(w.name for w in ml.workspaces.list()))

cluster = ml.compute.begin_create_or_update(
    AmlCompute(name="cpu-cluster", size="Standard_DS3_v2", min_instances=0, max_instances=2,
               idle_time_before_scale_down=180, tier="low_priority")
).result()
got = ml.compute.get("cpu-cluster")
out(step="cluster", state=str(cluster.provisioning_state), size=got.size, max=got.max_instances,
    idle=got.idle_time_before_scale_down, tier=got.tier, type=got.type)
got.max_instances = 3
updated = ml.compute.begin_update(got).result()
out(step="cluster-update", max=ml.compute.get("cpu-cluster").max_instances,
    state=str(updated.provisioning_state))
minimal = ml.compute.begin_create_or_update(AmlCompute(name="minimal")).result()
out(step="minimal", size=minimal.size)

sizes = list(ml.compute.list_sizes())
usage = list(ml.compute.list_usage())
out(step="catalogue", sizes=len(sizes), ds3=[s.name for s in sizes if s.name == "Standard_DS3_v2"],
    usage=[u.as_dict() if hasattr(u, "as_dict") else dict(u.__dict__) for u in usage][:2])

try:
    old = AmlCompute(name="old-gpu", size="Standard_NC6", max_instances=1)
    ml.compute.begin_create_or_update(old).result()
    out(step="retired", error=None)
except HttpResponseError as exc:
    out(step="retired", status=exc.status_code, message=str(exc))

instance = ml.compute.begin_create_or_update(ComputeInstance(name="ci-sdk", size="Standard_DS3_v2")).result()
out(step="instance", state=instance.state, provisioning=str(instance.provisioning_state),
    services=len(instance.services or []))
nodes = ml.compute.list_nodes("ci-sdk")
out(step="nodes", nodes=[n.__dict__ if hasattr(n, "__dict__") else str(n) for n in nodes])
ml.compute.begin_stop("ci-sdk").result()
out(step="stop", state=ml.compute.get("ci-sdk").state)
ml.compute.begin_start("ci-sdk").result()
out(step="start", state=ml.compute.get("ci-sdk").state)
ml.compute.begin_restart("ci-sdk").result()
out(step="restart", state=ml.compute.get("ci-sdk").state)
out(step="list", names=sorted(c.name for c in ml.compute.list()))

for name in ("ci-sdk", "cpu-cluster", "minimal"):
    ml.compute.begin_delete(name).result()
try:
    ml.compute.get("ci-sdk")
    out(step="deleted", found=True)
except ResourceNotFoundError as exc:
    out(step="deleted", found=False, status=exc.status_code)
out(step="list-after", names=sorted(c.name for c in ml.compute.list()))

# Workspace isolation: this user has no role on wsb.
other = MLClient(DefaultAzureCredential(), ml.subscription_id, ml.resource_group_name, "wsb")
try:
    other.workspaces.get("wsb")
    out(step="other-workspace", status=200)
except HttpResponseError as exc:
    out(step="other-workspace", status=exc.status_code)
try:
    list(other.compute.list())
    out(step="other-computes", status=200)
except HttpResponseError as exc:
    out(step="other-computes", status=exc.status_code)

# A Reader (the IDENTITY_HEADER `cloudlet azureml env` prints for the reader's key) cannot create.
os.environ["IDENTITY_HEADER"] = os.environ["READER_IDENTITY_HEADER"]
reader = MLClient.from_config(DefaultAzureCredential())
out(step="reader-list", names=[c.name for c in reader.compute.list()])
try:
    reader.compute.begin_create_or_update(AmlCompute(name="sneaky", max_instances=1)).result()
    out(step="reader-create", status=200)
except HttpResponseError as exc:
    out(step="reader-create", status=exc.status_code, message=str(exc))
"""


def test_sdk_computes_end_to_end(api: httpx.Client, srv: RunningServer, tmp_path: Path) -> None:
    sdk_python()  # made here when missing (fails under CI when it cannot be)
    created = api.put(srv.workspace_path("wsb"), json={})
    assert created.status_code in (200, 201), created.text
    alice = new_user(api, srv, "alice", "Contributor")
    reader = new_user(api, srv, "rita", "Reader")
    env = azureml_env(srv.cli_env(), alice)
    reader_env = azureml_env(srv.cli_env(), reader)
    assert env["IDENTITY_HEADER"] == alice and env["REQUESTS_CA_BUNDLE"].endswith("/ca-bundle.pem")
    assert env["ARM_CLOUD_METADATA_URL"] == srv.https_url + "/metadata/endpoints"
    subprocess.run(
        [sys.executable, "-m", "cloudlet", "azureml", "config", "--path", str(tmp_path / "config.json")],
        env=srv.cli_env(),
        check=True,
        capture_output=True,
    )
    env["READER_IDENTITY_HEADER"] = reader_env["IDENTITY_HEADER"]
    steps = {r["step"]: r for r in run_sdk(SDK_SCRIPT, tmp_path, env, timeout=280)}

    assert steps["workspace"] == {"step": "workspace", "name": "default", "location": "local"}
    assert steps["workspaces"]["names"] == ["default"]  # wsb exists, but alice has no role there
    cluster = steps["cluster"]
    assert cluster["state"].endswith("SUCCEEDED") or cluster["state"] == "Succeeded"
    assert (cluster["size"], cluster["max"], cluster["idle"], cluster["tier"]) == (
        "Standard_DS3_v2",
        2,
        180,
        "low_priority",
    )
    assert steps["cluster-update"]["max"] == 3
    assert steps["minimal"]["size"] == "Standard_DS3_v2"  # azure-ai-ml's default, accepted as is
    assert steps["catalogue"]["sizes"] > 10 and steps["catalogue"]["ds3"] == ["Standard_DS3_v2"]
    assert steps["catalogue"]["usage"], steps["catalogue"]
    retired = steps["retired"]
    assert retired["status"] == 400 and "RetiredVmSeries" in retired["message"]
    assert "retired" in retired["message"] and "choose a current series" in retired["message"]
    # begin_create_or_update(...).result() re-reads the instance: already Running.
    assert steps["instance"]["state"] == "Running", steps["instance"]
    assert len(steps["nodes"]["nodes"]) == 1
    assert (steps["stop"]["state"], steps["start"]["state"], steps["restart"]["state"]) == (
        "Stopped",
        "Running",
        "Running",
    )
    assert steps["list"]["names"] == ["ci-sdk", "cpu-cluster", "minimal"]
    assert steps["deleted"] == {"step": "deleted", "found": False, "status": 404}
    assert steps["list-after"]["names"] == []
    assert steps["other-workspace"]["status"] == 404  # its existence is not disclosed
    assert steps["other-computes"]["status"] == 404
    assert steps["reader-list"]["names"] == []
    assert steps["reader-create"]["status"] == 403 and "rita" in steps["reader-create"]["message"]


def test_cloud_metadata_points_the_sdk_here(srv: RunningServer) -> None:
    with tls(srv) as client:
        clouds = client.get("/metadata/endpoints").json()
    assert clouds[0]["resourceManager"] == srv.https_url + "/"
    # azure-ai-ml derives aml_resource_id from the portal: https://ml.azure.<portal's suffix>.
    assert clouds[0]["portal"].split(".", 2)[2] == "cloudlet"


def test_msi_token_is_a_jwt_for_the_requested_audience(api: httpx.Client, srv: RunningServer) -> None:
    key = new_user(api, srv, "jay", "Reader")
    body = msi_token(srv, key, "https://ml.azure.cloudlet/.default")
    claims = jwt.decode(body["access_token"], options={"verify_signature": False})
    assert claims["aud"] == "https://ml.azure.cloudlet" == body["resource"]
    assert claims["tid"] == srv.installation and claims["sub"] == "jay" and claims["oid"]
    assert abs(int(body["expires_on"]) - claims["exp"]) == 0 and claims["exp"] > time.time() + 3000
    # Both audiences the SDK asks for authenticate, as the key does (same principal, same roles).
    arm = msi_token(srv, key, srv.https_url + "/")["access_token"]
    for token in (body["access_token"], arm):
        with tls(srv, token) as client:
            assert client.get(arm_ws(srv)).status_code == 200
            refused = client.put(
                arm_ws(srv) + "/computes/nope", json={"properties": {"computeType": "AmlCompute"}}
            )
            assert refused.status_code == 403
            assert client.get(arm_ws(srv, "wsb")).status_code == 404
    # Azure Storage's audience is minted (azure-storage-blob asks for it) but not accepted here.
    storage = msi_token(srv, key, "https://storage.azure.com/")["access_token"]
    with tls(srv, storage) as client:
        assert reason_of(client.get(arm_ws(srv))) == "InvalidAudience"
    # So are Azure's public resource manager's (samples probe DefaultAzureCredential with it).
    public = msi_token(srv, key, "https://management.azure.com/.default")["access_token"]
    with tls(srv, public) as client:
        assert reason_of(client.get(arm_ws(srv))) == "InvalidAudience"
    # Any other audience is refused, with the ones on offer (issue 24, defect 5).
    with tls(srv) as client:
        for unknown in (
            "https://graph.microsoft.com/.default",
            "https://evil.example",
            "x",
            srv.https_url + "x",
        ):
            refused = client.get(
                "/msi/token", params={"resource": unknown}, headers={"X-IDENTITY-HEADER": key}
            )
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["code"] == "InvalidResource" and error["target"] == "resource"
            assert "https://ml.azure.cloudlet" in error["message"], error
    # A bad credential gets no token.
    with tls(srv) as client:
        bad = client.get("/msi/token", params={"resource": "x"}, headers={"X-IDENTITY-HEADER": "clk_nope"})
        assert reason_of(bad) == "UnknownKey"
        assert client.get("/msi/token", params={"resource": "x"}).status_code == 401


def test_wrongly_signed_expired_and_revoked_jwts_get_401(api: httpx.Client, srv: RunningServer) -> None:
    key = new_user(api, srv, "kim", "Contributor")
    token = msi_token(srv, key, srv.https_url)["access_token"]
    claims = jwt.decode(token, options={"verify_signature": False})
    forged = jwt.encode(claims, "not-the-installation-key-but-32-bytes-long", algorithm="HS256")
    unsigned = jwt.encode(claims, None, algorithm="none")
    for bad in (forged, unsigned, token[:-4] + "AAAA"):
        with tls(srv, bad) as client:
            assert reason_of(client.get(arm_ws(srv) + "/computes")) == "Malformed"

    # A JWT lives no longer than its key: minted from a key that ends in 2 s, it then expires.
    expires_on = datetime.now(UTC) + timedelta(seconds=2)
    brief = api.post(f"{PRINCIPALS}/kim/keys", json={"expires_on": expires_on.isoformat()}).json()
    short = msi_token(srv, brief["api_key"], srv.https_url)
    assert int(short["expires_on"]) <= expires_on.timestamp()
    with tls(srv, short["access_token"]) as client:
        assert client.get(arm_ws(srv) + "/computes").status_code == 200
        deadline = time.monotonic() + 15
        while (response := client.get(arm_ws(srv) + "/computes")).status_code == 200:
            assert time.monotonic() < deadline, "the JWT outlived its key"
            time.sleep(0.2)
        assert reason_of(response) == "TokenExpired"

    # Revoking the key ends the JWT minted from it.
    key_id = next(
        k["id"] for k in api.get(f"{PRINCIPALS}/kim/keys").json()["value"] if k["id"] != brief["id"]
    )
    with tls(srv, token) as client:
        assert client.get(arm_ws(srv)).status_code == 200
        assert api.delete(f"{PRINCIPALS}/kim/keys/{key_id}").status_code == 204
        deadline = time.monotonic() + 10
        while (response := client.get(arm_ws(srv))).status_code == 200:
            assert time.monotonic() < deadline, "the JWT outlived its revoked key"
            time.sleep(0.2)
        assert reason_of(response) == "KeyRevoked"


def test_arm_lists_page_with_next_link_and_errors_are_arm_bodies(
    api: httpx.Client, srv: RunningServer
) -> None:
    for name in ("page-a", "page-b", "page-c"):
        body = {"name": name, "type": "amlcompute", "size": "Standard_DS3_v2", "min_instances": 0}
        assert api.put(f"{srv.ws_path}/computes/{name}", json=body).status_code in (200, 201)
    with tls(srv, srv.api_key) as client:
        names, url = [], arm_ws(srv) + "/computes?api-version=2024-10-01&$top=2"
        pages = 0
        while url:
            page = client.get(url).json()
            names += [c["name"] for c in page["value"]]
            url, pages = page.get("nextLink"), pages + 1
            assert url is None or url.startswith(srv.https_url)
        assert pages == 2 and [n for n in names if n.startswith("page-")] == ["page-a", "page-b", "page-c"]
        missing = client.get(arm_ws(srv) + "/computes/nope").json()["error"]
        assert missing["code"] == "ResourceNotFound" and "nope" in missing["message"]
        bad = client.put(
            arm_ws(srv) + "/computes/bad-one",
            json={
                "properties": {
                    "computeType": "AmlCompute",
                    "properties": {"scaleSettings": {"maxNodeCount": 0}},
                }
            },
        )
        error = bad.json()["error"]
        assert (
            bad.status_code == 400 and error["target"] == "properties.properties.scaleSettings.maxNodeCount"
        )
        unknown = client.put(
            arm_ws(srv) + "/computes/bad-two", json={"properties": {"computeType": "Databricks"}}
        )
        assert unknown.json()["error"]["target"] == "properties.computeType"
        # PUT answers with the LRO header on the TLS listener; its status route says Succeeded.
        put = client.put(
            arm_ws(srv) + "/computes/page-a",
            json={
                "properties": {
                    "computeType": "AmlCompute",
                    "properties": {"scaleSettings": {"maxNodeCount": 5}},
                }
            },
        )
        assert put.status_code == 200 and put.headers["Retry-After"] == "1"
        status_url = put.headers["Azure-AsyncOperation"]
        assert status_url.startswith(
            srv.https_url + f"/subscriptions/{srv.subscription_id}/{PROVIDER}/locations/"
        )
        deadline = time.monotonic() + 20
        while (status := client.get(status_url).json())["status"] == "InProgress":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert status["status"] == "Succeeded"
        shown = client.get(arm_ws(srv) + "/computes/page-a").json()["properties"]
        assert shown["provisioningState"] == "Succeeded"
        assert shown["properties"]["scaleSettings"]["maxNodeCount"] == 5


# What azure-ai-ml does from a notebook (from_config, DefaultAzureCredential's managed-identity
# call, a compute list), with the instance's variables and files: the SDK itself is not installed
# in the instance's environment, so its steps are written out.
# What a user does first in a new notebook: `%pip install azure-ai-ml`, into the instance's own
# environment (uv when the node has it, as fast; else pip).
INSTALL_CODE = f"""
import shutil, subprocess, sys
uv = shutil.which("uv")
packages = ["azure-ai-ml=={SDK_VERSION}", "azure-identity"]
argv = ([uv, "pip", "install", "--quiet", "--python", sys.executable, *packages] if uv
        else [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *packages])
done = subprocess.run(argv, capture_output=True, text=True)
print(done.returncode, done.stderr[-2000:])
"""
# Then the notebook code as written for Azure ML, unchanged.
NOTEBOOK_CODE = """
import json, os
from azure.ai.ml import MLClient
from azure.identity import DefaultAzureCredential
ml_client = MLClient.from_config(credential=DefaultAzureCredential())
names = [c.name for c in ml_client.compute.list()]
print(json.dumps({"names": names, "workspace": ml_client.workspace_name,
                  "polling": os.environ["AZUREML_RUN_POLLING_INTERVAL_MAX"]}))
"""


def test_an_instance_runs_azure_ml_code_as_its_owner(api: httpx.Client, srv: RunningServer) -> None:
    """Every instance gets config.json (in the Jupyter folder) and the `cloudlet azureml env`
    variables with a credential of its owner, so notebook code reaches the facade as them: in a
    kernel through the proxy, `%pip install azure-ai-ml` (from PyPI, as on a fresh machine), then
    `MLClient.from_config(credential=DefaultAzureCredential()).compute.list()` as written."""
    olga = new_user(api, srv, "olga", "Contributor")
    with srv.client(olga) as as_olga:
        created = create_instance(as_olga, srv, "ci-olga")
        assert created["state"] == "Running", created
        try:
            with Kernel(srv, "ci-olga", key=olga) as kernel:
                installed = kernel.run(INSTALL_CODE, timeout=300)
                assert installed.startswith("0"), installed
                seen = json.loads(kernel.run(NOTEBOOK_CODE, timeout=120).strip().splitlines()[-1])
        finally:
            delete_instance(as_olga, srv, "ci-olga")
    assert "ci-olga" in seen["names"] and seen["workspace"] == "default"
    assert seen["polling"] == "2"
