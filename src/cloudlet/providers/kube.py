"""The Kubernetes provider: node pods made, listed and deleted with the official ``kubernetes``
client (``providers/kube_pods.py`` says what they look like; docs/providers.md, "Kubernetes").

Calls run on the provider's workers (``control/provider_work.py``), never on a pass; every one has
a timeout. The API client is built on first use, so a location can be stored and its provider
built without reaching the cluster. Errors from the API become ``ProviderError`` with Kubernetes'
own reason and message (``Forbidden: pods is forbidden: …``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cloudlet.providers import kube_pods as pods
from cloudlet.providers.base import Capacity, NodeHandle, NodeRequest, NodeStatus, ProviderError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterAccess:
    """How to reach the API server: a kubeconfig file (and a context in it), or the pod's own
    service account when the server runs inside the cluster."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    timeout_s: float = 10.0


def api_client(access: ClusterAccess) -> Any:
    """A ``kubernetes.client.ApiClient`` for ACCESS (its own configuration: the process-wide
    default is never touched, so two locations on two clusters do not mix)."""
    from kubernetes import client, config

    try:
        if access.in_cluster:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)
            return client.ApiClient(configuration)
        return config.new_client_from_config(config_file=access.kubeconfig, context=access.context)
    except (config.ConfigException, OSError, ValueError) as exc:
        where = "the in-cluster service account" if access.in_cluster else f"kubeconfig {access.kubeconfig}"
        raise ProviderError(f"cannot load {where}: {exc}") from exc


class KubernetesProvider:
    kind = "kubernetes"

    def __init__(
        self,
        settings: pods.PodSettings,
        access: ClusterAccess,
        installation_id: str = "",
        client_factory: Callable[[ClusterAccess], Any] = api_client,
    ) -> None:
        self.settings = settings
        self.access = access
        # Whose pods the capacity offer counts as this installation's own (not taken from it).
        self.installation_id = installation_id
        self._client_factory = client_factory
        self._lock = threading.Lock()
        self._core: Any = None

    # -- the provider protocol -----------------------------------------------------------------
    def create(self, req: NodeRequest) -> NodeHandle:
        ns, name = self.settings.namespace, pods.object_name(req.node_id)
        ca_pem = pods.read_ca(req)
        existing = self._get("pod", name)
        if existing is not None:
            handle = pods.handle_of(existing, req.installation_id)
            if handle is None:
                raise ProviderError(f"pod {ns}/{name} exists and is not this installation's node")
            pod = existing  # a retried create: the same pod; its Secret is made again below
        else:
            body = _model("V1Pod", pods.pod_manifest(req, self.settings))
            pod = self._call(
                "create pod",
                lambda core: core.create_namespaced_pod(ns, body, _request_timeout=self.access.timeout_s),
            )
        uid = (pod.get("metadata") or {}).get("uid")
        secret = pods.secret_manifest(req, self.settings, uid, ca_pem)
        try:
            self._put_secret(name, secret)
        except ProviderError:
            self._delete("pod", name)  # nothing half-made: a pod without its token never starts
            raise
        handle = pods.handle_of(pod, req.installation_id)
        assert handle is not None  # made with this installation's labels just now
        return handle

    def terminate(self, handle: NodeHandle) -> None:
        ref = handle.provider_ref
        name = str(ref.get("pod") or pods.object_name(handle.node_id))
        self._delete("pod", name)
        self._delete("secret", name)  # the garbage collector would too (its owner is the pod)

    def list_nodes(self, installation_id: str) -> list[NodeHandle]:
        selector = pods.installation_selector(installation_id)
        listed = self._call(
            "list pods",
            lambda core: core.list_namespaced_pod(
                self.settings.namespace, label_selector=selector, _request_timeout=self.access.timeout_s
            ),
        )
        found: dict[str, NodeHandle] = {}
        for pod in listed.get("items") or []:
            if (pod.get("status") or {}).get("phase") in pods.FINISHED_PHASES:
                continue  # its agent exited: the machine is gone (the node is lost, then deleted)
            handle = pods.handle_of(pod, installation_id)
            if handle is not None:
                found[handle.node_id] = handle
        return sorted(found.values(), key=lambda h: h.node_id)

    def node_status(self, handle: NodeHandle) -> NodeStatus:
        """Pending (with the scheduler's words, e.g. ``Unschedulable: 0/3 nodes are available``)
        while Kubernetes keeps the pod waiting, else running (``SupportsNodeStatus``)."""
        return NodeStatus(*pods.engine_status(handle.provider_ref))

    def capacity(self) -> Capacity:
        """Allocatable minus requested on the nodes the location's node selector picks."""
        selector = ",".join(f"{k}={v}" for k, v in sorted(self.settings.node_selector.items()))
        nodes = self._call(
            "list nodes",
            lambda core: core.list_node(label_selector=selector, _request_timeout=self.access.timeout_s),
        )
        running = self._call(
            "list pods in all namespaces",
            lambda core: core.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed",
                _request_timeout=self.access.timeout_s,
            ),
        )
        return pods.capacity_of(nodes.get("items") or [], running.get("items") or [], self.installation_id)

    # -- optional abilities --------------------------------------------------------------------
    def node_log(self, handle: NodeHandle, tail_bytes: int = 65536) -> str:
        name = str(handle.provider_ref.get("pod") or pods.object_name(handle.node_id))
        try:
            text = self._core_api().read_namespaced_pod_log(
                name,
                self.settings.namespace,
                container=pods.CONTAINER,
                limit_bytes=tail_bytes,
                _request_timeout=self.access.timeout_s,
            )
        except Exception:  # a log is a courtesy: no log is not an error
            return ""
        return str(text or "")

    # -- helpers -------------------------------------------------------------------------------
    def _core_api(self) -> Any:
        with self._lock:
            if self._core is None:
                from kubernetes import client

                self._core = client.CoreV1Api(self._client_factory(self.access))
            return self._core

    def _call(self, what: str, call: Callable[[Any], Any]) -> dict[str, Any]:
        """CALL on the CoreV1Api, its answer as the API's JSON; errors as ProviderError."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        core = self._core_api()
        try:
            answer = call(core)
        except ApiException as exc:
            raise ProviderError(f"Kubernetes refused to {what}: {api_error(exc)}") from exc
        except (HTTPError, OSError) as exc:
            raise ProviderError(f"cannot reach the Kubernetes API to {what}: {exc}") from exc
        body = core.api_client.sanitize_for_serialization(answer)
        return body if isinstance(body, dict) else {}

    def _get(self, kind: str, name: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        read = {"pod": "read_namespaced_pod", "secret": "read_namespaced_secret"}[kind]
        try:
            return self._call(
                f"read {kind} {name}",
                lambda core: getattr(core, read)(
                    name, self.settings.namespace, _request_timeout=self.access.timeout_s
                ),
            )
        except ProviderError as exc:
            if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
                return None
            raise

    def _put_secret(self, name: str, body: dict[str, Any]) -> None:
        """Make the node's Secret, or replace it (a retried create may carry a new token)."""
        from kubernetes.client.exceptions import ApiException

        ns = self.settings.namespace
        secret = _model("V1Secret", body)
        try:
            self._call(
                "create secret",
                lambda core: core.create_namespaced_secret(
                    ns, secret, _request_timeout=self.access.timeout_s
                ),
            )
        except ProviderError as exc:
            if not (isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 409):
                raise
            self._call(
                "replace secret",
                lambda core: core.replace_namespaced_secret(
                    name, ns, secret, _request_timeout=self.access.timeout_s
                ),
            )

    def _delete(self, kind: str, name: str) -> None:
        """Delete a pod or Secret; one that is gone already is done (terminate is idempotent)."""
        from kubernetes.client.exceptions import ApiException

        delete = {"pod": "delete_namespaced_pod", "secret": "delete_namespaced_secret"}[kind]
        try:
            self._call(
                f"delete {kind} {name}",
                lambda core: getattr(core, delete)(
                    name,
                    self.settings.namespace,
                    grace_period_seconds=pods.GRACE_S if kind == "pod" else None,
                    _request_timeout=self.access.timeout_s,
                ),
            )
        except ProviderError as exc:
            if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
                return
            raise


def _model(kind: str, body: dict[str, Any]) -> Any:
    """BODY (the API's JSON) as the client's model of KIND (its calls take models, not dicts)."""
    from kubernetes import client

    return getattr(client, kind).from_dict(body)


def api_error(exc: Any) -> str:
    """An ApiException as Kubernetes put it: ``<reason>: <message>`` from its Status body."""
    import json

    try:
        status: Mapping[str, Any] = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        status = {}
    reason = status.get("reason") or exc.reason or ""
    message = status.get("message") or ""
    return f"{exc.status} {reason}: {message}".strip(": ") if message else f"{exc.status} {reason}".strip()
