"""The API's edge, as an attacker and a careless client meet it (issue 10: defects 1, 4, 5, 8).

Every path a request names stays in its own folder (traversal, absolute paths and planted links
are refused or stored as links, never followed); bad input is a 4xx naming the field, never a 500,
and unauthenticated requests get 401 before their body is looked at; every number that reaches
arithmetic is finite and bounded; the OpenAPI document describes what the server really does.
One real server for the module, spoken to over HTTP.
"""

from __future__ import annotations

import io
import os
import socket
import sqlite3
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.conftest import RunningServer
from tests.jobs_helpers import create_compute, error_of, served, submit, wait_job

CLUSTER = "edge-cluster"
SECRET = "the-admin-credential-must-stay-home"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "edge")


@pytest.fixture(scope="module")
def api(srv: RunningServer) -> Iterator[httpx.Client]:
    with srv.client() as client:
        create_compute(
            client,
            srv,
            CLUSTER,
            {
                "type": "amlcompute",
                "size": "Standard_DS3_v2",
                "max_instances": 1,
                "idle_time_before_scale_down": 60,
            },
        )
        yield client


@pytest.fixture(scope="module")
def finished_job(api: httpx.Client, srv: RunningServer) -> str:
    """A job that wrote a log, an output file and, in its output, links to the server's secrets."""
    body = {
        "command": (
            "echo hello; echo data > ${{outputs.model}}/weights.txt; "
            "ln -s $CLOUDLET_HOME/credentials ${{outputs.model}}/stolen; "
            "ln -s / ${{outputs.model}}/root"
        ),
        "compute": f"azureml:{CLUSTER}",
        "outputs": {"model": {"type": "uri_folder"}},
    }
    submit(api, srv, "edge-job", body)
    wait_job(api, srv, "edge-job", ("Completed",))
    return "edge-job"


def _tar(files: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            archive.addfile(info)
    return buffer.getvalue()


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return {m.name: m for m in archive.getmembers()}


# -- defect 1: paths ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "file",
    [
        "{home}/credentials",  # absolute: used to replace the job folder
        "/etc/shadow",
        "../../../../credentials",
        "user_logs/../../../../../credentials",
        "user_logs/%2e%2e/%2e%2e/credentials",
    ],
)
def test_job_logs_refuse_paths_out_of_the_job(
    api: httpx.Client, srv: RunningServer, finished_job: str, file: str
) -> None:
    response = api.get(f"{srv.ws_path}/jobs/{finished_job}/logs", params={"file": file.format(home=srv.home)})
    assert response.status_code in (400, 200), response.text
    assert "api_key" not in response.text and "root:" not in response.text
    if response.status_code == 200:  # a name that stays inside and names nothing: empty
        assert response.json()["data"] == ""
    else:
        assert error_of(response)["target"] == "file"


def test_job_logs_do_not_follow_a_link_planted_in_the_log_folder(
    api: httpx.Client, srv: RunningServer, finished_job: str
) -> None:
    ws_dir = next((srv.home / "data" / "workspaces").iterdir())
    attempt = ws_dir / "jobs" / finished_job / "attempt-1"
    (attempt / "user_logs" / "planted.txt").symlink_to(srv.home / "credentials")
    (attempt / "escape").symlink_to(srv.home)
    for file in ("user_logs/planted.txt", "escape/credentials"):
        body = api.get(f"{srv.ws_path}/jobs/{finished_job}/logs", params={"file": file}).json()
        assert body["data"] == "", file
    assert "hello" in api.get(f"{srv.ws_path}/jobs/{finished_job}/logs").json()["data"]  # control


def test_an_output_is_packed_without_following_the_links_the_job_wrote(
    api: httpx.Client, srv: RunningServer, finished_job: str
) -> None:
    response = api.get(f"{srv.ws_path}/jobs/{finished_job}/outputs/model")
    assert response.status_code == 200
    members = _members(response.content)
    assert members["weights.txt"].isfile()
    assert members["stolen"].issym() and members["stolen"].linkname.endswith("/credentials")
    assert members["root"].issym()
    assert not any(name.startswith(("root/", "stolen/")) for name in members)
    assert SECRET not in response.content.decode("latin-1")


def test_datastore_paths_stay_in_their_datastore(
    api: httpx.Client, srv: RunningServer, finished_job: str
) -> None:
    ds = f"{srv.ws_path}/datastores/workspaceblobstore"
    upload = api.put(f"{ds}/paths/mine/data", content=_tar({"a.txt": b"mine"}))
    assert upload.status_code == 201, upload.text
    assert api.get(f"{ds}/paths/mine/data/a.txt").json()["kind"] == "file"  # control
    # Traversal and absolute paths in the URL: the router normalises or they are refused.
    for path in ("../../../credentials", "mine/../../../../credentials", "%2Fetc%2Fshadow"):
        for route in ("paths", "download"):
            response = api.get(f"{ds}/{route}/{path}")
            assert response.status_code in (400, 404), (route, path, response.text)
    # Through the links a job wrote into its output: refused, never followed.
    out = f"azureml/{finished_job}/model"
    for route in ("paths", "download"):
        for path in (f"{out}/root/etc/passwd", f"{out}/stolen"):
            response = api.get(f"{ds}/{route}/{path}")
            assert response.status_code == 404, (route, path, response.text)
            assert "root:" not in response.text
    # Writing through a planted link is refused, and nothing lands outside.
    through = api.put(f"{ds}/paths/{out}/root/tmp/cloudlet-escape", content=_tar({"x": b"x"}))
    assert through.status_code == 409, through.text
    assert not Path("/tmp/cloudlet-escape").exists()
    # An archive whose members climb out, or link out, is refused.
    for archive in (_tar({"../../escape.txt": b"x"}), _tar({}, {"out": "/etc"})):
        response = api.put(f"{ds}/paths/mine/evil", content=archive)
        assert response.status_code == 400, response.text
        assert error_of(response)["code"] == "InvalidArchive"
    assert not list(srv.home.rglob("escape.txt"))


def test_code_snapshot_names_are_hashes(api: httpx.Client, srv: RunningServer) -> None:
    for digest in ("../../credentials", "x" * 64, "..%2F..%2Fcredentials"):
        response = api.get(f"{srv.ws_path}/codes/{digest}")
        assert response.status_code in (400, 404), response.text


def test_setup_logs_are_read_beneath_the_os_disk(tmp_path: Path) -> None:
    """The OS disk is the instance user's to write: a log replaced by a link is not followed."""
    from cloudlet.services.compute.instance_reports import setup_logs
    from cloudlet.services.compute.instances import os_disk_path
    from cloudlet.services.core.storage import DataRoot
    from cloudlet.store.schema import Compute

    data = DataRoot(tmp_path / "data")
    compute = Compute(
        id=7, workspace_id=1, name="ci", spec={"setup_scripts": {"startup_script": {"command": "x"}}}
    )
    disk = os_disk_path(data, compute)
    (disk / "logs").mkdir(parents=True)
    secret = tmp_path / "credentials"
    secret.write_text(SECRET)
    (disk / "logs" / "startup_script.log").symlink_to(secret)
    shown = setup_logs(data, compute, None)["scripts"]["startup"]["log_text"]
    assert SECRET not in shown
    (disk / "logs" / "startup_script.log").unlink()
    (disk / "logs" / "startup_script.log").write_text("ran fine\n")  # control
    assert setup_logs(data, compute, None)["scripts"]["startup"]["log_text"] == "ran fine\n"


# -- defect 5: 4xx, never 500; 401 before the body ------------------------------------------------
def test_requests_without_a_valid_credential_get_401_whatever_their_body(srv: RunningServer) -> None:
    job = {"command": "echo", "compute": f"azureml:{CLUSTER}"}
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("PUT", f"{srv.ws_path}/jobs/bogus-key-job", {"json": job}),
        (
            "PUT",
            f"{srv.ws_path}/jobs/bogus-key-job",
            {"content": b"{not json", "headers": {"Content-Type": "application/json"}},
        ),
        ("PUT", f"{srv.ws_path}/computes/x", {"json": [1]}),
        ("POST", "/agent/v1/runs/x/exit", {"json": [1]}),
        ("POST", "/agent/v1/nodes/n-x/poll?timeout=abc", {"json": {}}),
        (
            "POST",
            "/agent/v1/nodes/n-x/register",
            {"content": b"\xff\xfe", "headers": {"Content-Type": "application/json"}},
        ),
        ("POST", "/agent/v1/nodes/n-x/apps", {"json": "string"}),
        (
            "PUT",
            "/api/v1/locations/lab",
            {"content": b'{"capacity": {"vcpus": 1e999}}', "headers": {"Content-Type": "application/json"}},
        ),
    ]
    for key in ("clk_bogus", "clt_bogus.sig", "nonsense", None):
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with httpx.Client(base_url=srv.endpoint, headers=headers, timeout=10) as anonymous:
            for method, url, kwargs in cases:
                kw = dict(kwargs)
                kw["headers"] = {**kw.get("headers", {}), **headers}
                response = anonymous.request(method, url, **kw)
                assert response.status_code == 401, (key, method, url, response.status_code, response.text)
                assert error_of(response)["code"] == "AuthenticationFailed"


BAD_INPUTS: list[tuple[str, str, dict[str, Any], str | None]] = [
    # (method, path under the workspace or absolute, request kwargs, expected target)
    ("PUT", "/api/v1/locations/lab", {"json": {"capacity": {"vcpus": "lots"}}}, "capacity.vcpus"),
    ("PUT", "/api/v1/locations/lab", {"json": [1]}, "$"),
    ("PUT", "/api/v1/locations/lab", {"json": {"capacity": [1]}}, "capacity"),
    ("PUT", "/api/v1/locations/Not_A_Name", {"json": {}}, "name"),
    ("PUT", "{ws}/locks/l1", {"json": []}, "$"),
    ("PUT", "{ws}/locks/l1", {"json": {"level": 3}}, "level"),
    ("PUT", "{ws}/locks/l1", {"json": "CanNotDelete"}, "$"),
    ("PUT", "{ws}", {"json": ["x"]}, "$"),
    ("PUT", "{ws}", {"json": {"allow_ssh_public_access": "false"}}, "allow_ssh_public_access"),
    ("PUT", "{ws}", {"json": {"tags": "x"}}, "tags"),
    ("PUT", "/api/v1/subscriptions/{sub}/locations/local/quotas/standardDSv2Family", {"json": [5]}, "$"),
    (
        "PUT",
        "/api/v1/subscriptions/{sub}/locations/local/quotas/standardDSv2Family",
        {"json": {"limit": "5"}},
        "limit",
    ),
    (
        "PUT",
        "/api/v1/subscriptions/{sub}/locations/local/quotas/standardDSv2Family",
        {"json": {"limit": 2**70}},
        "limit",
    ),
    ("GET", "{ws}/jobs/edge-job/logs?offset=-1", {}, "offset"),
    ("GET", "{ws}/jobs/edge-job/logs?file=", {}, "file"),
    ("GET", "{ws}/jobs/edge-job/logs?attempt=-5", {}, "attempt"),
    ("GET", "{ws}/jobs/edge-job/logs?offset=abc", {}, "offset"),
    ("GET", "{ws}/jobs?$top=0", {}, "$top"),
    ("GET", "{ws}/jobs?$skipToken=garbage", {}, "$skipToken"),
    ("GET", "{ws}/jobs?status=Weird", {}, "status"),
    ("POST", "{ws}/computes/" + CLUSTER + "/evict", {"json": ["n-1"]}, "$"),
    ("POST", "{ws}/computes/" + CLUSTER + "/evict", {"json": "n-1"}, "$"),
    ("POST", "{ws}/computes/" + CLUSTER + "/evict", {"json": {"node_id": 5}}, "node_id"),
    ("POST", "/api/v1/sizes", {"json": {"name": "huge", "vcpus": 2**70, "memory_gb": 1}}, "vcpus"),
    ("POST", "/api/v1/sizes", {"json": {"name": "nan", "vcpus": 1, "memory_gb": "NaN"}}, "memory_gb"),
    (
        "PUT",
        "{ws}/computes/huge",
        {"json": {"type": "amlcompute", "size": "Standard_DS3_v2", "max_instances": 10**30}},
        "max_instances",
    ),
    (
        "PUT",
        "{ws}/computes/idle",
        {"json": {"type": "amlcompute", "size": "Standard_DS3_v2", "idle_time_before_scale_down": 10**30}},
        "idle_time_before_scale_down",
    ),
    ("PATCH", "{ws}/computes/" + CLUSTER, {"json": {"max_instances": 10**30}}, "max_instances"),
    (
        "PUT",
        "{ws}/jobs/bad-job",
        {"json": {"command": "echo", "compute": "azureml:x", "resources": {"instance_count": 10**30}}},
        "resources.instance_count",
    ),
    ("PUT", "{ws}/jobs/bad/name", {"json": {"command": "echo"}}, None),
    ("PUT", "{ws}/jobs/-dash-first", {"json": {"command": "echo"}}, "name"),
    ("POST", "{ws}/computes/" + CLUSTER + "/explode", {}, "action"),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "target"), BAD_INPUTS)
def test_bad_input_is_a_4xx_naming_the_field(
    api: httpx.Client,
    srv: RunningServer,
    finished_job: str,
    method: str,
    path: str,
    kwargs: dict[str, Any],
    target: str | None,
) -> None:
    url = path.format(ws=srv.ws_path, sub=srv.subscription_id)
    response = api.request(method, url, **kwargs)
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    if target is not None:
        assert response.status_code == 400, response.text
        assert error_of(response)["target"] == target, response.text
    # The same connection still serves the next request.
    assert api.get("/api/v1/whoami").status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b'{"capacity": {"vcpus": 1e999}}',
        b'{"capacity": {"vcpus": NaN}}',
        b'{"capacity": {"vcpus": Infinity}}',
        b'{"capacity": {"vcpus": ' + b"9" * 5000 + b"}}",
    ],
)
def test_numbers_that_are_not_finite_are_refused_at_the_edge(api: httpx.Client, raw: bytes) -> None:
    response = api.put("/api/v1/locations/lab", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    assert error_of(response)["code"] == "InvalidRequest"
    assert api.get("/api/v1/locations").status_code == 200


def test_agent_bodies_of_the_wrong_shape_are_400_for_an_authenticated_node(
    srv: RunningServer, api: httpx.Client
) -> None:
    from tests.jobs_helpers import _environ, agent_pids, nodes, wait_until

    api.patch(f"{srv.ws_path}/computes/{CLUSTER}", json={"min_instances": 1})
    try:
        node = wait_until(
            lambda: [n for n in nodes(api, srv, CLUSTER) if n["state"] in ("idle", "running")], 60, "a node"
        )[0]
        installation = httpx.get(srv.endpoint + "/healthz").json()["installation"]
        pid = wait_until(lambda: agent_pids(installation, node["nodeId"]), 30, "its agent")[0]
        token = _environ(pid)["CLOUDLET_NODE_TOKEN"]
        with httpx.Client(
            base_url=srv.endpoint, headers={"Authorization": f"Bearer {token}"}, timeout=10
        ) as agent:
            node_path = f"/agent/v1/nodes/{node['nodeId']}"
            assert agent.post(f"{node_path}/poll?timeout=abc", json={}).status_code == 400
            assert agent.post(f"{node_path}/poll?timeout=0", json=[1]).status_code == 400
            assert agent.post(f"{node_path}/poll?timeout=0", json={"runs": "x"}).status_code == 400
            assert agent.post("/agent/v1/runs/x/exit", json=[1]).status_code == 400
            assert agent.post("/agent/v1/runs/x/exit", json={}).status_code == 404  # control: unknown run
            assert agent.post(f"{node_path}/poll?timeout=0", json={}).status_code == 200
            # Another node's id with this node's token.
            assert agent.post("/agent/v1/nodes/n-other/poll?timeout=0", json={}).status_code == 401
    finally:
        api.patch(f"{srv.ws_path}/computes/{CLUSTER}", json={"min_instances": 0})


# -- defect 8: the OpenAPI document and 405 --------------------------------------------------------
def test_an_exit_whose_log_chunk_leaves_a_gap_is_still_recorded(
    srv: RunningServer, api: httpx.Client
) -> None:
    """A run's last log chunk rides on its exit report. One the server refuses (it would leave a
    gap) is dropped and the exit still counts, as the agent drops a refused chunk it posted alone."""
    from tests.jobs_helpers import _environ, agent_pids, log_text, wait_until

    submit(api, srv, "edge-gap", {"command": "echo started; sleep 8", "compute": f"azureml:{CLUSTER}"})
    wait_until(lambda: "started" in log_text(api, srv, "edge-gap"), 60, "the job's first line")
    with sqlite3.connect(f"file:{srv.home / 'cloudlet.db'}?mode=ro", uri=True) as db:
        run_id, node_id = db.execute(
            "SELECT r.id, r.node_id FROM job_runs r JOIN jobs j ON j.id = r.job_id WHERE j.name = 'edge-gap'"
        ).fetchone()
    installation = httpx.get(srv.endpoint + "/healthz").json()["installation"]
    pid = wait_until(lambda: agent_pids(installation, node_id), 30, "its agent")[0]
    token = _environ(pid)["CLOUDLET_NODE_TOKEN"]
    now = time.time()
    report = {"exit_code": 0, "started_at": now, "ended_at": now, "log": {"offset": 1 << 20, "data": "gap"}}
    answer = httpx.post(
        f"{srv.endpoint}/agent/v1/runs/{run_id}/exit",
        json=report,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    wait_job(api, srv, "edge-gap", ("Completed",), timeout=5)  # before the run itself ends
    text = log_text(api, srv, "edge-gap")
    assert "started" in text and "gap" not in text


def test_openapi_says_what_the_server_sends(srv: RunningServer) -> None:
    doc = httpx.get(srv.endpoint + "/openapi.json").json()
    operations = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]
    assert len(operations) > 40
    ids = [op["operationId"] for _, _, op in operations]
    assert len(ids) == len(set(ids)), "operation ids are unique"
    for path, method, op in operations:
        codes = set(op["responses"])
        assert "422" not in codes, (method, path)
        if path.startswith(("/api/", "/agent/")):
            assert {"400", "401", "404"} <= codes, (method, path, codes)
            assert op["responses"]["401"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }
        body = op.get("requestBody", {}).get("content", {}).get("application/json")
        if body is not None:  # a typed document, never "any JSON"
            schema = body["schema"]

            # An optional body (``… | None``) is anyOf the document and null: its document is typed.
            def typed(s: dict[str, Any]) -> bool:
                return "$ref" in s or "oneOf" in s or "properties" in s

            kinds = [s for s in schema.get("anyOf", []) if s.get("type") != "null"]
            assert typed(schema) or (kinds and all(typed(s) for s in kinds)), (method, path, schema)
    refs = [part for part in str(doc).split("'") if part.startswith("#/components/schemas/")]
    missing = {r for r in refs if r.rsplit("/", 1)[-1] not in doc["components"]["schemas"]}
    assert not missing, missing
    put_compute = doc["paths"][
        "/api/v1/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}/computes/{name}"
    ]["put"]
    assert "oneOf" in put_compute["requestBody"]["content"]["application/json"]["schema"]
    assert {"200", "201"} <= set(put_compute["responses"])


def test_405_names_every_allowed_method(api: httpx.Client, srv: RunningServer) -> None:
    # GET here; POST {name}/{action} also matches the path, but the path is the nodes route's
    # (issue 24: POST here was the action route's 400): only GET is named, and POST is a 405.
    response = api.delete(f"{srv.ws_path}/computes/{CLUSTER}/nodes")
    assert response.status_code == 405
    assert set(response.headers["Allow"].split(", ")) == {"GET"}
    response = api.post(f"{srv.ws_path}/computes/{CLUSTER}/nodes")
    assert response.status_code == 405, response.text
    assert response.headers["Allow"] == "GET"
    response = api.delete(f"{srv.ws_path}/jobs")
    assert response.status_code == 405, response.text
    response = api.post(f"{srv.ws_path}")
    assert response.status_code == 405
    assert set(response.headers["Allow"].split(", ")) == {"GET", "PUT"}
    assert error_of(response)["code"] == "MethodNotAllowed"


# -- paging --------------------------------------------------------------------------------------
def test_job_list_pages_follow_next_link_without_gaps(
    api: httpx.Client, srv: RunningServer, finished_job: str
) -> None:
    names = [f"page-{i}" for i in range(7)]
    for name in names:
        submit(api, srv, name, {"command": "true", "compute": f"azureml:{CLUSTER}"})
    seen: list[str] = []
    url: str | None = f"{srv.ws_path}/jobs?$top=3"
    pages = 0
    while url is not None:
        body = api.get(url).json()
        assert len(body["value"]) <= 3
        seen += [j["name"] for j in body["value"]]
        url = body.get("nextLink")
        pages += 1
    assert len(seen) == len(set(seen))
    assert set(names) | {finished_job} <= set(seen)
    assert pages >= 3
    everything = api.get(f"{srv.ws_path}/jobs").json()
    assert "nextLink" not in everything and [j["name"] for j in everything["value"]] == seen
    # The Python client follows nextLink (as Azure's ItemPaged does), or stops at a limit.
    from cloudlet.client._rest import RestClient

    with RestClient(srv.endpoint, srv.api_key) as rest:
        assert [j["name"] for j in rest.list_values(f"{srv.ws_path}/jobs", {"$top": 2})] == seen
        assert len(rest.list_values(f"{srv.ws_path}/jobs", {"$top": 2}, limit=3)) == 3


# -- after a 500 the connection is closed, so a kept-alive client's next request works -----------
def test_an_internal_error_closes_its_connection_and_the_next_request_works() -> None:
    from fastapi import FastAPI

    from cloudlet.api import errors

    app = FastAPI()

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    @app.get("/fine")
    def fine() -> dict[str, bool]:
        return {"ok": True}

    errors.install(app)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
            for _ in range(3):
                failed = client.get("/boom")
                assert failed.status_code == 500
                assert failed.headers["connection"] == "close"
                assert failed.json()["error"]["code"] == "InternalError"
                assert client.get("/fine").json() == {"ok": True}
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        os.environ.pop("CLOUDLET_NEVER_SET", None)
