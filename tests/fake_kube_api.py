"""A FAKE Kubernetes API server and a FAKE kubelet, for the tests of the Kubernetes provider.

No Kubernetes API server can run on these machines (no container runtime, no systemd), so this
stands in for one: a real HTTPS server speaking the part of the Kubernetes REST wire that the
official ``kubernetes`` client uses for node pods, written from the API reference —

- ``/api/v1/namespaces/{ns}`` (GET), ``/api/v1/nodes`` (GET, ``labelSelector``),
  ``/api/v1/pods`` (GET across namespaces, ``labelSelector``/``fieldSelector``);
- ``/api/v1/namespaces/{ns}/pods`` and ``…/secrets``: create (POST), list (GET, ``labelSelector``),
  and by name get (GET), delete (DELETE), replace (PUT, secrets); ``…/pods/{name}/log``;
- bearer-token authentication (401), ``Status`` bodies with Kubernetes' reasons and codes
  (``NotFound`` 404, ``AlreadyExists`` 409, ``Invalid`` 422, ``Unauthorized`` 401),
  ``resourceVersion``, ``uid``, ``creationTimestamp``, graceful deletion (``deletionTimestamp``
  while the container stops) and garbage collection of objects whose owner was deleted.

Behind it (tests/fake_kubelet.py) a FAKE scheduler binds pending pods to the fake nodes whose
labels match the pod's ``nodeSelector`` and whose allocatable CPU, memory and ``nvidia.com/gpu``
still fit its requests
(else the pod keeps a ``PodScheduled=False`` condition with reason ``Unschedulable`` and the
scheduler's message, ``0/2 nodes are available: …``), and a FAKE kubelet that runs a bound pod's
container command as a local process: images it does not know stay ``ErrImagePull``; env ``value``,
``secretKeyRef`` (``CreateContainerConfigError`` until the Secret exists) and ``fieldRef`` (the pod's
name, namespace and IP) are resolved; there are no mount namespaces, so an ``emptyDir`` or
``secret`` volume is a host folder and the container's paths under its ``mountPath`` (env values,
``workingDir``) are translated to it. A pod's IP is 127.0.0.1 (no pod network). The process exits:
phase ``Succeeded``/``Failed``; the pod is deleted: SIGTERM, SIGKILL after the grace period.

What it does not do: watches, patches, any other resource, admission, RBAC, quotas, real
isolation. The provider under test does not know it talks to a fake.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import yaml
from kubernetes.utils import parse_quantity

from cloudlet import tls
from tests.fake_kubelet import GPU, FakeCluster, FakeKubelet, Obj, now_rfc3339


def status_body(code: int, reason: str, message: str, name: str = "", kind: str = "") -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if name or kind:
        body["details"] = {"name": name, "kind": kind}
    return body


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, name: str = "", kind: str = "") -> None:
        super().__init__(message)
        self.body = status_body(code, reason, message, name, kind)
        self.code = code


def not_found(kind: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{kind} "{name}" not found', name, kind)


# -- selectors --------------------------------------------------------------------------------
def _lookup(obj: Obj, path: str) -> str | None:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return None if value is None else str(value)


def matches_labels(labels: dict[str, str], selector: str) -> bool:
    """Equality-based label selectors (``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``), comma = and."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def matches_fields(obj: Obj, selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        negate = "!=" in term
        key, value = re.split(r"!=|==|=", term, maxsplit=1)
        actual = _lookup(obj, key.strip()) or ""
        if (actual == value.strip()) == negate:
            return False
    return True


# -- the REST wire ----------------------------------------------------------------------------
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_ROUTES = [
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)$"), "namespace"),
    (re.compile(r"^/api/v1/nodes$"), "nodes"),
    (re.compile(r"^/api/v1/pods$"), "all_pods"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods|secrets)$"), "collection"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/(?P<kind>pods|secrets)/(?P<name>[^/]+)$"), "item"),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$"), "log"),
]
_KIND = {"pods": "Pod", "secrets": "Secret"}


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the tests read .calls
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        fake = self.server.fake
        fake.cluster.calls.append((method, url.path))
        try:
            if self.headers.get("Authorization") != f"Bearer {fake.token}":
                raise ApiError(401, "Unauthorized", "Unauthorized")
            body = json.loads(raw) if raw else {}
            for pattern, route in _ROUTES:
                match = pattern.match(unquote(url.path))
                if match:
                    answer = getattr(fake, f"_{route}")(method, query, body, **match.groupdict())
                    break
            else:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
        except ApiError as exc:
            self._send(exc.code, exc.body)
            return
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, status_body(400, "BadRequest", f"the request could not be read: {exc}"))
            return
        code, payload = answer
        self._send(code, payload)

    def _send(self, code: int, payload: Obj | str) -> None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain" if isinstance(payload, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeKubeApiServer


class FakeKubeApiServer:
    """A FAKE Kubernetes API server on 127.0.0.1 over HTTPS, with its fake scheduler and kubelet.

    ``images`` maps the image names the fake kubelet "has" to the environment the image would
    give its containers (PATH to a Python with cloudlet installed, for the agent's image)."""

    def __init__(self, root: Path, images: dict[str, dict[str, str]], token: str = "fake-kube-token") -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.cluster = FakeCluster()
        self.kubelet = FakeKubelet(self.cluster, self.root / "pods", images)
        self.tls = tls.ensure(self.root, "127.0.0.1", "fake-kube-api")
        self._http = _HttpServer(("127.0.0.1", 0), _Handler)
        self._http.fake = self
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.tls.cert, self.tls.key)
        self._http.socket = context.wrap_socket(self._http.socket, server_side=True)
        self._thread = threading.Thread(target=self._http.serve_forever, name="fake-kube-api", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> FakeKubeApiServer:
        self._thread.start()
        self.kubelet.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self.kubelet.stop()

    def write_kubeconfig(self, path: Path, context: str = "fake", namespace: str = "default") -> Path:
        """A kubeconfig for this server, as ``kind`` or ``minikube`` would write one."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "fake-cluster",
                    "cluster": {"server": self.url, "certificate-authority": str(self.tls.ca)},
                }
            ],
            "users": [{"name": "fake-admin", "user": {"token": self.token}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": "fake-cluster", "user": "fake-admin", "namespace": namespace},
                }
            ],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- what tests look at --------------------------------------------------------------------
    def pods(self, namespace: str | None = None) -> list[Obj]:
        with self.cluster.lock:
            return [
                json.loads(json.dumps(p))
                for (ns, _), p in sorted(self.cluster.pods.items())
                if namespace in (None, ns)
            ]

    def secrets(self, namespace: str | None = None) -> list[Obj]:
        with self.cluster.lock:
            return [
                json.loads(json.dumps(s))
                for (ns, _), s in sorted(self.cluster.secrets.items())
                if namespace in (None, ns)
            ]

    def run_pod(
        self,
        namespace: str,
        name: str,
        cpu: str,
        memory: str,
        node: str,
        labels: dict[str, str] | None = None,
    ) -> None:
        """Someone else's pod, bound to NODE, holding its requests (capacity tests)."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {
                "nodeName": node,
                "containers": [
                    {"name": "c", "image": "other", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
                ],
            },
            "status": {"phase": "Running"},
        }
        with self.cluster.lock:
            self.cluster.pods[(namespace, name)] = self.cluster.stamp(pod, namespace)

    # -- routes --------------------------------------------------------------------------------
    def _namespace(self, method: str, query: dict[str, str], body: Obj, ns: str) -> tuple[int, Obj]:
        if method != "GET":
            raise ApiError(
                405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
            )
        if ns not in self.cluster.namespaces:
            raise not_found("namespaces", ns)
        return 200, {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }

    def _nodes(self, method: str, query: dict[str, str], body: Obj) -> tuple[int, Obj]:
        with self.cluster.lock:
            items = [
                n
                for n in self.cluster.nodes.values()
                if matches_labels(n["metadata"].get("labels") or {}, query.get("labelSelector", ""))
            ]
            return 200, self._list("NodeList", items)

    def _all_pods(self, method: str, query: dict[str, str], body: Obj) -> tuple[int, Obj]:
        with self.cluster.lock:
            return 200, self._list("PodList", self._select(self.cluster.pods.values(), query))

    def _collection(
        self, method: str, query: dict[str, str], body: Obj, ns: str, kind: str
    ) -> tuple[int, Obj]:
        store = self.cluster.pods if kind == "pods" else self.cluster.secrets
        with self.cluster.lock:
            if ns not in self.cluster.namespaces:
                raise not_found("namespaces", ns)
            if method == "GET":
                items = self._select((o for (n, _), o in store.items() if n == ns), query)
                return 200, self._list(f"{_KIND[kind]}List", items)
            if method != "POST":
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            obj = self._validated(kind, body, ns)
            name = obj["metadata"]["name"]
            if (ns, name) in store:
                raise ApiError(409, "AlreadyExists", f'{kind} "{name}" already exists', name, kind)
            if kind == "pods":
                obj["status"] = {"phase": "Pending", "qosClass": _qos(obj)}
            store[(ns, name)] = self.cluster.stamp(obj, ns)
            return 201, json.loads(json.dumps(obj))

    def _item(
        self, method: str, query: dict[str, str], body: Obj, ns: str, kind: str, name: str
    ) -> tuple[int, Obj]:
        store = self.cluster.pods if kind == "pods" else self.cluster.secrets
        with self.cluster.lock:
            found = store.get((ns, name))
            if found is None:
                raise not_found(kind, name)
            if method == "GET":
                return 200, json.loads(json.dumps(found))
            if method == "PUT" and kind == "secrets":
                obj = self._validated(kind, body, ns)
                if obj["metadata"]["name"] != name:
                    raise ApiError(
                        400, "BadRequest", "the name of the object does not match the name on the URL"
                    )
                obj["metadata"]["uid"] = found["metadata"]["uid"]
                obj["metadata"]["creationTimestamp"] = found["metadata"]["creationTimestamp"]
                store[(ns, name)] = self.cluster.stamp(obj, ns)
                return 200, json.loads(json.dumps(obj))
            if method != "DELETE":
                raise ApiError(
                    405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
                )
            if kind == "secrets":
                del store[(ns, name)]
                details = {"name": name, "kind": kind, "uid": found["metadata"]["uid"]}
                return 200, {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details,
                }
            asked = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
            default = found["spec"].get("terminationGracePeriodSeconds", 30)
            grace = int(asked) if asked is not None else int(default)
            meta = found["metadata"]
            if not meta.get("deletionTimestamp"):
                meta["deletionTimestamp"] = now_rfc3339()
                meta["deletionGracePeriodSeconds"] = grace
                meta["resourceVersion"] = self.cluster.version()
            if not found["spec"].get("nodeName"):
                store.pop((ns, name), None)  # never scheduled: nothing to stop
            return 200, json.loads(json.dumps(found))

    def _log(self, method: str, query: dict[str, str], body: Obj, ns: str, name: str) -> tuple[int, str]:
        with self.cluster.lock:
            pod = self.cluster.pods.get((ns, name))
            if pod is None:
                raise not_found("pods", name)
            container = self.kubelet.containers.get(pod["metadata"]["uid"])
        if container is None:
            raise ApiError(400, "BadRequest", f'container "agent" in pod "{name}" is waiting to start')
        data = container.log.read_bytes()
        limit = int(query.get("limitBytes") or 0)
        return 200, (data[-limit:] if limit else data).decode("utf-8", "replace")

    # -- helpers -------------------------------------------------------------------------------
    def _list(self, kind: str, items: list[Obj]) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": {"resourceVersion": self.cluster.version()},
            "items": json.loads(json.dumps(items)),
        }

    @staticmethod
    def _select(objs: Any, query: dict[str, str]) -> list[Obj]:
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        return [
            o
            for o in objs
            if matches_labels(o["metadata"].get("labels") or {}, labels) and matches_fields(o, fields)
        ]

    @staticmethod
    def _validated(kind: str, body: Obj, ns: str) -> Obj:
        """What the API server's validation would refuse, refused as it would (422 Invalid)."""
        if body.get("kind") not in (None, _KIND[kind]):
            raise ApiError(400, "BadRequest", f"the kind {body.get('kind')} does not match {_KIND[kind]}")
        meta = body.get("metadata") or {}
        name = meta.get("name") or ""
        problems = []
        if not name or len(name) > 253 or not _NAME.match(name):
            problems.append(
                f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of "
                "lower case alphanumeric characters, '-' or '.'"
            )
        if meta.get("namespace") not in (None, ns):
            problems.append(
                "metadata.namespace: Invalid value: the namespace of the object does not match the "
                "namespace on the request"
            )
        for value in (meta.get("labels") or {}).values():
            if len(str(value)) > 63:
                problems.append(
                    f"metadata.labels: Invalid value: {value!r}: must be no more than 63 characters"
                )
        if kind == "pods":
            containers = (body.get("spec") or {}).get("containers") or []
            if not containers:
                problems.append("spec.containers: Required value")
            for i, container in enumerate(containers):
                if not container.get("image"):
                    problems.append(f"spec.containers[{i}].image: Required value")
                for key, value in ((container.get("resources") or {}).get("requests") or {}).items():
                    limit = ((container.get("resources") or {}).get("limits") or {}).get(key)
                    if limit is not None and Decimal(parse_quantity(value)) > Decimal(parse_quantity(limit)):
                        problems.append(
                            f"spec.containers[{i}].resources.requests: Invalid value: {value!r}: "
                            f"must be less than or equal to {key} limit"
                        )
        if problems:
            message = f'{_KIND[kind]} "{name}" is invalid: ' + ", ".join(problems)
            raise ApiError(422, "Invalid", message, name, kind)
        return json.loads(json.dumps(body))


def _qos(pod: Obj) -> str:
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        if resources.get("requests") != {
            k: v for k, v in (resources.get("limits") or {}).items() if k != GPU
        }:
            return "Burstable"
    return "Guaranteed"
