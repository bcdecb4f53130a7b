"""Online endpoints end to end (issue 14): a real server, real replicas of the real
``azureml-inference-server-http`` running an Azure-style score.py over an sklearn model trained
here, and real HTTP through cloudlet's gateway.

The model is trained with the replicas' own interpreter (the inference environment that
``scripts/setup.sh`` makes): the control plane's environment has no scikit-learn, as a user's
laptop need not have the serving environment's packages.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from cloudlet.client import MLClient
from cloudlet.client._rest import HttpResponseError
from cloudlet.control.online_replicas import default_python
from tests.conftest import RunningServer
from tests.instance_helpers import new_user
from tests.jobs_helpers import served_for_inference, wait_until

SCORE = """
import json, os, time
import joblib

def init():
    global model
    if os.environ.get("FAIL_INIT"):
        raise RuntimeError("init failed on purpose: " + os.environ["FAIL_INIT"])
    # as on Azure: the deployment's model folder ("model") lies under AZUREML_MODEL_DIR
    model = joblib.load(os.path.join(os.environ["AZUREML_MODEL_DIR"], "model", "model.pkl"))

def run(raw_data):
    request = json.loads(raw_data)
    data = request["data"]
    if data == "peek":
        return {"sees": [p for p in request["paths"] if os.path.exists(p)], "uid": os.getuid()}
    if data == "workers":
        return {"worker_count": os.environ.get("WORKER_COUNT")}
    if data == "big":
        return "x" * (3 << 20)
    if data == "boom":
        raise ValueError("boom from run()")
    if data == "sleep":
        time.sleep(1.0)
        return {"slept": True}
    if data == "spin":
        start = time.monotonic()
        while time.monotonic() - start < 0.5:
            pass
        return {"spun": True}
    return {"pred": model.predict(data).tolist(), "who": os.environ.get("WHO")}
"""
TRAIN = """
import sys, joblib
from sklearn.linear_model import LogisticRegression
X = [[0, 0], [0, 1], [1, 0], [1, 1], [5, 5], [5, 6], [6, 5], [6, 6]]
y = [0, 0, 0, 0, 1, 1, 1, 1]
joblib.dump(LogisticRegression().fit(X, y), sys.argv[1])
"""
ROWS = {"data": [[0, 0], [6, 6]]}
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from served_for_inference(tmp_path_factory, "online")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = Path(tmp_path_factory.mktemp("online-project"))
    (root / "model").mkdir()
    subprocess.run([default_python(), "-c", TRAIN, str(root / "model" / "model.pkl")], check=True)
    (root / "src").mkdir()
    (root / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    return root


@pytest.fixture(scope="module")
def ml(srv: RunningServer) -> Iterator[MLClient]:
    with MLClient(home=srv.home) as client:
        yield client


def deployment(name: str, who: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "endpoint_name": "ep1",
        "model": {"path": "model"},
        "code_configuration": {"code": "src", "scoring_script": "score.py"},
        "environment": "sklearn-inference",
        "instance_type": "Standard_DS3_v2",
        "instance_count": 1,
        "environment_variables": {"WHO": who, **extra.pop("env", {})},
        # a loaded 2-core machine takes a while to import sklearn and run init()
        "readiness_probe": {"initial_delay": 1, "period": 1, "failure_threshold": 90},
        **extra,
    }


def deploy(ml: MLClient, project: Path, doc: dict[str, Any]) -> dict[str, Any]:
    created = ml.online_deployments.create_or_update(doc, base_path=project)
    return ml.online_deployments.wait("ep1", doc["name"], generation=created["generation"])


def score(url: str, key: str, pin: str | None = None, body: Any = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    if pin:
        headers["azureml-model-deployment"] = pin
    return httpx.post(url, json=ROWS if body is None else body, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def blue(ml: MLClient, project: Path) -> dict[str, Any]:
    ml.online_endpoints.create_or_update({"name": "ep1", "auth_mode": "key"})
    shown = deploy(ml, project, deployment("blue", "blue"))
    assert shown["provisioning_state"] == "Succeeded", (shown["reason"], shown)
    return ml.online_endpoints.update_traffic("ep1", {"blue": 100})


def test_blue_answers_through_the_gateway(ml: MLClient, blue: dict[str, Any]) -> None:
    answer = ml.online_endpoints.invoke("ep1", ROWS)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"pred": [0, 1], "who": "blue"}
    assert answer.headers["azureml-model-deployment"] == "blue"
    shown = ml.online_deployments.get("ep1", "blue")
    assert shown["ready_replicas"] == 1 and shown["metrics"]["requests"] >= 1
    assert shown["readiness_probe"]["timeout"] == 2  # Azure's default filled in
    assert "Users's init has completed successfully" in ml.online_deployments.get_logs("ep1", "blue")
    # azmlinfsrv's default of one gunicorn worker per replica
    assert ml.online_endpoints.invoke("ep1", {"data": "workers"}).json() == {"worker_count": "1"}


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing: replicas run unsandboxed")
def test_payloads_are_bounded_as_on_azure_and_answers_stream(ml: MLClient, blue: dict[str, Any]) -> None:
    """Azure's 1.5 MB limit on a scoring request (413, nothing forwarded); an answer larger than
    that still arrives whole, streamed (issue 24, defect 4)."""
    url, key = blue["scoring_uri"], ml.online_endpoints.get_keys("ep1")["primaryKey"]
    too_big = score(url, key, body={"data": "y" * 1_600_000})
    assert too_big.status_code == 413, too_big.text
    assert too_big.json()["error"]["code"] == "PayloadTooLarge" and "1.5 MiB" in too_big.text
    big = score(url, key, body={"data": "big"})
    assert big.status_code == 200 and len(big.json()) == 3 << 20
    assert score(url, key).json()["pred"] == [0, 1]  # control


def test_the_replica_is_sandboxed_like_jobs(srv: RunningServer, ml: MLClient, blue: dict[str, Any]) -> None:
    key = ml.online_endpoints.get_keys("ep1")["primaryKey"]
    secrets = [str(srv.home / "credentials"), str(srv.home / "cloudlet.db"), str(srv.home / "config.json")]
    answer = score(blue["scoring_uri"], key, pin="blue", body={"data": "peek", "paths": secrets})
    assert answer.status_code == 200, answer.text
    assert answer.json()["sees"] == []
    assert answer.json()["uid"] != 0


def _replica_pids(port: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"azureml_inference_server_http" in argv and str(port).encode() in argv:
            pids.append(int(entry.name))
    return pids


def test_a_dead_replica_is_restarted(ml: MLClient, blue: dict[str, Any]) -> None:
    shown = ml.online_deployments.get("ep1", "blue")
    port = shown["replicas"][0]["port"]
    pids = _replica_pids(port)
    assert pids, "the replica's processes were not found"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # the sandbox's end may have taken it
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        shown = ml.online_deployments.get("ep1", "blue")
        if shown["restarts"] >= 1 and shown["ready_replicas"] == 1:
            break
        assert time.monotonic() < deadline, shown
        time.sleep(0.2)
    assert shown["replicas"][0]["port"] != port
    answer = ml.online_endpoints.invoke("ep1", ROWS, deployment_name="blue")
    assert answer.status_code == 200 and answer.json()["who"] == "blue"


def test_keys_wrong_key_and_regenerate(ml: MLClient, blue: dict[str, Any]) -> None:
    url = blue["scoring_uri"]
    assert score(url, "not-the-key").status_code == 401
    old = ml.online_endpoints.get_keys("ep1")
    assert score(url, old["secondaryKey"]).status_code == 200
    ml.online_endpoints.regenerate_keys("ep1", "Primary")
    new = ml.online_endpoints.get_keys("ep1")
    assert new["primaryKey"] != old["primaryKey"] and new["secondaryKey"] == old["secondaryKey"]
    refused = score(url, old["primaryKey"])
    assert refused.status_code == 401 and "get-credentials" in refused.text
    assert score(url, new["primaryKey"]).status_code == 200


def test_reader_cannot_update(srv: RunningServer, blue: dict[str, Any]) -> None:
    with srv.client() as api:
        key = new_user(api, srv, "online-reader", "Reader")
    with httpx.Client(base_url=srv.endpoint, headers={"Authorization": f"Bearer {key}"}) as reader:
        path = f"{srv.ws_path}/onlineEndpoints/ep1"
        assert reader.get(path).status_code == 200
        assert reader.put(path, json={"traffic": {"blue": 0}}).status_code == 403
        assert reader.post(path + "/listKeys").status_code == 403


def test_green_at_zero_then_half_and_pinned(ml: MLClient, project: Path, blue: dict[str, Any]) -> None:
    key = ml.online_endpoints.get_keys("ep1")["primaryKey"]
    url = blue["scoring_uri"]
    shown = deploy(ml, project, deployment("green", "green"))
    assert shown["provisioning_state"] == "Succeeded", (shown["reason"], shown)
    seen = {score(url, key).json()["who"] for _ in range(20)}
    assert seen == {"blue"}  # green at 0 %
    pinned = score(url, key, pin="green")
    assert pinned.status_code == 200 and pinned.json()["who"] == "green"
    ml.online_endpoints.update_traffic("ep1", {"blue": 50, "green": 50})
    seen = {score(url, key).json()["who"] for _ in range(40)}
    assert seen == {"blue", "green"}
    assert score(url, key, pin="nobody").status_code == 404
    with pytest.raises(HttpResponseError) as refused:
        ml.online_deployments.delete("ep1", "green")  # it takes traffic
    assert refused.value.status_code == 409


def test_mirrored_copies_reach_green_not_the_caller(ml: MLClient, blue: dict[str, Any]) -> None:
    key = ml.online_endpoints.get_keys("ep1")["primaryKey"]
    ml.online_endpoints.update_traffic("ep1", {"blue": 100, "green": 0}, {"green": 50})
    before = ml.online_deployments.get("ep1", "green")["metrics"]["requests"]
    answers = [score(blue["scoring_uri"], key) for _ in range(30)]
    assert {a.status_code for a in answers} == {200}
    assert {a.json()["who"] for a in answers} == {"blue"}  # the copy's answer is dropped
    deadline = time.monotonic() + 10
    while ml.online_deployments.get("ep1", "green")["metrics"]["requests"] == before:
        assert time.monotonic() < deadline, "no mirrored request reached green"
        time.sleep(0.1)
    assert "POST /score 200" in ml.online_deployments.get_logs("ep1", "green")
    ml.online_endpoints.update_traffic("ep1", {"blue": 100, "green": 0}, {})


def test_timeout_408_and_overload_429(ml: MLClient, project: Path, blue: dict[str, Any]) -> None:
    key = ml.online_endpoints.get_keys("ep1")["primaryKey"]
    settings = {"request_timeout_ms": 400, "max_concurrent_requests_per_instance": 1}
    shown = deploy(ml, project, deployment("slow", "slow", request_settings=settings))
    assert shown["provisioning_state"] == "Succeeded", (shown["reason"], shown)
    url = blue["scoring_uri"]
    late = score(url, key, pin="slow", body={"data": "sleep"})
    assert late.status_code == 408 and "request_timeout_ms (400 ms)" in late.text
    # 2 × 1 × 1 replica may be in flight: of 6 at once, some are refused with 429.
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: score(url, key, pin="slow", body={"data": "sleep"}), range(6)))
    codes = [a.status_code for a in answers]
    assert 429 in codes and codes.count(429) <= 4, codes
    refused = next(a for a in answers if a.status_code == 429)
    assert "max_concurrent_requests_per_instance=1" in refused.text


def test_model_error_is_424(ml: MLClient, blue: dict[str, Any]) -> None:
    key = ml.online_endpoints.get_keys("ep1")["primaryKey"]
    answer = score(blue["scoring_uri"], key, pin="blue", body={"data": "boom"})
    assert answer.status_code == 424, answer.text
    assert answer.headers["ms-azureml-model-error-statuscode"] == "500"
    assert "unexpected error occurred in scoring script" in answer.text  # the server's own words
    # The traceback, once the replica's process has written it (its log is its own file).
    wait_until(
        lambda: "boom from run()" in ml.online_deployments.get_logs("ep1", "blue"),
        30,
        "the traceback in the log",
    )


def test_init_failure_keeps_the_old_generation_and_says_why(
    ml: MLClient, project: Path, blue: dict[str, Any]
) -> None:
    key = ml.online_endpoints.get_keys("ep1")["primaryKey"]
    url = blue["scoring_uri"]
    # An update of blue whose init() fails: the serving generation stays.
    failed = deploy(ml, project, deployment("blue", "blue-v2", env={"FAIL_INIT": "bad weights"}))
    assert failed["provisioning_state"] == "Failed" and failed["stage"] == "server_start"
    assert "init failed on purpose: bad weights" in failed["reason"]
    answer = score(url, key, pin="blue")
    assert answer.status_code == 200 and answer.json()["who"] == "blue"
    # A new deployment whose init() fails has no ready replica: 503 with the reason.
    broken = deploy(ml, project, deployment("broken", "broken", env={"FAIL_INIT": "no model"}))
    assert broken["provisioning_state"] == "Failed"
    refused = score(url, key, pin="broken")
    assert refused.status_code == 503 and "init failed on purpose: no model" in refused.text


def test_endpoint_delete_stops_its_replicas(ml: MLClient, project: Path) -> None:
    ml.online_endpoints.create_or_update({"name": "ep-gone", "auth_mode": "aml_token"})
    doc = {**deployment("only", "only"), "endpoint_name": "ep-gone"}
    created = ml.online_deployments.create_or_update(doc, base_path=project)
    shown = ml.online_deployments.wait("ep-gone", "only", generation=created["generation"])
    assert shown["provisioning_state"] == "Succeeded", (shown["reason"], shown)
    endpoint = ml.online_endpoints.update_traffic("ep-gone", {"only": 100})
    token = ml.online_endpoints.get_keys("ep-gone")["accessToken"]
    assert score(endpoint["scoring_uri"], token).status_code == 200
    port = shown["replicas"][0]["port"]
    ml.online_endpoints.delete("ep-gone")
    assert score(endpoint["scoring_uri"], token).status_code == 404
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
        except httpx.TransportError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the replica still answers after its endpoint was deleted")


def cli(srv: RunningServer, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cloudlet", *args]
    done = subprocess.run(argv, env=srv.cli_env(), cwd=cwd, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr + done.stdout
    return done


def test_the_cli_creates_a_local_deployment_and_invokes_it(srv: RunningServer, project: Path) -> None:
    (project / "endpoint.yml").write_text("name: ep-cli\nauth_mode: key\n")
    (project / "local.yml").write_text(
        textwrap.dedent(
            """\
            $schema: https://azuremlschemas.azureedge.net/latest/managedOnlineDeployment.schema.json
            name: dev
            endpoint_name: ep-cli
            model:
              path: model
            code_configuration:
              code: src
              scoring_script: score.py
            environment: sklearn-inference
            instance_type: Standard_DS3_v2
            instance_count: 1
            environment_variables: {WHO: local, WORKER_COUNT: "2"}
            readiness_probe: {initial_delay: 1, period: 1}
            """
        )
    )
    (project / "request.json").write_text(json.dumps(ROWS))
    cli(srv, "online-endpoint", "create", "--file", str(project / "endpoint.yml"))
    shown = json.loads(
        cli(
            srv, "online-deployment", "create", "--file", "local.yml", "--local", "--all-traffic", cwd=project
        ).stdout
    )
    assert shown["local"] is True and shown["provisioning_state"] == "Succeeded"
    answer = cli(
        srv, "online-endpoint", "invoke", "-n", "ep-cli", "--request-file", str(project / "request.json")
    )
    assert json.loads(answer.stdout) == {"pred": [0, 1], "who": "local"}
    # a deployment's environment_variables may raise WORKER_COUNT, as on Azure
    (project / "workers.json").write_text(json.dumps({"data": "workers"}))
    answer = cli(
        srv, "online-endpoint", "invoke", "-n", "ep-cli", "--request-file", str(project / "workers.json")
    )
    assert json.loads(answer.stdout) == {"worker_count": "2"}
    endpoint = json.loads(cli(srv, "online-endpoint", "show", "-n", "ep-cli").stdout)
    assert endpoint["traffic"] == {"dev": 100}
    assert "POST /score 200" in cli(srv, "online-deployment", "get-logs", "-n", "dev", "-e", "ep-cli").stdout
    keys = json.loads(cli(srv, "online-endpoint", "get-credentials", "-n", "ep-cli").stdout)
    assert set(keys) == {"primaryKey", "secondaryKey"}
    cli(srv, "online-endpoint", "update", "-n", "ep-cli", "--traffic", "dev=0")
    cli(srv, "online-deployment", "delete", "-n", "dev", "-e", "ep-cli", "--yes")
    cli(srv, "online-endpoint", "delete", "-n", "ep-cli", "--yes")


def test_replicas_count_against_the_core_quota(
    srv: RunningServer, ml: MLClient, blue: dict[str, Any]
) -> None:
    family = "standardDSv2Family"
    base = f"/api/v1/subscriptions/{srv.subscription_id}/locations/local"
    with srv.client() as api:
        usage = {u["name"]: u for u in api.get(f"{base}/usages").json()["value"]}
        used = usage[family]["current_value"]
        assert used >= 4  # blue's one Standard_DS3_v2 replica
        assert api.put(f"{base}/quotas/{family}", json={"limit": used + 4}).status_code == 200
        try:
            path = f"{srv.ws_path}/onlineEndpoints/ep1/deployments/big"
            shown = ml.online_deployments.get("ep1", "blue")
            body = {**deployment("big", "big"), "instance_count": 2, "model": shown["model"]}
            body["code_configuration"] = shown["code_configuration"]
            refused = api.put(path, json=body)
            assert refused.status_code in (400, 409), refused.text
            assert family in refused.text and "online deployment ep1/blue" in refused.text, refused.text
            assert api.put(path + "?local=true", json=body).status_code == 201  # a local one holds none
            assert api.delete(path).status_code == 204
        finally:
            assert api.put(f"{base}/quotas/{family}", json={"limit": 100}).status_code == 200


def test_a_restarted_server_starts_the_replicas_again(
    server_factory: Callable[..., RunningServer], project: Path
) -> None:
    first = server_factory()
    with MLClient(home=first.home) as ml:
        ml.online_endpoints.create_or_update({"name": "ep-again", "auth_mode": "key"})
        doc = {**deployment("blue", "again"), "endpoint_name": "ep-again"}
        created = ml.online_deployments.create_or_update(doc, base_path=project)
        assert (
            ml.online_deployments.wait("ep-again", "blue", generation=created["generation"])[
                "provisioning_state"
            ]
            == "Succeeded"
        )
        ml.online_endpoints.update_traffic("ep-again", {"blue": 100})
        key = ml.online_endpoints.get_keys("ep-again")["primaryKey"]
    first.kill()  # its replicas end with it (they die with their parent)
    second = server_factory(home=first.home)
    with MLClient(home=second.home) as ml:
        url = ml.online_endpoints.get("ep-again")["scoring_uri"]
    deadline = time.monotonic() + 180  # a new node, its agent, the server's init() (loaded machine)
    while (answer := score(url, key)).status_code != 200:
        assert answer.status_code == 503 and time.monotonic() < deadline, answer.text
        time.sleep(0.2)
    assert answer.json()["who"] == "again"


def test_moving_traffic_and_deleting_blue_under_load_fails_no_request(
    ml: MLClient, project: Path, blue: dict[str, Any]
) -> None:
    if "green" not in {d["name"] for d in ml.online_deployments.list("ep1")}:
        deploy(ml, project, deployment("green", "green"))
    key = ml.online_endpoints.get_keys("ep1")["primaryKey"]
    url = blue["scoring_uri"]
    ml.online_endpoints.update_traffic("ep1", {"blue": 100, "green": 0}, {})
    stop = threading.Event()
    codes: list[int] = []
    who: set[str] = set()

    def load() -> None:
        with httpx.Client(timeout=30, headers={"Authorization": f"Bearer {key}"}) as http:
            while not stop.is_set():
                answer = http.post(url, json=ROWS)
                codes.append(answer.status_code)
                if answer.status_code == 200:
                    who.add(answer.json()["who"])

    threads = [threading.Thread(target=load) for _ in range(2)]  # 2 × 1 × 1 replica: no 429
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 10
        while len(codes) < 20:
            assert time.monotonic() < deadline, codes
            time.sleep(0.05)
        ml.online_endpoints.update_traffic("ep1", {"blue": 0, "green": 100})
        ml.online_deployments.delete("ep1", "blue")
        seen = len(codes)
        while len(codes) < seen + 20:
            assert time.monotonic() < deadline + 20, codes
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert set(codes) == {200}, [c for c in codes if c != 200]
    assert who == {"blue", "green"}
