"""Online endpoints under ``cloudlet server --workers 2`` (``control/online_shared.py``), with real
replicas of the real ``azureml-inference-server-http`` and real HTTP to each worker:

- a managed deployment's replicas run on nodes made for them (by worker 0), and a deployment on
  a compute instance works: the agents' reports may reach either worker;
- ``show`` counts the requests sent through either worker;
- worker 0 runs the replicas, once (not one set per worker); the other worker's gateway serves
  invoke from the view worker 0 publishes;
- what is asked through the other worker (create, deploy, traffic, regenerate keys, delete) is
  carried out by worker 0, and every worker's gateway follows: the right deployment answers, the
  old key is refused, a deleted endpoint is 404 and its replicas are gone.

Connections are spread by the kernel (SO_REUSEPORT); a client is pinned to a worker by opening
connections until one reaches it (``/healthz`` names the replica that answered).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from cloudlet.client import MLClient
from cloudlet.control.online_serving import leftover_replicas
from tests.conftest import RunningServer
from tests.instance_helpers import create_instance
from tests.jobs_helpers import require_inference_environment, wait_until

pytestmark = pytest.mark.timeout(400)
SCORE = """
import json, os, time
def init():
    pass
def run(raw):
    got = json.loads(raw)
    if got.get("data") == "sleep":
        time.sleep(1.5)
    return {"who": os.environ.get("WHO"), "got": got}
"""
BODY = {"data": [1, 2]}


def _replica_ports(installation: str) -> set[str]:
    """The ports of the inference servers running for INSTALLATION: one per replica (each is a few
    processes: the sandbox, gunicorn's arbiter and its worker)."""
    ports = set()
    for pid in leftover_replicas(installation):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ports |= {v.decode().partition("=")[2] for v in environ if v.startswith(b"SERVER_PORT=")}
    return ports


def _replica_of(http: httpx.Client) -> str:
    return str(http.get("/healthz").json()["replica"])


def _client_on(srv: RunningServer, replica: str) -> httpx.Client:
    """A keep-alive client whose connection is held by REPLICA's worker."""
    for _ in range(300):
        client = httpx.Client(base_url=srv.endpoint, timeout=30, trust_env=False)
        if _replica_of(client) == replica:
            return client
        client.close()
    raise AssertionError(f"no connection reached {replica}")


def _ml_on(srv: RunningServer, replica: str) -> MLClient:
    for _ in range(300):
        ml = MLClient(home=srv.home)
        if _replica_of(ml._rest._http) == replica:
            return ml
        ml.close()
    raise AssertionError(f"no client connection reached {replica}")


def _each_worker_answers(
    srv: RunningServer,
    replicas: list[str],
    uri: str,
    key: str,
    check: Callable[[httpx.Response], bool],
    what: str,
) -> None:
    """Every worker's gateway answers a request to URI with KEY as CHECK wants (within a deadline:
    a worker's view follows the owner's within a wake-up)."""
    path = urlsplit(uri).path
    for replica in replicas:
        http = _client_on(srv, replica)
        try:

            def answered(http: httpx.Client = http, replica: str = replica) -> httpx.Response | None:
                assert _replica_of(http) == replica  # still the same worker's connection
                response = http.post(path, json=BODY, headers={"Authorization": f"Bearer {key}"})
                return response if check(response) else None

            wait_until(answered, 30, f"{what} through {replica}", interval=0.1)
        finally:
            http.close()


def _the_429_bound_counts_every_workers_requests(
    srv: RunningServer, owner: str, follower: str, uri: str, key: str
) -> None:
    """green: 1 replica at max_concurrent_requests_per_instance 1, so 2 may be in flight. Two held
    through the owner's gateway fill the bound: the follower's gateway refuses the third with 429
    (each worker counting only its own let it through), and takes it again once they are done."""
    path, auth = urlsplit(uri).path, {"Authorization": f"Bearer {key}"}
    held = [_client_on(srv, owner) for _ in range(2)]
    other = _client_on(srv, follower)
    with _ml_on(srv, owner) as ml, ThreadPoolExecutor(2) as pool:
        sleeping = [pool.submit(http.post, path, json={"data": "sleep"}, headers=auth) for http in held]

        def both_in_flight() -> bool:
            return bool(ml.online_deployments.get("ep-w", "green")["metrics"]["in_flight"] == 2)

        wait_until(both_in_flight, 10, "two requests in flight through the owner", interval=0.05)
        refused = other.post(path, json=BODY, headers=auth)
        assert refused.status_code == 429, refused.text
        assert "2 requests in flight" in refused.text, refused.text
        assert [f.result().status_code for f in sleeping] == [200, 200]
        assert other.post(path, json=BODY, headers=auth).status_code == 200
    for http in [*held, other]:
        http.close()


def _show_counts_requests_through_either_worker(
    srv: RunningServer, replicas: list[str], uri: str, key: str
) -> None:
    """green, still at 0 % traffic, is sent 3 pinned requests through each worker: ``show``
    through either worker counts all 6 (the deployment's metrics, stored, not one worker's)."""
    path = urlsplit(uri).path
    headers = {"Authorization": f"Bearer {key}", "azureml-model-deployment": "green"}
    for replica in replicas:
        http = _client_on(srv, replica)
        try:
            for _ in range(3):
                assert http.post(path, json=BODY, headers=headers).status_code == 200
        finally:
            http.close()
    for replica in replicas:
        with _ml_on(srv, replica) as ml:

            def counted(ml: MLClient = ml) -> bool:
                return bool(ml.online_deployments.get("ep-w", "green")["metrics"]["requests"] == 6)

            wait_until(counted, 10, f"show through {replica} counting both workers' requests", interval=0.1)


def _a_deployment_on_an_instance_serves_through_either_worker(
    srv: RunningServer, replicas: list[str], base: Path, doc: dict[str, Any], uri: str, key: str
) -> None:
    """A replica on a compute instance is driven by worker 0's board of what each agent runs; the
    agent's reports may reach either worker (the other answers from the board worker 0 publishes):
    deployed through worker 1, it serves pinned requests through both, and its deletion stops it."""
    with srv.client() as api:
        create_instance(api, srv, "ci-w")
    with _ml_on(srv, replicas[1]) as ml:
        created = ml.online_deployments.create_or_update({**doc, "compute": "azureml:ci-w"}, base_path=base)
        shown = ml.online_deployments.wait("ep-w", doc["name"], generation=created["generation"])
        assert shown["provisioning_state"] == "Succeeded", shown
        assert shown["compute"] == "ci-w", shown
    with _ml_on(srv, replicas[0]) as ml:  # the owner knows the node (the other worker's view: addresses)
        assert ml.online_deployments.get("ep-w", doc["name"])["replicas"][0]["node"], "on the instance"
    path = urlsplit(uri).path
    headers = {"Authorization": f"Bearer {key}", "azureml-model-deployment": doc["name"]}
    for replica in replicas:
        http = _client_on(srv, replica)
        try:
            answer = http.post(path, json=BODY, headers=headers)
            assert answer.status_code == 200 and answer.json()["who"] == doc["name"], answer.text
        finally:
            http.close()
    with _ml_on(srv, replicas[0]) as ml:
        ml.online_deployments.delete("ep-w", doc["name"])
    wait_until(lambda: len(_replica_ports(srv.installation)) == 1, 60, "the instance's replica stopped")


def test_every_worker_serves_invoke_of_replicas_run_once(
    server_factory: Callable[..., RunningServer], tmp_path: Path
) -> None:
    require_inference_environment()
    # a busy machine; the compute instance needs only its machine (no JupyterLab)
    srv = server_factory(extra_env={"CLOUDLET_WORKERS": "2", "CLOUDLET_INSTANCE_APPS": ""}, timeout=240)
    seen: set[str] = set()

    def both() -> bool:
        with httpx.Client(base_url=srv.endpoint, timeout=10, trust_env=False) as http:
            seen.add(_replica_of(http))
        return len(seen) == 2

    wait_until(both, 60, "both workers answering")
    owner, follower = sorted(seen)  # <replica>-0 runs the replicas
    assert owner.endswith("-0") and follower.endswith("-1"), seen
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "none.txt").write_text("-")

    def doc(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "endpoint_name": "ep-w",
            "model": {"path": "model"},
            "code_configuration": {"code": "src", "scoring_script": "score.py"},
            "instance_type": "Standard_DS3_v2",
            "instance_count": 1,
            "environment_variables": {"WHO": name},
            "readiness_probe": {"initial_delay": 1, "period": 1, "failure_threshold": 60},
            # held requests wait at the replica's one sync worker behind each other
            "request_settings": {"request_timeout_ms": 15000},
        }

    def who(name: str) -> Callable[[httpx.Response], bool]:
        return lambda r: r.status_code == 200 and r.json() == {"who": name, "got": BODY}

    # Created, deployed and given traffic through the follower: the owner runs the replica.
    with _ml_on(srv, follower) as ml:
        ml.online_endpoints.create_or_update({"name": "ep-w", "auth_mode": "key"})
        created = ml.online_deployments.create_or_update(doc("blue"), base_path=tmp_path)
        shown = ml.online_deployments.wait("ep-w", "blue", generation=created["generation"])
        assert shown["provisioning_state"] == "Succeeded", shown
        # a managed deployment's replica runs on a node made for it, as with one server process
        assert [r["node"] for r in shown["replicas"]] == [n["nodeId"] for n in shown["nodes"]], shown
        endpoint = ml.online_endpoints.update_traffic("ep-w", {"blue": 100})
        keys = ml.online_endpoints.get_keys("ep-w")
    uri, old_key = endpoint["scoring_uri"], keys["primaryKey"]
    _a_deployment_on_an_instance_serves_through_either_worker(
        srv, [owner, follower], tmp_path, doc("oninst"), uri, old_key
    )
    _each_worker_answers(srv, [owner, follower], uri, old_key, who("blue"), "blue")
    assert len(_replica_ports(srv.installation)) == 1, "one replica, not one per worker"

    # Green through the owner, the traffic moved through the follower: both gateways follow.
    with _ml_on(srv, owner) as ml:
        created = ml.online_deployments.create_or_update(doc("green"), base_path=tmp_path)
        shown = ml.online_deployments.wait("ep-w", "green", generation=created["generation"])
        assert shown["provisioning_state"] == "Succeeded", shown
    _show_counts_requests_through_either_worker(srv, [owner, follower], uri, old_key)
    with _ml_on(srv, follower) as ml:
        ml.online_endpoints.update_traffic("ep-w", {"blue": 0, "green": 100})
        ml.online_endpoints.regenerate_keys("ep-w", key_type="Primary")
        new_key = ml.online_endpoints.get_keys("ep-w")["primaryKey"]
    assert new_key != old_key
    _each_worker_answers(srv, [owner, follower], uri, new_key, who("green"), "green with the new key")
    _each_worker_answers(
        srv, [owner, follower], uri, old_key, lambda r: r.status_code == 401, "the old key refused"
    )
    assert len(_replica_ports(srv.installation)) == 2
    _the_429_bound_counts_every_workers_requests(srv, owner, follower, uri, new_key)

    # Deleted through the follower: 404 from every worker, and the owner's replicas are gone.
    with _ml_on(srv, follower) as ml:
        ml.online_endpoints.delete("ep-w")
    _each_worker_answers(
        srv, [owner, follower], uri, new_key, lambda r: r.status_code == 404, "404 once deleted"
    )
    wait_until(lambda: not leftover_replicas(srv.installation), 60, "the replicas stopped")
