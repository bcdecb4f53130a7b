"""What a Kubernetes node is: its pod and Secret as the API's JSON, and readings of what the API
says back (pending reasons, capacity). Pure; ``providers/kube.py`` sends them with the official
``kubernetes`` client.

A node is one pod running ``python -m cloudlet.agent`` in the configured image: requests and
limits from the size (cpu, memory, ``nvidia.com/gpu``), the configured node selector (and the
size's own), labels carrying the installation and node ids (``list_nodes`` is a label selector,
so orphans are found after a crash), and the node token in a Secret of its own that the pod reads
by ``secretKeyRef`` (never in the pod spec in the clear). The Secret is made after the pod, with the
pod as its owner, so Kubernetes' garbage collector deletes it with the pod even if cloudlet does
not; ``terminate`` deletes both and treats "not found" as done.

See docs/providers.md, "Kubernetes".
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from cloudlet.providers.base import Capacity, NodeHandle, NodeRequest, ProviderError

LABEL_INSTALLATION = "cloudlet.dev/installation"
LABEL_NODE = "cloudlet.dev/node"
LABEL_SIZE = "cloudlet.dev/size"
MANAGED_BY = ("app.kubernetes.io/managed-by", "cloudlet")
COMPONENT = ("app.kubernetes.io/component", "node-agent")
CONTAINER = "agent"
TOKEN_KEY = "token"
CA_KEY = "ca.pem"
CA_MOUNT = "/etc/cloudlet/ca"
GPU_RESOURCE = "nvidia.com/gpu"
FINISHED_PHASES = ("Succeeded", "Failed")
GRACE_S = 10
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True)
class PodSettings:
    """What every node pod of a location shares (from the location's validated configuration)."""

    namespace: str
    image: str
    node_dir: str = "/var/lib/cloudlet/node"
    command: tuple[str, ...] = ("python", "-m", "cloudlet.agent")
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    size_node_selectors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    image_pull_policy: str = "IfNotPresent"
    sandbox: str = "bwrap"
    server_url: str | None = None  # the server as the pods reach it; None: the request's


# -- pure: names, labels, manifests -----------------------------------------------------------
def object_name(node_id: str) -> str:
    """The pod's and its Secret's name: a DNS-1123 label made from the node id."""
    name = re.sub(r"[^a-z0-9-]", "-", f"cloudlet-{node_id}".lower()).strip("-")
    return name[:63].rstrip("-")


def label_value(value: str) -> str:
    """VALUE as a label value (63 characters of [A-Za-z0-9._-], alphanumeric at both ends)."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "_", value)[:63].strip("-_.")
    return cleaned if _LABEL_VALUE.match(cleaned) else ""


def node_labels(installation_id: str, node_id: str, size: str = "") -> dict[str, str]:
    labels = {
        MANAGED_BY[0]: MANAGED_BY[1],
        COMPONENT[0]: COMPONENT[1],
        LABEL_INSTALLATION: label_value(installation_id),
        LABEL_NODE: label_value(node_id),
    }
    if size:
        labels[LABEL_SIZE] = label_value(size)
    return labels


def installation_selector(installation_id: str) -> str:
    return f"{MANAGED_BY[0]}={MANAGED_BY[1]},{LABEL_INSTALLATION}={label_value(installation_id)}"


def cpu_quantity(vcpus: float) -> str:
    """vCPUs as a Kubernetes CPU quantity (whole cores plain, fractions in millicores)."""
    if float(vcpus).is_integer():
        return str(int(vcpus))
    return f"{max(1, round(vcpus * 1000))}m"


def memory_quantity(memory_gb: float) -> str:
    """GB (the size catalogue's GiB) as a quantity in Mi, so fractions stay exact enough."""
    return f"{max(1, round(memory_gb * 1024))}Mi"


def resources_of(req: NodeRequest) -> dict[str, dict[str, str]]:
    """Requests equal to limits (a Guaranteed pod), GPUs only as limits (as Kubernetes asks)."""
    amounts = {"cpu": cpu_quantity(req.vcpus), "memory": memory_quantity(req.memory_gb)}
    limits = dict(amounts)
    if req.gpus:
        limits[GPU_RESOURCE] = str(req.gpus)
    return {"requests": amounts, "limits": limits}


def agent_environment(req: NodeRequest, settings: PodSettings, secret: str) -> list[dict[str, Any]]:
    """The container's env: docs/agent-protocol.md's variables; the token by secretKeyRef, the node's
    address the pod's own IP (downward API)."""
    plain = {k: v for k, v in req.env.items() if k not in ("CLOUDLET_CA_FILE", "CLOUDLET_NODE_TOKEN")}
    plain.update(
        {
            "CLOUDLET_SERVER": settings.server_url or req.server_url,
            "CLOUDLET_NODE_ID": req.node_id,
            "CLOUDLET_NODE_DIR": settings.node_dir,
            "CLOUDLET_INSTALLATION": req.installation_id,
            "CLOUDLET_NODE_VCPUS": f"{req.vcpus:g}",
            "CLOUDLET_NODE_MEMORY_GB": f"{req.memory_gb:g}",
            "CLOUDLET_NODE_GPUS": str(req.gpus),
            "CLOUDLET_NODE_SIZE": req.size,
            "CLOUDLET_NODE_TIER": req.tier,
            "CLOUDLET_SANDBOX": settings.sandbox,
            "CLOUDLET_SHARED_FILESYSTEM": "0",  # a pod sees none of the server's disk: data over HTTP
            "PYTHONUNBUFFERED": "1",
        }
    )
    if "CLOUDLET_CA_FILE" in req.env:
        plain["CLOUDLET_CA_FILE"] = f"{CA_MOUNT}/{CA_KEY}"
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(plain.items())]
    env.append(
        {"name": "CLOUDLET_NODE_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": TOKEN_KEY}}}
    )
    env.append({"name": "CLOUDLET_NODE_ADDRESS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    return env


def pod_manifest(req: NodeRequest, settings: PodSettings) -> dict[str, Any]:
    """The node's pod, in the API's JSON shape."""
    name = object_name(req.node_id)
    selector = {**settings.node_selector, **settings.size_node_selectors.get(req.size, {})}
    mounts: list[dict[str, Any]] = [{"name": "node", "mountPath": settings.node_dir}]
    volumes: list[dict[str, Any]] = [{"name": "node", "emptyDir": {}}]
    if "CLOUDLET_CA_FILE" in req.env:
        mounts.append({"name": "ca", "mountPath": CA_MOUNT, "readOnly": True})
        volumes.append(
            {"name": "ca", "secret": {"secretName": name, "items": [{"key": CA_KEY, "path": CA_KEY}]}}
        )
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": list(settings.command),
        "env": agent_environment(req, settings, name),
        "resources": resources_of(req),
        "volumeMounts": mounts,
        "workingDir": settings.node_dir,
    }
    spec: dict[str, Any] = {
        "restartPolicy": "Never",  # an agent that exits is a node that is gone (as on the local provider)
        "automountServiceAccountToken": False,  # jobs get no credential to the cluster's API
        "terminationGracePeriodSeconds": GRACE_S,
        "containers": [container],
        "volumes": volumes,
    }
    if selector:
        spec["nodeSelector"] = dict(sorted(selector.items()))
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account
    if settings.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    metadata = {
        "name": name,
        "namespace": settings.namespace,
        "labels": node_labels(req.installation_id, req.node_id, req.size),
        "annotations": {"cloudlet.dev/node-id": req.node_id, "cloudlet.dev/tier": req.tier},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def secret_manifest(
    req: NodeRequest, settings: PodSettings, pod_uid: str | None, ca_pem: bytes | None = None
) -> dict[str, Any]:
    """The node's Secret (its token; the server's CA when the agent needs one), owned by its pod."""
    name = object_name(req.node_id)
    data = {TOKEN_KEY: base64.b64encode(req.token.encode()).decode()}
    if ca_pem is not None:
        data[CA_KEY] = base64.b64encode(ca_pem).decode()
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": settings.namespace,
        "labels": node_labels(req.installation_id, req.node_id),
    }
    if pod_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": pod_uid}]
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata, "data": data}


def pending_reason(pod: Mapping[str, Any]) -> str:
    """Why a pod that is not running yet is waiting, as Kubernetes says it (the scheduler's
    ``Unschedulable: 0/3 nodes are available: …``, a container's ``ImagePullBackOff: …``); ""
    when it is not waiting on anything that has a reason."""
    status = pod.get("status") or {}
    if status.get("phase") not in (None, "Pending"):
        return ""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return _reason_text(condition.get("reason"), condition.get("message"))
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") and waiting.get("reason") != "ContainerCreating":
            return _reason_text(waiting.get("reason"), waiting.get("message"))
    return ""


def _reason_text(reason: object, message: object) -> str:
    parts = [str(p) for p in (reason, message) if p]
    return ": ".join(parts)


def handle_of(pod: Mapping[str, Any], installation_id: str) -> NodeHandle | None:
    """A listed pod as a node handle (None for a pod that is not one of this installation's)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    node_id = (meta.get("annotations") or {}).get("cloudlet.dev/node-id") or labels.get(LABEL_NODE)
    if not node_id or labels.get(LABEL_INSTALLATION) != label_value(installation_id):
        return None
    status = pod.get("status") or {}
    ref = {
        "pod": meta.get("name"),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "installation_id": installation_id,
        "phase": status.get("phase") or "Pending",
        "node_name": (pod.get("spec") or {}).get("nodeName"),
        "pod_ip": status.get("podIP"),
        "pending_reason": pending_reason(pod),
    }
    return NodeHandle(node_id=str(node_id), provider_ref=ref)


def parse_quantity(raw: object) -> Decimal:
    """A Kubernetes quantity (``500m``, ``4``, ``16Gi``, ``1e3``) as a number of base units."""
    from kubernetes.utils import parse_quantity as parse  # the client's own reading of quantities

    try:
        return Decimal(parse(str(raw)))
    except ValueError as exc:
        raise ProviderError(f"the cluster reported a quantity cloudlet cannot read: {raw!r}") from exc


def capacity_of(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], installation_id: str
) -> Capacity:
    """Allocatable of the schedulable, ready NODES minus what the PODS bound to them request, this
    installation's own pods excepted (an offer counts this installation's nodes as its own)."""
    names: set[str] = set()
    cpu = memory = gpus = Decimal(0)
    for node in nodes:
        status = node.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        if (node.get("spec") or {}).get("unschedulable") or not ready:
            continue
        names.add(str((node.get("metadata") or {}).get("name")))
        allocatable = status.get("allocatable") or {}
        cpu += parse_quantity(allocatable.get("cpu", "0"))
        memory += parse_quantity(allocatable.get("memory", "0"))
        gpus += parse_quantity(allocatable.get(GPU_RESOURCE, "0"))
    ours = label_value(installation_id)
    for pod in pods:
        spec = pod.get("spec") or {}
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if spec.get("nodeName") not in names or (pod.get("status") or {}).get("phase") in FINISHED_PHASES:
            continue
        if labels.get(LABEL_INSTALLATION) == ours and labels.get(MANAGED_BY[0]) == MANAGED_BY[1]:
            continue
        for container in spec.get("containers") or []:
            requests = (container.get("resources") or {}).get("requests") or {}
            limits = (container.get("resources") or {}).get("limits") or {}
            cpu -= parse_quantity(requests.get("cpu", limits.get("cpu", "0")))
            memory -= parse_quantity(requests.get("memory", limits.get("memory", "0")))
            gpus -= parse_quantity(requests.get(GPU_RESOURCE, limits.get(GPU_RESOURCE, "0")))
    gib = Decimal(1024**3)
    return Capacity(
        vcpus=max(0.0, float(cpu)), memory_gb=max(0.0, float(memory / gib)), gpus=max(0.0, float(gpus))
    )


def read_ca(req: NodeRequest) -> bytes | None:
    path = req.env.get("CLOUDLET_CA_FILE")
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ProviderError(f"cannot read the server's CA {path} for the node's Secret: {exc}") from exc


def engine_status(ref: Mapping[str, Any]) -> tuple[str, str, str]:
    """A listed pod's handle as (phase, message, reason) in the shape of an engine's node status:
    ``pending`` while Kubernetes keeps it waiting (the message in its words, the reason its code,
    e.g. ``Unschedulable``), else ``running``."""
    message = str(ref.get("pending_reason") or "")
    if ref.get("phase") == "Pending" or message:
        return "pending", message, message.split(":", 1)[0] if message else ""
    return "running", "", ""
