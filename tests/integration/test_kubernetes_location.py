"""A Kubernetes location end to end, against the FAKE API server and kubelet of
tests/fake_kube_api.py (no Kubernetes API server can run here; see docs/providers.md for what was
and was not run against a real cluster): the real server makes node pods through the official
client, the fake kubelet runs each pod's real agent as a local process, jobs run on them, the
cluster scales 0 → 2 → 0 and the pods and their Secrets are deleted; a pod the scheduler cannot
place says why in list-nodes; a bad configuration is a 400 naming the field."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer
from tests.fake_kube_api import FakeKubeApiServer
from tests.jobs_helpers import (
    compute,
    create_compute,
    delete_compute,
    log_text,
    nodes,
    served,
    submit,
    wait_job,
    wait_until,
)

LOCATIONS = "/api/v1/locations"
IMAGE = "registry.example/cloudlet-agent:test"
NAMESPACE = "cloudlet-nodes"
DS3 = "Standard_DS3_v2"  # 4 vCPUs, 14 GB: one per fake node


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeKubeApiServer]:
    # The agent's "image": what a container of it would see, a Python with cloudlet installed.
    image_env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
    with FakeKubeApiServer(tmp_path_factory.mktemp("fake-kube"), images={IMAGE: image_env}) as server:
        server.cluster.add_node("worker-a", cpu="4", memory="16Gi", labels={"pool": "cpu"})
        server.cluster.add_node("worker-b", cpu="4", memory="16Gi", labels={"pool": "cpu"})
        server.cluster.namespaces.add(NAMESPACE)
        yield server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory, fake: FakeKubeApiServer) -> Iterator[RunningServer]:
    yield from served(tmp_path_factory, "kubernetes")


@pytest.fixture(scope="module")
def kubeconfig(fake: FakeKubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(fake.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config", context="kind-fake"))


def location(api: httpx.Client, name: str, kubeconfig: str, **extra: Any) -> dict[str, Any]:
    config = {
        "kubeconfig": kubeconfig,
        "context": "kind-fake",
        "namespace": NAMESPACE,
        "image": IMAGE,
        # bwrap inside the "pod" as on a local node (the fake kubelet runs it on this host).
        "sandbox": os.environ.get("CLOUDLET_SANDBOX", "bwrap"),
        **extra,
    }
    made = api.put(f"{LOCATIONS}/{name}", json={"provider": "kubernetes", "config": config})
    assert made.status_code in (200, 201), made.text
    body: dict[str, Any] = made.json()
    return body


def node_pods(fake: FakeKubeApiServer, installation: str) -> list[dict[str, Any]]:
    return [
        p
        for p in fake.pods(NAMESPACE)
        if p["metadata"]["labels"].get("cloudlet.dev/installation") == installation
    ]


def test_a_cluster_on_kubernetes_scales_to_two_pods_runs_the_jobs_and_back_to_zero(
    api: httpx.Client, srv: RunningServer, fake: FakeKubeApiServer, kubeconfig: str, installation: str
) -> None:
    location(api, "k8s", kubeconfig)
    name, idle = "k8s-cluster", 4
    body = {"type": "amlcompute", "size": DS3, "min_instances": 0, "max_instances": 2}
    created = create_compute(api, srv, name, {**body, "idle_time_before_scale_down": idle, "location": "k8s"})
    assert created["current_node_count"] == 0 and node_pods(fake, installation) == []
    try:
        for job in ("k8s-a", "k8s-b"):
            submit(api, srv, job, {"command": "echo on $(hostname); sleep 3", "compute": f"azureml:{name}"})
        # Two pods, one per fake node (each fits one DS3), both running the agent.
        pods = wait_until(
            lambda: (
                len(p := node_pods(fake, installation)) == 2
                and all(x["status"]["phase"] == "Running" for x in p)
                and p
            ),
            90,
            "two running node pods",
        )
        assert sorted(p["spec"]["nodeName"] for p in pods) == ["worker-a", "worker-b"]
        for pod in pods:
            [container] = pod["spec"]["containers"]
            assert container["resources"]["limits"] == {"cpu": "4", "memory": "14336Mi"}
        assert len(nodes(api, srv, name)) == 2
        done = [wait_job(api, srv, job, timeout=120) for job in ("k8s-a", "k8s-b")]
        assert [j["status"] for j in done] == ["Completed", "Completed"], done
        # The job's own line, beside the agent's notes (a pod's data goes over HTTP: docs/providers.md).
        printed = {j: _own_lines(log_text(api, srv, j)) for j in ("k8s-a", "k8s-b")}
        assert all(lines and lines[0].startswith("on ") for lines in printed.values()), printed
        seen = nodes(api, srv, name)
        ran_on = {n["nodeId"] for n in seen}
        brief = [(n["nodeId"], n["state"], n["error"]) for n in seen]
        assert {n["privateIpAddress"] for n in seen} == {"127.0.0.1"}, brief  # the pods' IP, as reported
        # Idle past the idle time: back to 0, the pods and their Secrets deleted.
        wait_until(
            lambda: compute(api, srv, name)["current_node_count"] == 0 and not nodes(api, srv, name),
            idle + 60,
            "the cluster to scale back to 0",
        )
        wait_until(lambda: not node_pods(fake, installation), 60, "the node pods to be deleted")
        assert not [
            s for s in fake.secrets(NAMESPACE) if s["metadata"]["labels"].get("cloudlet.dev/node") in ran_on
        ]
        deletes = [p for m, p in fake.cluster.calls if m == "DELETE" and "/pods/" in p]
        assert {p.rsplit("/", 1)[1] for p in deletes} >= {f"cloudlet-{n}" for n in ran_on}
    finally:
        delete_compute(api, srv, name)


def test_a_pod_the_scheduler_cannot_place_shows_its_reason_in_list_nodes(
    api: httpx.Client, srv: RunningServer, fake: FakeKubeApiServer, kubeconfig: str, installation: str
) -> None:
    location(api, "k8s-tpu", kubeconfig, size_node_selectors={DS3: {"accelerator": "tpu"}})
    name = "k8s-pending"
    body = {"type": "amlcompute", "size": DS3, "min_instances": 1, "max_instances": 1, "location": "k8s-tpu"}
    create_compute(api, srv, name, body)
    try:
        [node] = wait_until(
            lambda: [n for n in nodes(api, srv, name) if n.get("status_message")],
            60,
            "the node to show the scheduler's reason",
        )
        assert node["state"] in ("allocated", "starting"), node
        assert node["status_message"] == (
            "Unschedulable: 0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
        )
    finally:
        delete_compute(api, srv, name)
    wait_until(
        lambda: (
            not [
                p
                for p in node_pods(fake, installation)
                if p["metadata"]["name"] == f"cloudlet-{node['nodeId']}"
            ]
        ),
        60,
        "the pending pod to be deleted with its cluster",
    )


def test_a_bad_kubernetes_configuration_is_a_400_naming_the_field(api: httpx.Client, kubeconfig: str) -> None:
    base = {"kubeconfig": kubeconfig, "namespace": NAMESPACE, "image": IMAGE}
    cases = [
        ({**base, "namespace": "Not_A_Label"}, "config.namespace"),
        ({**base, "context": "prod"}, "config.context"),
        ({**base, "kubeconfig": "/nonexistent/kubeconfig"}, "config.kubeconfig"),
        ({k: v for k, v in base.items() if k != "image"}, "config.image"),
        ({**base, "node_selector": {"pool": "a b"}}, "config.node_selector"),
        ({**base, "replicas": 2}, "config.replicas"),
    ]
    for config, target in cases:
        response = api.put(f"{LOCATIONS}/k8s-bad", json={"provider": "kubernetes", "config": config})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["target"] == target, (config, error)
        assert target in error["message"]
    assert api.get(f"{LOCATIONS}/k8s-bad").status_code == 404  # nothing was made


def _own_lines(log: str) -> list[str]:
    """The lines a job printed itself: the agent's notes (``cloudlet-agent: …``) left out."""
    return [line for line in log.splitlines() if not line.startswith("cloudlet-agent:")]
