"""Batch endpoints and their deployments in the CLI v2 YAML shapes (pure).

``batchEndpoint`` (a name and the deployment ``invoke`` uses by default) and ``modelBatchDeployment``
(a model, a scoring script with ``init()`` and ``run(mini_batch)``, an environment, a cluster and the
mini-batch settings). ``scoring_job`` turns an invocation into the document of a ``batch_scoring``
parent job (``domain.endpoints.batch_scoring``) whose one child, ``score``, runs cloudlet's driver
(``cloudlet/nodekit/batch_driver.py``, shipped in the child's code snapshot) on the deployment's
cluster; the child's output named ``score`` holds the combined predictions.
"""

from __future__ import annotations

import re
import shlex
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cloudlet.domain.assets.asset_refs import short_datastore_uri
from cloudlet.domain.endpoints import mlflow_models
from cloudlet.domain.errors import CloudletError, validation_error

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9-]{2,31}$")
NAME_RULE = "3-32 characters: a letter first, then letters, digits and '-'"
DRIVER_FILE = "_cloudlet_batch_driver.py"  # added beside the scoring script in the child's code
OUTPUT_NAME = "score"  # the child's output, as the SDK's jobs.download(output_name="score") expects
# The child's own default output folder (``azureml/<child>/score/``, the child being ``<job>-score``):
# where the SDK's ``jobs.download(child, output_name="score")`` looks, and the parent's ``score`` too.
SCORE_PATH = "azureml://datastores/workspaceblobstore/paths/azureml/{job}-score/score/"
MAX_JOB_NAME = 120  # so that ``<job>-score`` is a job name as it is (``jobs.name`` holds 128)
THRESHOLD_EXIT = 3  # the driver's exit code when more mini-batches failed than error_threshold allows


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _name(value: str | None) -> str | None:
    if value is not None and not NAME_PATTERN.fullmatch(value):
        raise ValueError(f"name must be {NAME_RULE}")
    return value


class EndpointDefaults(_Strict):
    deployment_name: str | None = None


class BatchEndpointSpec(_Strict):
    schema_: str | None = Field(default=None, alias="$schema")
    name: str | None = Field(default=None, json_schema_extra={"pattern": NAME_PATTERN.pattern})
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    auth_mode: Literal["aad_token"] = "aad_token"
    defaults: EndpointDefaults = Field(default_factory=EndpointDefaults)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        return _name(value)

    @field_validator("auth_mode", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class CodeConfiguration(_Strict):
    code: str = Field(min_length=1, max_length=2048)
    scoring_script: str = Field(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9_./-]+\.py$")

    @field_validator("scoring_script")
    @classmethod
    def _relative(cls, value: str) -> str:
        if value.startswith("/") or ".." in value.split("/"):
            raise ValueError("scoring_script is a path inside code (no leading '/', no '..')")
        return value


class RetrySettings(_Strict):
    max_retries: int = Field(default=3, ge=0, le=100)
    timeout: int = Field(default=30, ge=1, le=86_400)  # seconds a mini-batch's run() may take


class DeploymentResources(_Strict):
    instance_count: int = Field(default=1, ge=1, le=1000)


MODEL_TYPES = ("custom_model", "mlflow_model", "triton_model")
# ``settings:`` of today's modelBatchDeployment YAML: the same fields the older shape gave at the top.
SETTINGS_FIELDS = (
    "max_concurrency_per_instance",
    "mini_batch_size",
    "output_action",
    "output_file_name",
    "retry_settings",
    "error_threshold",
    "logging_level",
    "environment_variables",
)


class InlineModel(_Strict):
    """``model: {name, path, type}``: a local folder the CLI uploads (registered anonymously on
    Azure); ``type: mlflow_model`` lets the deployment go without a scoring script."""

    name: str | None = Field(default=None, max_length=255)
    version: str | int | None = None
    path: str = Field(min_length=1, max_length=2048)
    type: Literal["custom_model", "mlflow_model", "triton_model"] = "custom_model"
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)


class BatchDeploymentSpec(_Strict):
    schema_: str | None = Field(default=None, alias="$schema")
    name: str | None = None
    endpoint_name: str | None = None
    type: Literal["model"] = "model"
    description: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    model: str | InlineModel | None = Field(default=None)
    # What the model is (set from an inline model's type, or by the service from a registered
    # model's): an ``mlflow_model`` needs no code_configuration (cloudlet's MLflow scorer runs it).
    model_type: Literal["custom_model", "mlflow_model", "triton_model"] | None = None
    code_configuration: CodeConfiguration | None = None
    environment: str | dict[str, Any] | None = None  # None: the cluster's default Python
    compute: str = Field(min_length=1, max_length=255)
    resources: DeploymentResources = Field(default_factory=DeploymentResources)
    instance_count: int | None = Field(default=None, ge=1, le=1000)
    mini_batch_size: int = Field(default=10, ge=1, le=100_000)
    max_concurrency_per_instance: int = Field(default=1, ge=1, le=256)
    retry_settings: RetrySettings = Field(default_factory=RetrySettings)
    error_threshold: int = Field(default=-1, ge=-1)
    logging_level: Literal["debug", "info", "warning"] = "info"
    output_action: Literal["append_row", "summary_only"] = "append_row"
    output_file_name: str = Field(default="predictions.csv", pattern=r"^[A-Za-z0-9_.-]{1,255}$")
    environment_variables: dict[str, str] = Field(default_factory=dict)
    # Today's shape: the mini-batch fields above under ``settings:`` (SETTINGS_FIELDS); parse_deployment
    # moves them to the top before validating, so a stored document never has it.
    settings: dict[str, Any] | None = None

    @field_validator("name", "endpoint_name")
    @classmethod
    def _check_name(cls, value: str | None) -> str | None:
        return _name(value)

    @field_validator("output_action", "logging_level", "type", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        """``AppendRow`` (ARM's spelling) is ``append_row``; case does not matter."""
        return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", value).lower() if isinstance(value, str) else value

    @field_validator("compute")
    @classmethod
    def _cluster(cls, value: str) -> str:
        return value.removeprefix("azureml:")

    @field_validator("model")
    @classmethod
    def _model_length(cls, value: str | InlineModel | None) -> str | InlineModel | None:
        if isinstance(value, str) and not 0 < len(value) <= 2048:
            raise ValueError("model is azureml:<name>:<version>, a datastore path or a local path")
        return value

    @model_validator(mode="after")
    def _count(self) -> BatchDeploymentSpec:
        if self.instance_count is not None:  # the older top-level spelling wins over resources
            self.resources = DeploymentResources(instance_count=self.instance_count)
            self.instance_count = None
        return self


def _parse(model: type[BaseModel], doc: Any, what: str) -> BaseModel:
    if not isinstance(doc, dict):
        raise validation_error("", f"a {what} is a mapping (YAML or JSON object)")
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise validation_error(field, f"{what}: {field}: {first['msg']}") from None


def parse_endpoint(doc: Any, name: str | None = None) -> dict[str, Any]:
    """Validate a batch endpoint document; its stored form (the name given wins over the body's)."""
    spec = _parse(BatchEndpointSpec, doc, "batch endpoint")
    stored = spec.model_dump(mode="json", exclude_none=True, by_alias=True)
    stored.pop("$schema", None)
    if name is not None:
        _check_path_name(name, stored.get("name"), "name")
        stored["name"] = name
    return stored


def _flatten_settings(doc: Any) -> Any:
    """Today's shape (``settings: {mini_batch_size, …}``) as the stored, flat one."""
    if not isinstance(doc, dict) or "settings" not in doc:
        return doc
    settings = doc["settings"] if doc["settings"] is not None else {}
    if not isinstance(settings, dict):
        raise validation_error("settings", "settings is a mapping (mini_batch_size, retry_settings, …)")
    for key in settings:
        if key not in SETTINGS_FIELDS:
            raise validation_error(
                f"settings.{key}",
                f"settings.{key} is not a batch deployment setting; known: {', '.join(SETTINGS_FIELDS)}",
            )
        if key in doc:
            raise validation_error(
                f"settings.{key}", f"{key} is given both at the top and under settings: give it once"
            )
    return {**{k: v for k, v in doc.items() if k != "settings"}, **settings}


def parse_deployment(doc: Any, endpoint: str | None = None, name: str | None = None) -> dict[str, Any]:
    """Validate a batch deployment document (the older flat shape or today's ``settings:``); its
    stored form: flat, ``model`` a string (an inline model's path; its type as ``model_type``)."""
    spec = _parse(BatchDeploymentSpec, _flatten_settings(doc), "batch deployment")
    stored = spec.model_dump(mode="json", exclude_none=True, by_alias=True)
    stored.pop("$schema", None)
    model = stored.get("model")
    if isinstance(model, dict):
        stored["model"] = model["path"]
        stored.setdefault("model_type", model.get("type") or "custom_model")
    if not stored.get("code_configuration") and not stored.get("model"):
        raise validation_error(
            "code_configuration",
            "code_configuration is required (code and scoring_script), unless the deployment's model "
            "is an MLflow model (type: mlflow_model), which cloudlet scores with its own flavor",
        )
    if name is not None:
        _check_path_name(name, stored.get("name"), "name")
        stored["name"] = name
    if endpoint is not None:
        _check_path_name(endpoint, stored.get("endpoint_name"), "endpoint_name")
        stored["endpoint_name"] = endpoint
    return stored


def _check_path_name(given: str, body: Any, field: str) -> None:
    if not NAME_PATTERN.fullmatch(given):
        raise validation_error(field, f"{field} must be {NAME_RULE}")
    if body is not None and body != given:
        raise validation_error(field, f"the body's {field} {body!r} differs from the path's {given!r}")


def deployment_for(endpoint: dict[str, Any], wanted: str | None, names: list[str]) -> str:
    """The deployment an invocation runs: the one named, else the endpoint's default."""
    chosen = wanted or (endpoint.get("defaults") or {}).get("deployment_name")
    if not chosen:
        raise validation_error(
            "deployment_name",
            f"batch endpoint '{endpoint['name']}' has no default deployment; pass --deployment-name "
            "or set one (cloudlet batch-deployment create --set-default)",
        )
    if chosen not in names:
        raise CloudletError(
            code="ResourceNotFound",
            message=f"batch endpoint '{endpoint['name']}' has no deployment '{chosen}' "
            f"(it has: {', '.join(names) or 'none'})",
            target="deployment_name",
            status=404,
        )
    return str(chosen)


def driver_command(deployment: dict[str, Any]) -> str:
    """The child's command: cloudlet's driver over ``inputs.data`` into ``outputs.score``."""
    retry = deployment.get("retry_settings") or {}
    # no code_configuration: an MLflow model, scored by cloudlet's MLflow scorer
    script = (deployment.get("code_configuration") or {}).get("scoring_script") or mlflow_models.SCRIPT_NAME
    args = [
        "python",
        DRIVER_FILE,
        "--input",
        "${{inputs.data}}",
        "--output",
        "${{outputs.score}}",
        "--scoring-script",
        shlex.quote(script),
        "--mini-batch-size",
        str(deployment.get("mini_batch_size", 10)),
        "--max-concurrency",
        str(deployment.get("max_concurrency_per_instance", 1)),
        "--max-retries",
        str(retry.get("max_retries", 3)),
        "--timeout",
        str(retry.get("timeout", 30)),
        "--error-threshold",
        str(deployment.get("error_threshold", -1)),
        "--output-action",
        str(deployment.get("output_action", "append_row")),
        "--output-file-name",
        shlex.quote(str(deployment.get("output_file_name", "predictions.csv"))),
        "--logging-level",
        str(deployment.get("logging_level", "info")),
    ]
    if deployment.get("model"):
        args += ["--model-dir", "${{inputs.model}}"]
    return " ".join(args)


def scoring_job(
    endpoint: str,
    deployment: dict[str, Any],
    data: dict[str, Any],
    code: str,
    job_name: str,
    output_path: str | None = None,
) -> dict[str, Any]:
    """The ``batch_scoring`` parent job of one invocation. DATA is the input (``type``, ``path``),
    CODE the child's snapshot (the scoring code with the driver added); DEPLOYMENT's settings are
    those this job runs (``with_overrides``); OUTPUT_PATH, a datastore folder, replaces the job's own."""
    inputs: dict[str, Any] = {"data": data}
    if deployment.get("model"):
        model = str(deployment["model"])
        # A registered model (azureml:m:1, or its ARM id) is a model input; a datastore or web path a folder.
        kind = "uri_folder" if re.match(r"^(azureml://|https?://)", model) else "custom_model"
        inputs["model"] = {"type": kind, "path": model}
    # One folder: the parent's ``score`` and its child's are the same files.
    score = {"type": "uri_folder", "path": output_path or SCORE_PATH.format(job=job_name)}
    child: dict[str, Any] = {
        "type": "command",
        "display_name": f"{job_name}-{OUTPUT_NAME}",
        "command": driver_command(deployment),
        "code": code,
        "compute": deployment["compute"],
        "inputs": inputs,
        "outputs": {OUTPUT_NAME: score},
        "resources": {"instance_count": 1},
        "environment_variables": dict(deployment.get("environment_variables") or {}),
    }
    if deployment.get("environment"):
        child["environment"] = deployment["environment"]
    return {
        "type": "batch_scoring",
        "name": job_name,
        "display_name": job_name,
        "tags": {"batch_endpoint": endpoint, "batch_deployment": str(deployment["name"])},
        "compute": deployment["compute"],
        "endpoint": endpoint,
        "deployment": str(deployment["name"]),
        "inputs": {"data": data},
        "outputs": {OUTPUT_NAME: score},
        # what this job ran with: the deployment's mini-batch settings, overridden or not
        "settings": {
            "mini_batch_size": deployment.get("mini_batch_size", 10),
            "instance_count": (deployment.get("resources") or {}).get("instance_count", 1),
            "error_threshold": deployment.get("error_threshold", -1),
            "output_file_name": deployment.get("output_file_name", "predictions.csv"),
            "retry_settings": dict(deployment.get("retry_settings") or {}),
        },
        "child": child,
    }


class InvokeRetry(_Strict):
    max_retries: int | None = Field(default=None, ge=0, le=100)
    timeout: int | None = Field(default=None, ge=1, le=86_400)


OUTPUT_PATH = re.compile(r"^azureml://datastores/([A-Za-z0-9_.-]+)/paths/(.+)$")
OVERRIDES = ("mini_batch_size", "instance_count", "error_threshold", "output_file_name", "retry_settings")


class InvokeRequest(_Strict):
    """``POST …/batchEndpoints/{e}/invoke``: what to score (a data asset ``azureml:d:1`` or a
    datastore URI, uploaded first by the CLI when local), optionally with which deployment, and
    what of that deployment's settings this one batch job overrides (``az ml batch-endpoint invoke
    --mini-batch-size --instance-count --output-path --set``): OVERRIDES, and ``output_path``, the
    datastore folder the predictions are written to instead of the job's own."""

    input: str = Field(min_length=1, max_length=2048)
    input_type: Literal["uri_folder", "uri_file"] = "uri_folder"
    deployment_name: str | None = Field(default=None, max_length=64)
    job_name: str | None = Field(default=None, max_length=MAX_JOB_NAME)
    mini_batch_size: int | None = Field(default=None, ge=1, le=100_000)
    instance_count: int | None = Field(default=None, ge=1, le=1000)
    error_threshold: int | None = Field(default=None, ge=-1)
    output_file_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,255}$")
    retry_settings: InvokeRetry | None = None
    output_path: str | None = Field(default=None, max_length=2048)

    @field_validator("input_type", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("output_path")
    @classmethod
    def _datastore_folder(cls, value: str | None) -> str | None:
        if value is None:
            return None
        found = OUTPUT_PATH.fullmatch(short_datastore_uri(value))  # the SDK's long form too
        parts = [p for p in found.group(2).split("/") if p not in ("", ".")] if found else []
        if not parts or ".." in parts:
            raise ValueError(
                "output_path is a datastore folder, azureml://datastores/<datastore>/paths/<folder>/ "
                "(no '..')"
            )
        return f"azureml://datastores/{found.group(1)}/paths/{'/'.join(parts)}/" if found else None


def parse_invoke(doc: Any) -> InvokeRequest:
    if isinstance(doc, dict):
        for key in doc:
            if key not in InvokeRequest.model_fields:
                known = ", ".join(InvokeRequest.model_fields)
                raise validation_error(
                    key, f"batch invocation: {key} is not an invocation field; known: {known}"
                )
    request = _parse(InvokeRequest, doc, "batch invocation")
    assert isinstance(request, InvokeRequest)
    return request


def with_overrides(deployment: dict[str, Any], request: InvokeRequest) -> dict[str, Any]:
    """The deployment's settings as this one batch job runs them: REQUEST's overrides win."""
    given = request.model_dump(include=set(OVERRIDES), exclude_none=True)
    out = {**deployment, **{k: v for k, v in given.items() if k not in ("instance_count", "retry_settings")}}
    if "retry_settings" in given:
        out["retry_settings"] = {**(deployment.get("retry_settings") or {}), **given["retry_settings"]}
    if "instance_count" in given:
        out["resources"] = {**(deployment.get("resources") or {}), "instance_count": given["instance_count"]}
    return out


def input_of(request: InvokeRequest) -> dict[str, Any]:
    """An invocation's input as the scoring child's ``inputs.data``."""
    return {"type": request.input_type, "path": request.input}
