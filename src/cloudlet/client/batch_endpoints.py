"""Batch endpoints and deployments from Python, shaped like ``azure.ai.ml``'s
(``ml_client.batch_endpoints``, ``ml_client.batch_deployments``).

>>> from cloudlet.client import MLClient
>>> ml = MLClient()  # doctest: +SKIP
>>> ml.batch_endpoints.create_or_update({"name": "scorer"})  # doctest: +SKIP
>>> ml.batch_deployments.create_or_update(load_yaml("deployment.yml"), base_path=".")  # doctest: +SKIP
>>> job = ml.batch_endpoints.invoke("scorer", input="./rows", input_type="uri_folder")  # doctest: +SKIP
>>> ml.jobs.download(job.name, output_name="score")  # doctest: +SKIP

A deployment's local ``code_configuration.code`` (and a local ``model`` path) are uploaded first
(content-hashed, once); so is a local ``input`` of ``invoke``. An inline environment's local
``conda_file`` (or ``build.path``) is read and sent inline, as for environment assets.
"""

from __future__ import annotations

import builtins
import copy
from pathlib import Path
from typing import Any

import yaml

from cloudlet.client._rest import quote_segment
from cloudlet.client.artifacts import Upload, upload_code, upload_data
from cloudlet.client.assets import inline_environment
from cloudlet.client.entities import RestObject
from cloudlet.client.operations import _Operations
from cloudlet.domain.jobs.job_paths import is_remote_path


class BatchEndpoint(RestObject):
    """A batch endpoint as the server shows it (``name``, ``defaults``, ``scoring_uri``)."""


class BatchDeployment(RestObject):
    """A batch deployment as the server shows it."""


def _local(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (base / path)


class BatchEndpointOperations(_Operations):
    """``client.batch_endpoints``: create, read, update, delete, invoke, list_jobs."""

    def _path(self, name: str = "") -> str:
        base = f"{self._scope.ws_path()}/batchEndpoints"
        return f"{base}/{quote_segment(name)}" if name else base

    def create_or_update(self, endpoint: dict[str, Any]) -> BatchEndpoint:
        body = {k: v for k, v in endpoint.items() if k != "$schema"}
        return BatchEndpoint(self._rest.put(self._path(str(body["name"])), body))

    def get(self, name: str) -> BatchEndpoint:
        return BatchEndpoint(self._rest.get(self._path(name)))

    def list(self) -> builtins.list[BatchEndpoint]:
        return [BatchEndpoint(item) for item in self._rest.list_values(self._path())]

    def delete(self, name: str) -> None:
        self._rest.delete(self._path(name))

    def invoke(
        self,
        endpoint_name: str,
        *,
        input: str,
        input_type: str = "uri_folder",
        deployment_name: str | None = None,
        job_name: str | None = None,
        **overrides: Any,
    ) -> RestObject:
        """Score INPUT (a data asset ``azureml:d:1``, a datastore URI, or a local path: uploaded
        first); returns the batch job (a parent whose child's output ``score`` holds the rows).
        OVERRIDES (``mini_batch_size``, ``instance_count``, ``output_path``, ``output_file_name``,
        ``error_threshold``, ``retry_settings``) replace the deployment's for this job only."""
        value = input
        if not is_remote_path(value) and not value.startswith("azureml:"):
            value = upload_data(self._rest, self._scope.ws_path(), Path(value)).uri
        body = {
            **overrides,
            "input": value,
            "input_type": input_type,
            "deployment_name": deployment_name,
            "job_name": job_name,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return RestObject(self._rest.post(f"{self._path(endpoint_name)}/invoke", body))

    def list_jobs(self, endpoint_name: str) -> builtins.list[RestObject]:
        return [RestObject(item) for item in self._rest.list_values(f"{self._path(endpoint_name)}/jobs")]


class BatchDeploymentOperations(_Operations):
    """``client.batch_deployments``: create (uploading local code), read, update, delete."""

    last_uploads: builtins.list[Upload]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.last_uploads = []

    def _path(self, endpoint: str, name: str = "") -> str:
        base = f"{self._scope.ws_path()}/batchEndpoints/{quote_segment(endpoint)}/deployments"
        return f"{base}/{quote_segment(name)}" if name else base

    def create_or_update(
        self,
        deployment: dict[str, Any],
        *,
        endpoint_name: str | None = None,
        set_default: bool = False,
        base_path: str | Path | None = None,
    ) -> BatchDeployment:
        body = copy.deepcopy({k: v for k, v in deployment.items() if k != "$schema"})
        endpoint = endpoint_name or body.get("endpoint_name")
        if not endpoint or not body.get("name"):
            raise ValueError("a batch deployment needs a name and an endpoint_name (or --endpoint-name)")
        body["endpoint_name"] = endpoint
        base = Path(base_path or Path.cwd())
        ws = self._scope.ws_path()
        self.last_uploads = []
        if str(body.get("type") or "").lower() == "pipeline":  # a pipeline component's deployment
            body["component"] = self._pipeline_component(body.get("component"), base)
        code = (body.get("code_configuration") or {}).get("code")
        if isinstance(code, str) and not code.startswith("codes/") and not is_remote_path(code):
            upload = upload_code(self._rest, ws, _local(base, code))
            self.last_uploads.append(upload)
            body["code_configuration"]["code"] = upload.uri
        model = body.get("model")
        path = model.get("path") if isinstance(model, dict) else model
        if isinstance(path, str) and not path.startswith("azureml:") and not is_remote_path(path):
            # to LocalUpload/<hash>/<name>: AZUREML_MODEL_DIR/<name> for the script, as on Azure
            upload = upload_data(self._rest, ws, _local(base, path))
            self.last_uploads.append(upload)
            body["model"] = {**model, "path": upload.uri} if isinstance(model, dict) else upload.uri
        if isinstance(body.get("environment"), dict):  # a local conda_file (or build.path) inline
            inline_environment(body["environment"], base)
        path = self._path(str(endpoint), str(body["name"]))
        answer = self._rest.request(
            "PUT", path, json=body, params={"set_default": "true" if set_default else None}
        )
        return BatchDeployment(answer)

    def _pipeline_component(self, component: Any, base: Path) -> Any:
        """A pipeline deployment's ``component``: a local YAML file (or inline mapping) with its
        steps prepared as a pipeline's are (``prepare_pipeline``); a registered one as it is."""
        from cloudlet.client.pipelines import prepare_pipeline
        from cloudlet.domain.jobs.pipeline_dag import is_reference

        if isinstance(component, str) and not is_reference(component):
            path = _local(base, component.removeprefix("file:"))
            try:
                loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError) as exc:
                raise ValueError(f"component: cannot read {path}: {exc}") from None
            if not isinstance(loaded, dict):
                raise ValueError(f"component: {path} must hold a pipeline component mapping")
            loaded.pop("$schema", None)
            component, base = loaded, path.parent
        if isinstance(component, dict):
            return prepare_pipeline(
                self._rest, self._scope.ws_path(), component, base, self.last_uploads, check=False
            )
        return component

    def get(self, name: str, endpoint_name: str) -> BatchDeployment:
        return BatchDeployment(self._rest.get(self._path(endpoint_name, name)))

    def list(self, endpoint_name: str) -> builtins.list[BatchDeployment]:
        return [BatchDeployment(item) for item in self._rest.list_values(self._path(endpoint_name))]

    def delete(self, name: str, endpoint_name: str) -> None:
        self._rest.delete(self._path(endpoint_name, name))
