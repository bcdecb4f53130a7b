"""Helpers for the compute-instance tests and bench: operations, a kernel driven through the proxy,
principals made through the admin API, a hand-made wheel (pip installs it offline)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import time
import uuid
import zipfile
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

from tests.conftest import RunningServer

INSTANCE: dict[str, Any] = {"type": "computeinstance", "size": "Standard_DS3_v2"}
OP_TIMEOUT_S = 180  # JupyterLab starts in 2–5 s alone; a loaded 2-core CI machine is slower


def compute_url(srv: RunningServer, name: str) -> str:
    return f"{srv.ws_path}/computes/{name}"


def operate(api: httpx.Client, srv: RunningServer, response: httpx.Response) -> dict[str, Any]:
    assert response.status_code in (200, 201, 202), response.text
    op = srv.wait_operation(api, response.headers["Operation-Location"], timeout=OP_TIMEOUT_S)
    assert op["status"] == "Succeeded", json.dumps(op, indent=1)[:6000]
    return op


def create_instance(api: httpx.Client, srv: RunningServer, name: str, **extra: Any) -> dict[str, Any]:
    operate(api, srv, api.put(compute_url(srv, name), json={**INSTANCE, **extra}))
    shown: dict[str, Any] = api.get(compute_url(srv, name)).json()
    return shown


def act(api: httpx.Client, srv: RunningServer, name: str, action: str) -> dict[str, Any]:
    return operate(api, srv, api.post(f"{compute_url(srv, name)}/{action}"))


def delete_instance(api: httpx.Client, srv: RunningServer, name: str) -> dict[str, Any]:
    return operate(api, srv, api.delete(compute_url(srv, name)))


def live_nodes(api: httpx.Client, srv: RunningServer, name: str) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = api.get(f"{compute_url(srv, name)}/nodes").json()["nodes"]
    return [n for n in nodes if n["state"] not in ("terminated",)]


def new_user(api: httpx.Client, srv: RunningServer, name: str, role: str | None) -> str:
    """A principal with an API key (and a role on the default workspace, if given)."""
    assert api.post("/api/v1/principals", json={"name": name}).status_code == 201
    key: str = api.post(f"/api/v1/principals/{name}/keys").json()["api_key"]
    if role:
        response = api.put(f"{srv.ws_path}/roleAssignments/{name}", json={"role": role})
        assert response.status_code == 200, response.text
    return key


def app_url(srv: RunningServer, name: str, path: str = "") -> str:
    return f"{srv.endpoint}/instances/{name}/jupyterlab/{path}"


# -- code in a kernel, through the proxy --------------------------------------------------------
class Kernel:
    """A kernel of the instance's Jupyter server, started and spoken to through cloudlet's proxy
    (HTTP for the kernel, the WebSocket for its channels)."""

    def __init__(
        self, srv: RunningServer, name: str, key: str | None = None, notebook: str | None = None
    ) -> None:
        """``notebook``: open the kernel as that notebook's session (as JupyterLab does)."""
        self.headers = {"Authorization": f"Bearer {key or srv.api_key}"}
        self.http = httpx.Client(headers=self.headers, timeout=60)
        self.base = app_url(srv, name)
        if notebook:
            session = {"path": notebook, "name": notebook, "type": "notebook", "kernel": {"name": "python3"}}
            response = self.http.post(self.base + "api/sessions", json=session)
            assert response.status_code == 201, response.text
            self.id = response.json()["kernel"]["id"]
        else:
            response = self.http.post(self.base + "api/kernels", json={"name": "python3"})
            assert response.status_code == 201, response.text
            self.id = response.json()["id"]
        ws_base = self.base.replace("http://", "ws://", 1)
        self._stack = contextlib.ExitStack()
        self.ws = self._stack.enter_context(
            connect(
                f"{ws_base}api/kernels/{self.id}/channels?session_id={uuid.uuid4().hex}",
                additional_headers=self.headers,
                max_size=None,
                open_timeout=30,
            )
        )

    def send(self, code: str) -> str:
        """Start executing ``code`` without waiting; return the request's id."""
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps(_execute_request(msg_id, code)))
        return msg_id

    def run(self, code: str, timeout: float = 120) -> str:
        """Execute ``code``; return its stdout; raise with the traceback if it fails."""
        msg_id = self.send(code)
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                raise AssertionError("\n".join(content.get("traceback", [])) or content)
            elif kind == "status" and content.get("execution_state") == "idle":
                return "".join(out)

    def close(self) -> None:
        self._stack.close()
        self.http.delete(self.base + f"api/kernels/{self.id}")
        self.http.close()

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _execute_request(msg_id: str, code: str) -> dict[str, Any]:
    return {
        "header": {
            "msg_id": msg_id,
            "msg_type": "execute_request",
            "username": "test",
            "session": uuid.uuid4().hex,
            "version": "5.3",
            "date": "",
        },
        "parent_header": {},
        "metadata": {},
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
            "stop_on_error": True,
        },
        "channel": "shell",
        "buffers": [],
    }


# -- a package pip installs offline -------------------------------------------------------------
def make_wheel(directory: Path, name: str = "cloudlet_probe", version: str = "1.0", value: int = 42) -> Path:
    """A minimal pure-Python wheel (module ``name`` with ``VALUE = value``)."""
    dist = f"{name}-{version}"
    files = {
        f"{name}.py": f"VALUE = {value}\n".encode(),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}.dist-info/RECORD,,")
    wheel = directory / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr(f"{dist}.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel
