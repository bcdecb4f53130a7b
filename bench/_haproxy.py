"""HAProxy as the online gateway, driven by cloudlet's view of an endpoint (``online_gateway`` bench).

Issue 14 asks to choose the gateway by measurement: cloudlet's own async proxy
(``api/online_gateway.py``) or a real proxy driven by cloudlet. ``config()`` turns what cloudlet
knows of an endpoint (its path, keys, traffic weights, each deployment's ready replicas and
``request_settings``) into an HAProxy configuration with the same semantics where HAProxy has them:

- auth: the ``Authorization: Bearer <primary|secondary key>`` header, else 401 (``aml_token``'s
  expiring HMAC would need a Lua or SPOE check: not done here);
- the ``azureml-model-deployment`` header pins a deployment (404 for one the endpoint lacks), else
  one random draw per request (``rand(100)`` in a transaction variable) against the weights;
- backends = the deployment's ready replicas, round robin; none up → 503;
- more than 2 × ``max_concurrent_requests_per_instance`` × replicas in flight → 429 (``be_conn``);
- past ``request_timeout_ms`` → 408 (``timeout server`` + an ``errorfile`` for its 504);
- the model's non-200 → 424 with ``ms-azureml-model-error-statuscode`` / ``-reason``.
- ``mirror_traffic`` has no HAProxy 2.6 equivalent without an external SPOE agent
  (``spoa-mirror``): not done here (cloudlet's proxy does it).

``Haproxy`` runs the Debian ``haproxy`` binary (scripts/setup.sh installs it) in the foreground on
127.0.0.1 and stops it. Used by the bench only: HAProxy is not cloudlet's production path.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

PINNED_HEADER = "azureml-model-deployment"


@dataclass(frozen=True)
class Deployment:
    name: str
    ports: list[int]  # its ready replicas
    max_concurrent: int = 1
    timeout_ms: int = 5000


@dataclass(frozen=True)
class Endpoint:
    path: str  # /online/{sub}/{rg}/{ws}/{endpoint}/score
    keys: list[str]
    traffic: dict[str, int]
    deployments: list[Deployment] = field(default_factory=list)


def _json(code: str, message: str) -> str:
    # HAProxy's `string` argument in double quotes: escape its quotes
    return json.dumps(json.dumps({"error": {"code": code, "message": message}}))


def _return(status: int, code: str, message: str, condition: str, extra: str = "") -> str:
    return (
        f"    http-request return status {status} content-type application/json "
        f"string {_json(code, message)}{extra} {condition}"
    )


def config(endpoint: Endpoint, port: int, folder: Path, threads: int = 1) -> str:
    """The configuration text (errorfiles are written into FOLDER)."""
    names = [d.name for d in endpoint.deployments]
    lines = [
        "global",
        f"    nbthread {threads}",
        "    maxconn 4096",
        "defaults",
        "    mode http",
        "    timeout connect 2s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    option http-keep-alive",
        "frontend gateway",
        f"    bind 127.0.0.1:{port}",
        f"    acl scoring path {endpoint.path}",
        _return(404, "EndpointNotFound", "no such online endpoint", "unless scoring"),
        "    acl key_ok req.hdr(authorization) -m str " + " ".join(f'"Bearer {k}"' for k in endpoint.keys),
        _return(
            401,
            "Unauthorized",
            "a valid key is needed as 'Authorization: Bearer ...'",
            "unless key_ok",
            ' hdr WWW-Authenticate "Bearer"',
        ),
        f"    acl pinned req.hdr({PINNED_HEADER}) -m found",
    ]
    for name in names:
        lines.append(f"    acl pin_{name} req.hdr({PINNED_HEADER}) -m str {name}")
    lines.append(
        _return(
            404,
            "DeploymentNotFound",
            "the endpoint has no such deployment",
            "if pinned " + " ".join(f"!pin_{n}" for n in names),
        )
    )
    lines.append("    http-request set-var(txn.draw) rand(100)")
    low = 0
    chosen: list[tuple[str, str]] = []
    for d in endpoint.deployments:
        weight = endpoint.traffic.get(d.name, 0)
        if weight:
            lines.append(f"    acl draw_{d.name} var(txn.draw) -m int ge {low} lt {low + weight}")
            chosen.append((d.name, f"!pinned draw_{d.name}"))
            low += weight
    for d in endpoint.deployments:
        limit = 2 * d.max_concurrent * max(1, len(d.ports))
        route = [f"pin_{d.name}"] + ([c for n, c in chosen if n == d.name])
        lines.append(f"    acl full_{d.name} be_conn(be_{d.name}) ge {limit}")
        for cond in route:
            lines.append(
                _return(
                    429,
                    "TooManyRequests",
                    f"'{d.name}' has the most requests in flight its replicas take; retry",
                    f"if {cond} full_{d.name}",
                )
            )
            lines.append(f"    use_backend be_{d.name} if {cond}")
    # (http-request rules all run before use_backend: this one names what no backend takes)
    unrouted = " ".join(["!pinned", *(f"!draw_{n}" for n, _ in chosen)])
    lines.append(_return(404, "NoTraffic", "the endpoint sends no traffic", f"if {unrouted}"))
    for d in endpoint.deployments:
        errorfile = folder / f"408-{d.name}.http"
        body = json.dumps(
            {"error": {"code": "RequestTimeout", "message": "the model took longer than request_timeout_ms"}}
        )
        errorfile.write_text(
            "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}"
        )
        lines += [
            f"backend be_{d.name}",
            "    balance roundrobin",
            f"    timeout server {d.timeout_ms}ms",
            f"    errorfile 504 {errorfile}",
            "    http-request set-path /score",  # the replica serves /score, not the endpoint's path
            f"    http-response set-header {PINNED_HEADER} {d.name}",
            "    http-response set-header ms-azureml-model-error-statuscode %[status] unless { status 200 }",
            "    http-response set-header ms-azureml-model-error-reason model_error unless { status 200 }",
            "    http-response set-status 424 unless { status 200 }",
        ]
        lines += [f"    server r{i} 127.0.0.1:{p}" for i, p in enumerate(d.ports)]
    return "\n".join(lines) + "\n"


def binary() -> str | None:
    return shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)


class Haproxy:
    """``haproxy -db -f CONFIG`` on 127.0.0.1:PORT until ``stop()``."""

    def __init__(self, endpoint: Endpoint, port: int, folder: Path, threads: int = 1) -> None:
        exe = binary()
        if exe is None:
            raise FileNotFoundError("haproxy is not installed (scripts/setup.sh installs it)")
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "haproxy.cfg"
        path.write_text(config(endpoint, port, folder, threads))
        check = subprocess.run([exe, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy refused its configuration: {check.stdout}{check.stderr}")
        self.url = f"http://127.0.0.1:{port}{endpoint.path}"
        self.version = subprocess.run([exe, "-v"], capture_output=True, text=True).stdout.split("\n")[0]
        self.log = (folder / "haproxy.log").open("wb")
        self.proc = subprocess.Popen(
            [exe, "-db", "-f", str(path)], stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited ({self.proc.returncode}): see {folder}/haproxy.log")
            try:
                httpx.get(self.url, timeout=1, trust_env=False)
                return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("haproxy did not listen within 30 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
