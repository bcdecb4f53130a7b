"""``client.online_endpoints`` and ``client.online_deployments`` (issue 14): the native REST of
online endpoints in the CLI v2 shapes, and ``invoke`` through the endpoint's scoring URI.

A deployment's local ``model`` path is uploaded first to the datastore (``LocalUpload/<hash>/<name>``:
the replica sees it as ``AZUREML_MODEL_DIR/<name>``, as on Azure) and its ``code_configuration.code``
folder as a code snapshot (``codes/<sha256>``), relative to the YAML file's folder or ``base_path``.
"""

from __future__ import annotations

import builtins
import copy
import json
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from cloudlet.client._rest import RestClient
from cloudlet.client.artifacts import upload_code, upload_data
from cloudlet.client.assets import inline_environment


def load_document(path: str | Path) -> dict[str, Any]:
    doc = yaml.safe_load(Path(path).read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path} does not hold a YAML mapping")
    return doc


class OnlineEndpointOperations:
    def __init__(self, rest: RestClient, scope: Any) -> None:
        self._rest = rest
        self._scope = scope

    def _path(self, name: str | None = None) -> str:
        base = f"{self._scope.ws_path()}/onlineEndpoints"
        return base if name is None else f"{base}/{name}"

    def create_or_update(self, endpoint: dict[str, Any]) -> dict[str, Any]:
        body = {k: v for k, v in endpoint.items() if k != "$schema"}
        return dict(self._rest.put(self._path(str(body.get("name"))), body))

    def get(self, name: str) -> dict[str, Any]:
        return dict(self._rest.get(self._path(name)))

    def list(self) -> builtins.list[dict[str, Any]]:
        return self._rest.list_values(self._path())

    def delete(self, name: str) -> None:
        self._rest.delete(self._path(name))

    def update_traffic(
        self, name: str, traffic: dict[str, int] | None = None, mirror_traffic: dict[str, int] | None = None
    ) -> dict[str, Any]:
        doc = {k: v for k, v in self.get(name).items() if k in ("name", "auth_mode", "description", "tags")}
        current = self.get(name)
        doc["traffic"] = current.get("traffic") or {} if traffic is None else traffic
        doc["mirror_traffic"] = (
            current.get("mirror_traffic") or {} if mirror_traffic is None else mirror_traffic
        )
        return self.create_or_update(doc)

    def get_keys(self, name: str) -> dict[str, Any]:
        """``{primaryKey, secondaryKey}`` (key auth) or ``{accessToken, expiryTimeUtc, …}`` (aml_token)."""
        endpoint = self.get(name)
        action = "listKeys" if endpoint.get("auth_mode") == "key" else "token"
        return dict(self._rest.post(f"{self._path(name)}/{action}"))

    def regenerate_keys(self, name: str, key_type: str = "Primary") -> None:
        self._rest.post(f"{self._path(name)}/regenerateKeys", {"keyType": key_type})

    def invoke(
        self,
        name: str,
        request: Any = None,
        *,
        request_file: str | Path | None = None,
        deployment_name: str | None = None,
        timeout: float = 60.0,
    ) -> httpx.Response:
        """POST the request (JSON, or the file's bytes) to the scoring URI with a key or token."""
        endpoint = self.get(name)
        keys = self.get_keys(name)
        credential = keys.get("primaryKey") or keys.get("accessToken")
        headers = {"Authorization": f"Bearer {credential}", "Content-Type": "application/json"}
        if deployment_name:
            from cloudlet.domain.endpoints.online_endpoints import PINNED_HEADER  # its models: not at import

            headers[PINNED_HEADER] = deployment_name
        if request_file is not None:
            content = Path(request_file).read_bytes()
        else:
            content = json.dumps(request).encode() if not isinstance(request, bytes) else request
        with httpx.Client(timeout=timeout, trust_env=False) as http:
            return http.post(endpoint["scoring_uri"], content=content, headers=headers)


class OnlineDeploymentOperations:
    def __init__(self, rest: RestClient, scope: Any) -> None:
        self._rest = rest
        self._scope = scope

    def _path(self, endpoint: str, name: str | None = None) -> str:
        base = f"{self._scope.ws_path()}/onlineEndpoints/{endpoint}/deployments"
        return base if name is None else f"{base}/{name}"

    def prepare(self, deployment: dict[str, Any], base_path: str | Path | None = None) -> dict[str, Any]:
        """Upload the local model and code, read a local ``conda_file`` into the inline
        environment; return the document to PUT."""
        body = {k: v for k, v in copy.deepcopy(deployment).items() if k != "$schema"}
        base = Path(base_path or Path.cwd())
        ws = self._scope.ws_path()
        model = body.get("model")
        if isinstance(model, dict) and isinstance(model.get("path"), str):
            model = model["path"]
        from cloudlet.domain.endpoints.online_endpoints import MODEL_PREFIXES  # its models: not at import

        if isinstance(model, str) and not model.startswith(MODEL_PREFIXES):
            # to LocalUpload/<hash>/<name>: the replica finds it at AZUREML_MODEL_DIR/<name>, as on Azure
            uri = upload_data(self._rest, ws, (base / model).resolve()).uri
            if isinstance(body["model"], dict):
                body["model"] = {**body["model"], "path": uri}
            else:
                body["model"] = uri
        config = body.get("code_configuration")
        if (
            isinstance(config, dict)
            and isinstance(config.get("code"), str)
            and not config["code"].startswith("codes/")
        ):
            config["code"] = upload_code(self._rest, ws, (base / config["code"]).resolve()).uri
        if isinstance(body.get("environment"), dict):  # a local conda_file (or build.path) inline
            inline_environment(body["environment"], base)
        return body

    def create_or_update(
        self, deployment: dict[str, Any], *, base_path: str | Path | None = None, local: bool = False
    ) -> dict[str, Any]:
        body = self.prepare(deployment, base_path)
        path = self._path(str(body.get("endpoint_name")), str(body.get("name")))
        params = {"local": "true"} if local else None
        return dict(self._rest.request("PUT", path, json=body, params=params))

    def get(self, endpoint: str, name: str) -> dict[str, Any]:
        return dict(self._rest.get(self._path(endpoint, name)))

    def list(self, endpoint: str) -> builtins.list[dict[str, Any]]:
        return self._rest.list_values(self._path(endpoint))

    def delete(self, endpoint: str, name: str) -> None:
        self._rest.delete(self._path(endpoint, name))

    def get_logs(self, endpoint: str, name: str, lines: int = 200) -> str:
        answer = self._rest.post(f"{self._path(endpoint, name)}/getLogs", {"tail": lines})
        return str(answer.get("content", "")) if isinstance(answer, dict) else ""

    def wait(
        self, endpoint: str, name: str, timeout: float = 180.0, generation: int | None = None
    ) -> dict[str, Any]:
        """Poll until the deployment (its GENERATION, when given) is Succeeded or Failed."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.get(endpoint, name)
            settled = found["provisioning_state"] in ("Succeeded", "Failed")
            if settled and (generation is None or found.get("generation") == generation):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"deployment {name} still {found['provisioning_state']} after {timeout:.0f} s"
                )
            time.sleep(0.25)
