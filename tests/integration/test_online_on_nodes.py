"""Where online deployments' replicas run (issue 14): a managed deployment's replicas are nodes
made for it (one per instance, through the provider and the node's agent), a deployment with
``compute`` runs on that compute instance's node, a ``--local`` one is a process of the server's
machine; all three answer the same request the same way through the same gateway.

Real server, real agents (the local provider), the real ``azureml-inference-server-http``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cloudlet.client import MLClient
from cloudlet.client._rest import HttpResponseError
from cloudlet.control.online_replicas import default_python
from tests.conftest import RunningServer
from tests.instance_helpers import create_instance, live_nodes
from tests.integration.test_online_endpoints import ROWS, SCORE, TRAIN, deployment
from tests.jobs_helpers import served

pytestmark = pytest.mark.timeout(600)
ANSWER = {"pred": [0, 1]}
# init() imports sklearn: on a loaded 2-core machine that alone can take a minute
SLOW_START = {"readiness_probe": {"initial_delay": 1, "period": 1, "failure_threshold": 115}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # The instance needs only its machine here (no JupyterLab).
    yield from served(tmp_path_factory, "online-nodes", {"CLOUDLET_INSTANCE_APPS": ""})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = Path(tmp_path_factory.mktemp("online-nodes-project"))
    (root / "model").mkdir()
    subprocess.run([default_python(), "-c", TRAIN, str(root / "model" / "model.pkl")], check=True)
    (root / "src").mkdir()
    (root / "src" / "score.py").write_text(textwrap.dedent(SCORE))
    return root


@pytest.fixture(scope="module")
def ml(srv: RunningServer) -> Iterator[MLClient]:
    with MLClient(home=srv.home) as client:
        client.online_endpoints.create_or_update({"name": "ep1", "auth_mode": "key"})
        yield client


def deploy(ml: MLClient, project: Path, doc: dict[str, Any], local: bool = False) -> dict[str, Any]:
    doc = {**doc, **SLOW_START}
    created = ml.online_deployments.create_or_update(doc, base_path=project, local=local)
    shown = ml.online_deployments.wait("ep1", doc["name"], generation=created["generation"])
    assert shown["provisioning_state"] == "Succeeded", (shown["reason"], shown)
    return shown


def pinned(ml: MLClient, name: str) -> dict[str, Any]:
    answer = ml.online_endpoints.invoke("ep1", ROWS, deployment_name=name)
    assert answer.status_code == 200, answer.text
    assert answer.headers["azureml-model-deployment"] == name
    body: dict[str, Any] = answer.json()
    return body


def agent_processes(node_id: str) -> list[int]:
    """Processes of this host that belong to node NODE_ID (its agent and what it started)."""
    tag = f"CLOUDLET_NODE_ID={node_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and tag in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def wait_for(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_managed_replicas_are_nodes_made_for_them_and_freed_on_delete(
    srv: RunningServer,
    ml: MLClient,
    project: Path,
) -> None:
    shown = deploy(ml, project, deployment("managed", "managed", instance_count=2))
    nodes = {n["nodeId"]: n for n in shown["nodes"]}
    assert len(nodes) == 2, shown["nodes"]
    assert {r["node"] for r in shown["replicas"]} == set(nodes)  # one replica per node
    assert all(n["size"] == "Standard_DS3_v2" and n["state"] in ("idle", "busy") for n in nodes.values())
    for node_id in nodes:
        assert agent_processes(node_id), f"no agent runs node {node_id}"
    assert pinned(ml, "managed") == {**ANSWER, "who": "managed"}
    # the log of the replica's server comes from its node
    assert "Users's init has completed successfully" in ml.online_deployments.get_logs("ep1", "managed")
    family = "standardDSv2Family"
    base = f"/api/v1/subscriptions/{srv.subscription_id}/locations/local"
    with srv.client() as api:
        usage = {u["name"]: u for u in api.get(f"{base}/usages").json()["value"]}
        assert usage[family]["current_value"] >= 8  # 2 × Standard_DS3_v2 (4 cores)
        ports = [(r["host"], r["port"]) for r in shown["replicas"]]
        ml.online_deployments.delete("ep1", "managed")
        for node_id in nodes:
            wait_for(lambda n=node_id: not agent_processes(n), f"node {node_id}'s agent outlived the delete")
        for host, port in ports:
            with pytest.raises(httpx.TransportError):
                httpx.get(f"http://{host}:{port}/", timeout=2)
        after = {u["name"]: u for u in api.get(f"{base}/usages").json()["value"]}
        assert after[family]["current_value"] == usage[family]["current_value"] - 8


def test_instance_hosted_and_local_answer_like_the_managed_one(
    srv: RunningServer,
    ml: MLClient,
    project: Path,
) -> None:
    managed = deploy(ml, project, deployment("blue", "same"))
    with srv.client() as api:
        create_instance(api, srv, "ci-serve")
        instance_nodes = [n["nodeId"] for n in live_nodes(api, srv, "ci-serve")]
    assert len(instance_nodes) == 1
    on_instance = deploy(ml, project, deployment("oninst", "same", compute="azureml:ci-serve"))
    assert on_instance["compute"] == "ci-serve"
    assert [r["node"] for r in on_instance["replicas"]] == instance_nodes
    assert on_instance["nodes"] == []  # no node made for it: the instance's own serves it
    local = deploy(ml, project, deployment("loc", "same"), local=True)
    assert local["replicas"][0]["node"] is None and local["nodes"] == []
    answers = [pinned(ml, name) for name in ("blue", "oninst", "loc")]
    assert answers == [{**ANSWER, "who": "same"}] * 3
    assert managed["replicas"][0]["node"] not in instance_nodes
    ml.online_deployments.delete("ep1", "oninst")
    with srv.client() as api:  # the instance is not the deployment's to free
        assert [n["nodeId"] for n in live_nodes(api, srv, "ci-serve")] == instance_nodes


@pytest.mark.parametrize("compute", ["azureml:nowhere", "cpu-cluster"])
def test_compute_must_name_a_compute_instance(
    srv: RunningServer,
    ml: MLClient,
    project: Path,
    compute: str,
) -> None:
    with srv.client() as api:
        made = api.put(
            f"{srv.ws_path}/computes/cpu-cluster", json={"type": "amlcompute", "size": "Standard_DS3_v2"}
        )
        assert made.status_code in (200, 201, 202), made.text
        name = f"wrong-{compute.removeprefix('azureml:')}"
        with pytest.raises(HttpResponseError) as refused:
            ml.online_deployments.create_or_update(deployment(name, "x", compute=compute), base_path=project)
        assert refused.value.status_code == 400, refused.value
        text = str(refused.value)
        assert "compute" in text and compute.removeprefix("azureml:") in text, text
        assert "compute instance" in text, text
        gone = api.get(f"{srv.ws_path}/onlineEndpoints/ep1/deployments/{name}")
        assert gone.status_code == 404  # nothing half-created


def test_the_deployments_environment_is_built_on_its_node_and_serves(ml: MLClient, project: Path) -> None:
    """One case (a fresh venv per test is slow here): an inline pip environment is built by the
    node's agent as a job's is, and the replica's server runs from it; a --local deployment of it
    runs from it too."""
    env = {"name": "inf", "pip": ["azureml-inference-server-http==1.5.1", "scikit-learn>=1.5", "joblib"]}
    deploy(ml, project, deployment("built", "built", environment=env))
    assert pinned(ml, "built") == {**ANSWER, "who": "built"}
    logs = ml.online_deployments.get_logs("ep1", "built", lines=10_000)
    assert "Preparing environment 'inf'" in logs, logs[-2000:]
    built = [line for line in logs.splitlines() if "Loaded logging config from" in line]
    assert built and "/envs/" in built[0] and ".cache/inference-server" not in built[0], built
    ml.online_deployments.delete("ep1", "built")
    # --local runs the replica as a process here, from the same environment (built here as the
    # node built it, in the same cache: reused, not the server's inference interpreter)
    deploy(ml, project, deployment("built-local", "built-local", environment=env), local=True)
    assert pinned(ml, "built-local") == {**ANSWER, "who": "built-local"}
    logs = ml.online_deployments.get_logs("ep1", "built-local", lines=10_000)
    assert "environment" in logs and "reused" in logs, logs[-2000:]
    served_from = [line for line in logs.splitlines() if "Loaded logging config from" in line]
    assert served_from and "/envs/" in served_from[0], served_from
    assert ".cache/inference-server" not in served_from[0], served_from
    ml.online_deployments.delete("ep1", "built-local")


def test_a_registered_environment_is_resolved_pinned_and_built_on_the_node(
    srv: RunningServer, ml: MLClient, project: Path, tmp_path: Path
) -> None:
    """``environment: azureml:<name>@latest`` names an environment ``cloudlet environment create``
    registered: the newest version is pinned in the deployment, its node builds it (the venv of
    the inline case above: the same packages, one cached build) and the replica serves from it;
    an unknown version is a 400 naming ``environment`` and nothing is created."""
    pip = ["azureml-inference-server-http==1.5.1", "scikit-learn>=1.5", "joblib"]
    for version, packages in (("1", ["numpy"]), ("2", pip)):
        (tmp_path / f"env{version}.yml").write_text(yaml.safe_dump({"name": "inf-env", "pip": packages}))
        command = ["environment", "create", "--file", str(tmp_path / f"env{version}.yml")]
        done = subprocess.run(
            [sys.executable, "-m", "cloudlet", *command],
            env=srv.cli_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    with pytest.raises(HttpResponseError) as refused:
        ml.online_deployments.create_or_update(
            deployment("regd", "regd", environment="azureml:inf-env:9"), base_path=project
        )
    assert refused.value.status_code == 400 and refused.value.error.target == "environment", refused.value
    assert "cloudlet environment create" in str(refused.value), refused.value
    with srv.client() as api:
        assert api.get(f"{srv.ws_path}/onlineEndpoints/ep1/deployments/regd").status_code == 404

    shown = deploy(ml, project, deployment("regd", "regd", environment="azureml:inf-env@latest"))
    assert shown["environment"] == {"name": "inf-env", "version": "2", "pip": pip}, shown["environment"]
    assert pinned(ml, "regd") == {**ANSWER, "who": "regd"}
    logs = ml.online_deployments.get_logs("ep1", "regd", lines=10_000)
    served_from = [line for line in logs.splitlines() if "Loaded logging config from" in line]
    assert served_from and "/envs/" in served_from[0], served_from or logs[-2000:]
    assert ".cache/inference-server" not in served_from[0], served_from
    ml.online_deployments.delete("ep1", "regd")
