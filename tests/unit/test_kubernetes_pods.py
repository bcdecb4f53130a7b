"""The Kubernetes provider's calls, through the official client, against the FAKE API server of
tests/fake_kube_api.py (no Kubernetes API server can run here): the pod it makes (requests,
limits, GPUs, node selector, labels, the token in a Secret), listing and orphans, idempotent
terminate, capacity, the scheduler's pending reason; and the closed configuration."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from cloudlet.domain.errors import CloudletError
from cloudlet.providers.base import CapacityOwner, NodeHandle, NodeProvider, NodeRequest, ProviderError
from cloudlet.providers.kube import KubernetesProvider
from cloudlet.providers.kube_pods import cpu_quantity, engine_status, memory_quantity, object_name
from cloudlet.providers.registry import REGISTRY, ProviderContext
from tests.fake_kube_api import FakeKubeApiServer

T = TypeVar("T")
INSTALLATION = "3f0c2a44-1b7e-4a8e-9a55-0c6d1f2e9b10"
TOKEN = "node-secret-token-0123456789"
IMAGE = "registry.example/cloudlet-agent:test"


def wait_for(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeKubeApiServer]:
    # The kubelet knows one image: a shell that sleeps stands in for the agent (these tests are
    # about the API calls; the integration test runs the real agent).
    with FakeKubeApiServer(tmp_path / "fake-kube", images={"sleeper": {"PATH": "/usr/bin:/bin"}}) as server:
        server.cluster.add_node("worker-a", cpu="4", memory="16Gi", labels={"pool": "cpu"})
        server.cluster.add_node("worker-b", cpu="4", memory="16Gi", labels={"pool": "cpu"})
        server.cluster.add_node(
            "worker-g", cpu="8", memory="128Gi", gpus=2, labels={"pool": "gpu", "gpu": "v100"}
        )
        server.cluster.namespaces.add("ml")
        yield server


def provider(fake: FakeKubeApiServer, tmp_path: Path, **config: Any) -> KubernetesProvider:
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
    settings = {"kubeconfig": str(kubeconfig), "namespace": "ml", "image": IMAGE, **config}
    built = REGISTRY.build("kubernetes", settings, ProviderContext(tmp_path, INSTALLATION))
    assert isinstance(built, KubernetesProvider) and isinstance(built, NodeProvider)
    return built


def request(
    node_id: str, size: str = "Standard_DS3_v2", vcpus: float = 4, memory_gb: float = 14, gpus: int = 0
) -> NodeRequest:
    return NodeRequest(
        node_id=node_id,
        token=TOKEN,
        installation_id=INSTALLATION,
        server_url="http://10.0.0.5:8571",
        size=size,
        vcpus=vcpus,
        memory_gb=memory_gb,
        gpus=gpus,
    )


def test_quantities_are_kubernetes_quantities() -> None:
    assert cpu_quantity(4) == "4" and cpu_quantity(0.5) == "500m" and cpu_quantity(1.25) == "1250m"
    assert memory_quantity(14) == "14336Mi" and memory_quantity(0.5) == "512Mi"
    assert object_name("n-3F2A_9c") == "cloudlet-n-3f2a-9c"


def test_the_pod_carries_the_sizes_resources_selectors_labels_and_no_token(
    fake: FakeKubeApiServer, tmp_path: Path
) -> None:
    kube = provider(
        fake,
        tmp_path,
        node_selector={"pool": "gpu"},
        size_node_selectors={"Standard_NC6s_v3": {"gpu": "v100"}},
        service_account="cloudlet-node",
        image_pull_secrets=["regcred"],
    )
    handle = kube.create(request("n-gpu1", size="Standard_NC6s_v3", vcpus=6, memory_gb=112, gpus=1))
    assert handle.node_id == "n-gpu1" and handle.provider_ref["pod"] == "cloudlet-n-gpu1"
    [pod] = fake.pods("ml")
    spec, [container] = pod["spec"], pod["spec"]["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "6", "memory": "114688Mi"},
        "limits": {"cpu": "6", "memory": "114688Mi", "nvidia.com/gpu": "1"},
    }
    assert spec["nodeSelector"] == {"gpu": "v100", "pool": "gpu"}  # the location's and the size's
    assert spec["serviceAccountName"] == "cloudlet-node" and spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    assert container["image"] == IMAGE and container["command"] == ["python", "-m", "cloudlet.agent"]
    labels = pod["metadata"]["labels"]
    assert labels["cloudlet.dev/installation"] == INSTALLATION and labels["cloudlet.dev/node"] == "n-gpu1"
    assert labels["app.kubernetes.io/managed-by"] == "cloudlet"
    env = {e["name"]: e for e in container["env"]}
    assert env["CLOUDLET_SERVER"]["value"] == "http://10.0.0.5:8571"
    assert env["CLOUDLET_NODE_GPUS"]["value"] == "1" and env["CLOUDLET_NODE_VCPUS"]["value"] == "6"
    assert env["CLOUDLET_NODE_TOKEN"]["valueFrom"] == {
        "secretKeyRef": {"name": "cloudlet-n-gpu1", "key": "token"}
    }
    assert env["CLOUDLET_NODE_ADDRESS"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert TOKEN not in json.dumps(pod)  # the token is in the Secret only
    [secret] = fake.secrets("ml")
    assert base64.b64decode(secret["data"]["token"]).decode() == TOKEN
    assert secret["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]  # goes with its pod
    assert secret["metadata"]["labels"]["cloudlet.dev/node"] == "n-gpu1"
    # A retried create makes nothing twice.
    assert (
        kube.create(request("n-gpu1", size="Standard_NC6s_v3", vcpus=6, memory_gb=112, gpus=1)).node_id
        == "n-gpu1"
    )
    assert len(fake.pods("ml")) == 1 and len(fake.secrets("ml")) == 1
    # It fits only the GPU node: the fake scheduler bound it there.
    assert (
        wait_for(lambda: fake.pods("ml")[0]["spec"].get("nodeName"), 10, "the pod to be scheduled")
        == "worker-g"
    )


def test_listing_finds_this_installations_pods_after_a_crash(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    kube = provider(fake, tmp_path)
    kube.create(request("n-aaa"))
    kube.create(request("n-bbb"))
    other = NodeRequest("n-other", TOKEN, "another-installation", "http://x:1", "Standard_DS3_v2", 4, 14)
    kube.create(other)
    # A provider built afresh (a restarted control plane) knows nothing but what the API says.
    listed = provider(fake, tmp_path).list_nodes(INSTALLATION)
    assert [h.node_id for h in listed] == ["n-aaa", "n-bbb"]
    assert all(h.provider_ref["namespace"] == "ml" and h.provider_ref["uid"] for h in listed)
    assert [h.node_id for h in kube.list_nodes("another-installation")] == ["n-other"]
    before = len(fake.cluster.calls)
    kube.list_nodes(INSTALLATION)
    assert fake.cluster.calls[before:] == [("GET", "/api/v1/namespaces/ml/pods")]  # one list call, no reads


def test_terminate_deletes_pod_and_secret_and_is_idempotent(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    kube = provider(fake, tmp_path, image="sleeper")
    handle = kube.create(request("n-ccc", vcpus=1, memory_gb=1))
    # The fake kubelet runs the "image" (its command fails at once: no python in a bare PATH),
    # which does not matter here: terminate must delete whatever state the pod is in.
    wait_for(lambda: fake.pods("ml")[0]["spec"].get("nodeName"), 10, "the pod to be scheduled")
    kube.terminate(handle)
    kube.terminate(handle)  # again: nothing to delete is not an error
    wait_for(lambda: not fake.pods("ml") or None, 30, "the pod to be gone")
    assert fake.secrets("ml") == []
    kube.terminate(NodeHandle("n-never"))  # a node whose pod never existed
    assert kube.list_nodes(INSTALLATION) == []


def test_capacity_is_allocatable_minus_what_others_request_on_the_selected_nodes(
    fake: FakeKubeApiServer, tmp_path: Path
) -> None:
    kube = provider(fake, tmp_path, node_selector={"pool": "cpu"})
    assert isinstance(kube, CapacityOwner)
    offer = kube.capacity()
    assert (offer.vcpus, offer.memory_gb, offer.gpus) == (8.0, 32.0, 0.0)  # worker-a + worker-b
    fake.run_pod("default", "someone-elses", cpu="1500m", memory="2Gi", node="worker-a")
    fake.run_pod("default", "on-the-gpu-node", cpu="2", memory="2Gi", node="worker-g")  # not selected
    offer = kube.capacity()
    assert (offer.vcpus, offer.memory_gb) == (6.5, 30.0)
    kube.create(request("n-own", vcpus=2, memory_gb=4))  # this installation's own pods stay in the offer
    wait_for(lambda: all(p["spec"].get("nodeName") for p in fake.pods("ml")) or None, 10, "scheduling")
    assert kube.capacity().vcpus == 6.5
    everything = provider(fake, tmp_path).capacity()  # no selector: every node
    assert (everything.vcpus, everything.gpus) == (16 - 3.5, 2.0)


def test_a_pending_pod_says_why_as_the_scheduler_put_it(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    kube = provider(fake, tmp_path, size_node_selectors={"Standard_DS3_v2": {"pool": "tpu"}})
    kube.create(request("n-nowhere"))
    reason = wait_for(
        lambda: kube.list_nodes(INSTALLATION)[0].provider_ref["pending_reason"], 10, "a pending reason"
    )
    assert (
        reason
        == "Unschedulable: 0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    [waiting] = kube.list_nodes(INSTALLATION)
    assert engine_status(waiting.provider_ref) == ("pending", reason, "Unschedulable")
    big = provider(fake, tmp_path)
    big.create(request("n-huge", vcpus=32, memory_gb=8))
    reason = wait_for(
        lambda: {h.node_id: h for h in big.list_nodes(INSTALLATION)}["n-huge"].provider_ref["pending_reason"],
        10,
        "the big pod's pending reason",
    )
    assert reason == "Unschedulable: 0/3 nodes are available: 3 Insufficient cpu."
    # An image the cluster cannot pull: the container's reason.
    placed = provider(fake, tmp_path, image="registry.example/missing:1")
    placed.create(request("n-noimage", vcpus=1, memory_gb=1))
    reason = wait_for(
        lambda: {h.node_id: h for h in placed.list_nodes(INSTALLATION)}["n-noimage"].provider_ref[
            "pending_reason"
        ],
        10,
        "the image pull reason",
    )
    assert reason.startswith("ErrImagePull: Failed to pull image")


def test_the_apis_refusals_come_back_as_provider_errors(fake: FakeKubeApiServer, tmp_path: Path) -> None:
    with pytest.raises(ProviderError, match='404 NotFound: namespaces "nope" not found'):
        provider(fake, tmp_path, namespace="nope").create(request("n-ddd"))
    assert fake.pods() == []  # nothing half-made
    stale = provider(fake, tmp_path)
    fake.token = "rotated"  # the kubeconfig's token no longer works
    with pytest.raises(ProviderError, match="401 Unauthorized"):
        stale.list_nodes(INSTALLATION)


@pytest.mark.parametrize(
    ("config", "target"),
    sorted(
        [
            ({"image": IMAGE, "namespace": "ml"}, "config.kubeconfig"),
            ({"kubeconfig": "relative/kubeconfig", "image": IMAGE, "namespace": "ml"}, "config.kubeconfig"),
            ({"kubeconfig": "KUBECONFIG", "image": IMAGE, "namespace": "Bad_NS"}, "config.namespace"),
            ({"kubeconfig": "KUBECONFIG", "namespace": "ml"}, "config.image"),
            (
                {"kubeconfig": "KUBECONFIG", "image": IMAGE, "namespace": "ml", "context": "prod"},
                "config.context",
            ),
            (
                {
                    "kubeconfig": "KUBECONFIG",
                    "image": IMAGE,
                    "namespace": "ml",
                    "node_selector": {"a b": "c"},
                },
                "config.node_selector",
            ),
            (
                {"kubeconfig": "KUBECONFIG", "image": IMAGE, "namespace": "ml", "gpu_type": "a100"},
                "config.gpu_type",
            ),
            (
                {"in_cluster": True, "kubeconfig": "KUBECONFIG", "image": IMAGE, "namespace": "ml"},
                "config.kubeconfig",
            ),
            (
                {"kubeconfig": "KUBECONFIG", "image": IMAGE, "namespace": "ml", "server_url": "ftp://x"},
                "config.server_url",
            ),
        ],
        key=lambda case: json.dumps(case[0], sort_keys=True),
    ),
)
def test_a_bad_configuration_names_its_field(config: dict[str, Any], target: str, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\ncontexts: [{name: fake, context: {cluster: c, user: u}}]\n")
    given = {k: (str(kubeconfig) if v == "KUBECONFIG" else v) for k, v in config.items()}
    with pytest.raises(CloudletError) as caught:
        REGISTRY.validate("kubernetes", given)
    assert caught.value.target == target, caught.value
    assert caught.value.status == 400


def test_in_cluster_needs_no_kubeconfig() -> None:
    config = REGISTRY.validate("kubernetes", {"in_cluster": True, "image": IMAGE, "namespace": "ml"})
    assert config.model_dump()["kubeconfig"] is None
