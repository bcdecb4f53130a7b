"""The FAKE scheduler and FAKE kubelet behind ``tests/fake_kube_api.FakeKubeApiServer`` (and the
fake cluster's state they share with it): no Kubernetes can run on these machines.

The scheduler binds pending pods to the fake nodes whose labels match the pod's ``nodeSelector``
and whose allocatable CPU, memory and ``nvidia.com/gpu`` still fit its requests, else it leaves
the pod a ``PodScheduled=False`` condition with reason ``Unschedulable`` and the scheduler's
message (``0/2 nodes are available: …``). The kubelet runs a bound pod's container command as a
local process (in its own session, killed with its group); see fake_kube_api's docstring for what
it resolves and translates.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import itertools
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kubernetes.utils import parse_quantity

GPU = "nvidia.com/gpu"
Obj = dict[str, Any]


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ContainerConfigError(Exception):
    """What keeps a container from being made (a missing Secret or key), as the kubelet says it."""


# -- the fake cluster's state ----------------------------------------------------------------
@dataclass
class Container:
    """A running pod's process (the fake kubelet's)."""

    process: subprocess.Popen[bytes]
    log: Path
    started_at: str
    kill_at: float | None = None


@dataclass
class FakeCluster:
    """Nodes, namespaces, pods and Secrets, under one lock (the fake API server's store)."""

    namespaces: set[str] = field(default_factory=lambda: {"default"})
    nodes: dict[str, Obj] = field(default_factory=dict)
    pods: dict[tuple[str, str], Obj] = field(default_factory=dict)
    secrets: dict[tuple[str, str], Obj] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)
    _version: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    calls: list[tuple[str, str]] = field(default_factory=list)  # (method, path): what clients asked

    def stamp(self, obj: Obj, namespace: str | None) -> Obj:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", now_rfc3339())
        if namespace is not None:
            meta["namespace"] = namespace
        meta["resourceVersion"] = str(next(self._version))
        return obj

    def add_node(
        self, name: str, cpu: str, memory: str, gpus: int = 0, labels: dict[str, str] | None = None
    ) -> None:
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable[GPU] = str(gpus)
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {},
            "status": {
                "capacity": dict(allocatable),
                "allocatable": allocatable,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now_rfc3339(),
                        "lastTransitionTime": now_rfc3339(),
                    }
                ],
                "nodeInfo": _node_info(),
            },
        }
        with self.lock:
            self.nodes[name] = self.stamp(node, None)

    def version(self) -> str:
        return str(next(self._version))


def _node_info() -> Obj:
    fields: tuple[str, ...] = ("architecture", "bootID", "containerRuntimeVersion", "kernelVersion")
    fields += ("kubeProxyVersion", "kubeletVersion", "machineID", "operatingSystem", "osImage", "systemUUID")
    info = {f: "fake" for f in fields}
    info.update({"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "v1.31.0-fake"})
    return info


def pod_requests(pod: Obj) -> dict[str, Decimal]:
    total = {"cpu": Decimal(0), "memory": Decimal(0), GPU: Decimal(0)}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for key in total:
            raw = requests.get(key, limits.get(key))
            if raw is not None:
                total[key] += Decimal(parse_quantity(raw))
    return total


# -- the fake scheduler and kubelet -----------------------------------------------------------
class FakeKubelet:
    """Schedules pending pods onto fake nodes and runs bound pods' commands as local processes."""

    def __init__(self, cluster: FakeCluster, root: Path, images: dict[str, dict[str, str]]) -> None:
        self.cluster, self.root, self.images = cluster, root, images
        self.containers: dict[str, Container] = {}  # by pod uid
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-kubelet", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for container in self.containers.values():
            _signal_group(container.process, signal.SIGKILL)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self.cluster.lock:
                for pod in list(self.cluster.pods.values()):
                    try:
                        self._step(pod)
                    except Exception as exc:  # a fake kubelet bug shows in the pod, not as silence
                        pod["status"]["message"] = f"fake kubelet: {exc!r}"

    def _step(self, pod: Obj) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            self._stop_container(pod)
            return
        if not spec.get("nodeName"):
            self._schedule(pod)
            return
        if status["phase"] != "Pending":
            self._watch(pod)
            return
        if uid not in self.containers:
            self._start(pod)

    def _schedule(self, pod: Obj) -> None:
        selector = pod["spec"].get("nodeSelector") or {}
        wanted = pod_requests(pod)
        reasons: dict[str, int] = {}
        for name, node in sorted(self.cluster.nodes.items()):
            labels = node["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in selector.items()):
                reasons["node(s) didn't match Pod's node affinity/selector"] = (
                    reasons.get("node(s) didn't match Pod's node affinity/selector", 0) + 1
                )
                continue
            free = {k: Decimal(parse_quantity(node["status"]["allocatable"].get(k, "0"))) for k in wanted}
            for other in self.cluster.pods.values():
                if other["spec"].get("nodeName") == name and other["status"]["phase"] in (
                    "Pending",
                    "Running",
                ):
                    for k, v in pod_requests(other).items():
                        free[k] -= v
            short = [k for k in ("cpu", "memory", GPU) if wanted[k] > free[k]]
            if short:
                for k in short:
                    reasons[f"Insufficient {k}"] = reasons.get(f"Insufficient {k}", 0) + 1
                continue
            pod["spec"]["nodeName"] = name
            self._condition(pod, "PodScheduled", "True")
            pod["status"]["containerStatuses"] = [self._waiting(pod, "ContainerCreating", "")]
            return
        detail = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
        message = f"0/{len(self.cluster.nodes)} nodes are available: {detail or 'no nodes'}."
        self._condition(pod, "PodScheduled", "False", "Unschedulable", message)

    def _start(self, pod: Obj) -> None:
        [container] = pod["spec"]["containers"]
        image = container["image"]
        if image not in self.images:
            message = f'Failed to pull image "{image}": not found in the fake kubelet\'s images'
            pod["status"]["containerStatuses"] = [self._waiting(pod, "ErrImagePull", message)]
            return
        try:
            env, mounts = self._environment(pod, container)
        except ContainerConfigError as exc:
            pod["status"]["containerStatuses"] = [self._waiting(pod, "CreateContainerConfigError", str(exc))]
            return
        pod["status"]["podIP"] = "127.0.0.1"
        pod["status"]["podIPs"] = [{"ip": "127.0.0.1"}]
        for item in container.get("env") or []:  # status.podIP is known only now
            if (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
                env[item["name"]] = "127.0.0.1"
        pod_dir = self.root / pod["metadata"]["uid"]
        workdir = _translate(container.get("workingDir") or str(pod_dir), mounts)
        Path(workdir).mkdir(parents=True, exist_ok=True)
        log = pod_dir / "container.log"
        argv = [
            _translate(a, mounts) for a in (container.get("command") or []) + (container.get("args") or [])
        ]
        with open(log, "ab") as out:
            process = subprocess.Popen(
                argv,
                env={**self.images[image], **env},
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        started = now_rfc3339()
        self.containers[pod["metadata"]["uid"]] = Container(process, log, started)
        pod["status"].update({"phase": "Running", "startTime": started, "hostIP": "127.0.0.1"})
        self._condition(pod, "Ready", "True")
        pod["status"]["containerStatuses"] = [
            {
                **self._status_base(pod),
                "ready": True,
                "started": True,
                "state": {"running": {"startedAt": started}},
            }
        ]
        pod["metadata"]["resourceVersion"] = self.cluster.version()

    def _environment(self, pod: Obj, container: Obj) -> tuple[dict[str, str], dict[str, str]]:
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        mounts: dict[str, str] = {}
        volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            host = self.root / uid / "volumes" / mount["name"]
            host.mkdir(parents=True, exist_ok=True)
            if "secret" in volume:
                secret = self._secret(ns, volume["secret"]["secretName"])
                items = volume["secret"].get("items") or [
                    {"key": k, "path": k} for k in secret.get("data", {})
                ]
                for item in items:
                    (host / item["path"]).write_bytes(base64.b64decode(secret["data"][item["key"]]))
            mounts[mount["mountPath"].rstrip("/")] = str(host)
        env: dict[str, str] = {}
        fields = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": ns}
        for item in container.get("env") or []:
            source = item.get("valueFrom")
            if source is None:
                env[item["name"]] = _translate(item.get("value", ""), mounts)
            elif "secretKeyRef" in source:
                ref = source["secretKeyRef"]
                data = self._secret(ns, ref["name"]).get("data") or {}
                if ref["key"] not in data:
                    raise ContainerConfigError(f"couldn't find key {ref['key']} in Secret {ns}/{ref['name']}")
                env[item["name"]] = base64.b64decode(data[ref["key"]]).decode()
            elif "fieldRef" in source and source["fieldRef"]["fieldPath"] in fields:
                env[item["name"]] = fields[source["fieldRef"]["fieldPath"]]
        return env, mounts

    def _secret(self, ns: str, name: str) -> Obj:
        found = self.cluster.secrets.get((ns, name))
        if found is None:
            raise ContainerConfigError(f'secret "{name}" not found')
        return found

    def _watch(self, pod: Obj) -> None:
        container = self.containers.get(pod["metadata"]["uid"])
        if container is None or pod["status"]["phase"] != "Running":
            return
        code = container.process.poll()
        if code is None:
            return
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        self._condition(pod, "Ready", "False", "PodCompleted")
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "finishedAt": now_rfc3339(),
            "startedAt": container.started_at,
        }
        pod["status"]["containerStatuses"] = [
            {**self._status_base(pod), "ready": False, "started": False, "state": {"terminated": terminated}}
        ]
        pod["metadata"]["resourceVersion"] = self.cluster.version()

    def _stop_container(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]
        container = self.containers.get(uid)
        if container is not None and container.process.poll() is None:
            if container.kill_at is None:
                grace = pod["metadata"].get("deletionGracePeriodSeconds", 30)
                container.kill_at = time.monotonic() + float(grace)
                _signal_group(container.process, signal.SIGTERM)
                return
            if time.monotonic() < container.kill_at:
                return
            _signal_group(container.process, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                container.process.wait(timeout=1)
        if container is not None:
            _signal_group(container.process, signal.SIGKILL)  # what the container left behind
            self.containers.pop(uid, None)
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.cluster.pods.pop(key, None)
        # The garbage collector: what the pod owned goes with it.
        for skey, secret in list(self.cluster.secrets.items()):
            owners = secret["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners):
                del self.cluster.secrets[skey]

    # -- status pieces -------------------------------------------------------------------------
    @staticmethod
    def _status_base(pod: Obj) -> Obj:
        [container] = pod["spec"]["containers"]
        return {"name": container["name"], "image": container["image"], "imageID": "", "restartCount": 0}

    def _waiting(self, pod: Obj, reason: str, message: str) -> Obj:
        waiting = {"reason": reason, **({"message": message} if message else {})}
        return {**self._status_base(pod), "ready": False, "started": False, "state": {"waiting": waiting}}

    def _condition(self, pod: Obj, kind: str, value: str, reason: str = "", message: str = "") -> None:
        conditions = [c for c in pod["status"].get("conditions") or [] if c["type"] != kind]
        condition = {"type": kind, "status": value, "lastTransitionTime": now_rfc3339()}
        if reason:
            condition["reason"] = reason
        if message:
            condition["message"] = message
        pod["status"]["conditions"] = [*conditions, condition]
        pod["metadata"]["resourceVersion"] = self.cluster.version()


def _translate(value: str, mounts: dict[str, str]) -> str:
    """A container path under a volume's mountPath as the host folder behind it (no mount namespaces)."""
    for mount_path, host in sorted(mounts.items(), key=lambda m: -len(m[0])):
        if value == mount_path or value.startswith(mount_path + "/"):
            return host + value[len(mount_path) :]
    return value


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
