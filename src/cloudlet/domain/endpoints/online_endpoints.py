"""Online endpoints and their deployments (T6, issue 14): the CLI v2 ``managedOnlineEndpoint`` and
``managedOnlineDeployment`` documents, validated without I/O, and the gateway's pure decisions.

An endpoint names its auth mode (``key`` or ``aml_token``), its ``traffic`` (deployment → weight,
0–100, summing to 0 or 100) and ``mirror_traffic`` (one deployment → a share ≤ 50 % copied; the
copy's answer is dropped). A deployment names its model (``azureml:<name>:<version>`` or a local
path the client uploads to the datastore, where its folder keeps its name), ``code_configuration``
(``code`` and ``scoring_script``; none for an MLflow model), an environment, ``instance_type``,
``instance_count``, ``request_settings`` and liveness / readiness probes with Azure's defaults.
Errors name the field and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cloudlet.domain.compute.compute_spec import NAME_PATTERN
from cloudlet.domain.endpoints import mlflow_models, online_autoscale
from cloudlet.domain.errors import CloudletError, validation_error

# Azure: 3–32 characters, a letter first, then letters, digits and '-'.
ENDPOINT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{1,30}[A-Za-z0-9]$")
ENDPOINT_NAME_RULE = "3–32 letters, digits or '-', starting with a letter and not ending with '-'"
DEPLOYMENT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{1,30}[A-Za-z0-9]$")
AUTH_MODES = ("key", "aml_token")
MAX_MIRROR_PERCENT = 50
MAX_INSTANCES = 20
PINNED_HEADER = "azureml-model-deployment"
# A deployment's model: a registered one (azureml:<name>:<version>), an uploaded folder or file
# (a datastore path, LocalUpload/<hash>/<name>: the replica sees it as AZUREML_MODEL_DIR/<name>, as
# on Azure), or a code snapshot (codes/<sha256>: its contents are AZUREML_MODEL_DIR itself).
MODEL_PREFIXES = ("azureml:", "codes/", "azureml://datastores/")

# Azure's defaults (seconds for probes, ms for requests).
PROBE_DEFAULTS: dict[str, int] = {
    "initial_delay": 10,
    "period": 10,
    "timeout": 2,
    "success_threshold": 1,
    "failure_threshold": 30,
}
REQUEST_DEFAULTS: dict[str, int] = {
    "request_timeout_ms": 5000,
    "max_concurrent_requests_per_instance": 1,
    "max_queue_wait_ms": 500,
}
REQUEST_LIMITS: dict[str, tuple[int, int]] = {
    "request_timeout_ms": (1, 180_000),
    "max_concurrent_requests_per_instance": (1, 1000),
    "max_queue_wait_ms": (0, 600_000),
}
ENDPOINT_FIELDS = {
    "$schema",
    "name",
    "auth_mode",
    "description",
    "tags",
    "traffic",
    "mirror_traffic",
    "identity",
}
DEPLOYMENT_FIELDS = {
    "$schema",
    "name",
    "endpoint_name",
    "model",
    "code_configuration",
    "environment",
    "environment_variables",
    "instance_type",
    "instance_count",
    "request_settings",
    "liveness_probe",
    "readiness_probe",
    "description",
    "tags",
    "app_insights_enabled",
    "scale_settings",
    "type",
    "compute",
    "model_type",  # cloudlet's: the model's type as written (an inline model's, or its asset's)
}
MODEL_TYPES = ("custom_model", "mlflow_model", "triton_model")


@dataclass(frozen=True)
class EndpointSpec:
    name: str
    auth_mode: str = "key"
    description: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    traffic: dict[str, int] = field(default_factory=dict)
    mirror_traffic: dict[str, int] = field(default_factory=dict)

    def to_doc(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "auth_mode": self.auth_mode,
            "description": self.description,
            "tags": dict(self.tags),
            "traffic": dict(self.traffic),
            "mirror_traffic": dict(self.mirror_traffic),
        }


@dataclass(frozen=True)
class DeploymentSpec:
    name: str
    endpoint_name: str
    model: str
    code: str | None  # None: an MLflow model without a scoring script (mlflow_models.SCRIPT_NAME)
    scoring_script: str
    environment: str | None
    instance_type: str
    instance_count: int
    request_settings: dict[str, int]
    liveness_probe: dict[str, int]
    readiness_probe: dict[str, int]
    environment_variables: dict[str, str] = field(default_factory=dict)
    description: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    scale_settings: online_autoscale.ScaleSettings | None = None  # None: a fixed instance_count
    # The compute instance its replicas run on (Azure ML's ``compute``, as on Kubernetes online
    # deployments); None: nodes made for it (or local processes, for --local).
    compute: str | None = None
    # An inline environment (image + conda_file, pip) as given: the replicas' nodes build it.
    environment_doc: dict[str, Any] | None = None
    model_type: str | None = None  # None: not known yet (a registered model's is its asset's)

    def to_doc(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "endpoint_name": self.endpoint_name,
            "model": self.model,
            **({"model_type": self.model_type} if self.model_type else {}),
            **(
                {"code_configuration": {"code": self.code, "scoring_script": self.scoring_script}}
                if self.code is not None
                else {}
            ),
            "environment": self.environment_doc if self.environment_doc is not None else self.environment,
            "environment_variables": dict(self.environment_variables),
            "instance_type": self.instance_type,
            "instance_count": self.instance_count,
            "request_settings": dict(self.request_settings),
            "liveness_probe": dict(self.liveness_probe),
            "readiness_probe": dict(self.readiness_probe),
            "description": self.description,
            "tags": dict(self.tags),
            "scale_settings": self.scale_settings.to_doc() if self.scale_settings else {"type": "default"},
            **({"compute": self.compute} if self.compute else {}),
        }


def _document(doc: Any, what: str) -> dict[str, Any]:
    """The whole document: a mapping (null is no document, where a field's null is its default)."""
    if not isinstance(doc, dict):
        raise validation_error("$", f"the {what} document must be a mapping")
    return doc


def _mapping(doc: Any, target: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise validation_error(target, f"'{target}' must be a mapping")
    return doc


def _unknown(doc: dict[str, Any], allowed: set[str], what: str) -> None:
    extra = sorted(set(doc) - allowed)
    if extra:
        raise validation_error(
            extra[0], f"'{extra[0]}' is not a field of {what}; known: {', '.join(sorted(allowed))}"
        )


def _int(value: Any, target: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise validation_error(target, f"'{target}' must be a whole number from {low} to {high}")
    if not low <= value <= high:
        raise validation_error(target, f"'{target}' is {value}; it must be from {low} to {high}")
    return value


def _tags(doc: Any, target: str) -> dict[str, str]:
    """Text values (a YAML number or boolean is written as text); anything else is refused."""
    tags = _mapping(doc, target)
    for key, value in tags.items():
        if value is None or not isinstance(value, str | int | float):
            raise validation_error(f"{target}.{key}", f"a tag's value is text, not {value!r}")
    return {str(k): str(v) for k, v in tags.items()}


def parse_weights(doc: Any, target: str) -> dict[str, int]:
    weights = _mapping(doc, target)
    out: dict[str, int] = {}
    for name, weight in weights.items():
        if not isinstance(name, str) or not DEPLOYMENT_NAME.fullmatch(name):
            raise validation_error(f"{target}.{name}", f"'{name}' is not a deployment name")
        out[name] = _int(weight, f"{target}.{name}", 0, 100)
    return out


def check_traffic(traffic: dict[str, int], mirror: dict[str, int]) -> None:
    total = sum(traffic.values())
    if total not in (0, 100):
        raise validation_error(
            "traffic", f"the traffic weights sum to {total}; they must sum to 100 (or 0 for no traffic)"
        )
    if len(mirror) > 1:
        raise validation_error("mirror_traffic", "mirror_traffic names at most one deployment")
    for name, share in mirror.items():
        if share > MAX_MIRROR_PERCENT:
            raise validation_error(
                f"mirror_traffic.{name}", f"a mirrored share is at most {MAX_MIRROR_PERCENT} %, not {share}"
            )
        if traffic.get(name, 0) > 0:
            raise validation_error(
                f"mirror_traffic.{name}",
                f"'{name}' takes live traffic; mirror only a deployment at 0 % (set traffic.{name}=0)",
            )


def parse_endpoint(doc: Any, url_name: str | None = None) -> EndpointSpec:
    body = _document(doc, "endpoint")
    _unknown(body, ENDPOINT_FIELDS, "an online endpoint")
    name = body.get("name") or url_name
    if url_name is not None and body.get("name") not in (None, url_name):
        raise validation_error("name", f"the document names '{body.get('name')}' but the URL '{url_name}'")
    if not isinstance(name, str) or not ENDPOINT_NAME.fullmatch(name):
        raise validation_error("name", f"an endpoint name is {ENDPOINT_NAME_RULE}")
    given_mode = body.get("auth_mode")
    if given_mode is not None and not isinstance(given_mode, str):
        raise validation_error("auth_mode", "auth_mode is key or aml_token")
    auth_mode = (given_mode or "key").lower()
    if auth_mode not in AUTH_MODES:
        raise validation_error(
            "auth_mode", f"auth_mode '{body.get('auth_mode')}' is not supported; use key or aml_token"
        )
    traffic = parse_weights(body.get("traffic"), "traffic")
    mirror = parse_weights(body.get("mirror_traffic"), "mirror_traffic")
    check_traffic(traffic, mirror)
    description = body.get("description")
    if description is not None and not isinstance(description, str):
        raise validation_error("description", "description must be a string")
    return EndpointSpec(
        name=name,
        auth_mode=auth_mode,
        description=description,
        tags=_tags(body.get("tags"), "tags"),
        traffic=traffic,
        mirror_traffic=mirror,
    )


def _settings(
    doc: Any, target: str, defaults: dict[str, int], limits: dict[str, tuple[int, int]]
) -> dict[str, int]:
    given = _mapping(doc, target)
    _unknown(given, set(defaults), target)
    out = dict(defaults)
    for key, value in given.items():
        low, high = limits.get(key, (0, 3600))
        out[key] = _int(value, f"{target}.{key}", low, high)
    return out


def _probe(doc: Any, target: str) -> dict[str, int]:
    limits = {
        "period": (1, 3600),
        "timeout": (1, 3600),
        "success_threshold": (1, 100),
        "failure_threshold": (1, 1000),
    }
    return _settings(doc, target, PROBE_DEFAULTS, limits)


def parse_deployment(doc: Any, endpoint_name: str, url_name: str | None = None) -> DeploymentSpec:
    body = _document(doc, "deployment")
    _unknown(body, DEPLOYMENT_FIELDS, "an online deployment")
    name = body.get("name") or url_name
    if url_name is not None and body.get("name") not in (None, url_name):
        raise validation_error("name", f"the document names '{body.get('name')}' but the URL '{url_name}'")
    if not isinstance(name, str) or not DEPLOYMENT_NAME.fullmatch(name):
        raise validation_error("name", f"a deployment name is {ENDPOINT_NAME_RULE}")
    if body.get("endpoint_name") not in (None, endpoint_name):
        raise validation_error(
            "endpoint_name",
            f"the document names endpoint '{body['endpoint_name']}' but the URL '{endpoint_name}'",
        )
    kind = body.get("type")
    if kind not in (None, "managed", "kubernetes"):
        raise validation_error("type", f"type '{kind}' is not an online deployment type; use managed")
    model = body.get("model")
    model_type = body.get("model_type")
    if isinstance(model, dict):
        model_type = model.get("type") or model_type
        model = model.get("path")
    if model_type is not None and model_type not in MODEL_TYPES:
        raise validation_error(
            "model.type", f"model type '{model_type}' is not one of {', '.join(MODEL_TYPES)}"
        )
    if not isinstance(model, str) or not model:
        raise validation_error(
            "model", "'model' is required: azureml:<name>:<version>, or a local path to upload"
        )
    if not model.startswith(MODEL_PREFIXES):
        raise validation_error(
            "model",
            f"model '{model}' is a local path: upload it first (the CLI and client do), "
            "or name azureml:<name>:<version>",
        )
    code, script = _code_configuration(body.get("code_configuration"))
    environment = body.get("environment")
    environment_doc = None
    if isinstance(environment, dict):
        environment_doc = dict(environment)
        environment = environment.get("name") or environment.get("image") or "inline"
    compute = parse_compute(body.get("compute"))
    instance_type = body.get("instance_type")
    if not isinstance(instance_type, str) or not instance_type:
        raise validation_error("instance_type", "'instance_type' is required: a size, e.g. Standard_DS3_v2")
    count = _int(body.get("instance_count", 1), "instance_count", 1, MAX_INSTANCES)
    scale = online_autoscale.parse(body.get("scale_settings"), count)
    variables = _mapping(body.get("environment_variables"), "environment_variables")
    description = body.get("description")
    return DeploymentSpec(
        name=name,
        endpoint_name=endpoint_name,
        model=model,
        code=code,
        scoring_script=script,
        environment=None if environment is None else str(environment),
        instance_type=instance_type,
        instance_count=count,
        request_settings=_settings(
            body.get("request_settings"), "request_settings", REQUEST_DEFAULTS, REQUEST_LIMITS
        ),
        liveness_probe=_probe(body.get("liveness_probe"), "liveness_probe"),
        readiness_probe=_probe(body.get("readiness_probe"), "readiness_probe"),
        environment_variables={str(k): str(v) for k, v in variables.items()},
        description=None if description is None else str(description),
        tags=_tags(body.get("tags"), "tags"),
        scale_settings=scale,
        compute=compute,
        environment_doc=environment_doc,
        model_type=None if model_type is None else str(model_type),
    )


def _code_configuration(doc: Any) -> tuple[str | None, str]:
    """(code, scoring_script); none given: an MLflow model's no-code deployment (the service
    checks the model is one: ``mlflow_models.check_scoring``)."""
    if doc is None:
        return None, mlflow_models.SCRIPT_NAME
    config = _mapping(doc, "code_configuration")
    _unknown(config, {"code", "scoring_script"}, "code_configuration")
    code, script = config.get("code"), config.get("scoring_script")
    if not isinstance(code, str) or not code:
        raise validation_error(
            "code_configuration.code",
            "'code_configuration.code' is required: the folder of the scoring script",
        )
    if not code.startswith("codes/"):
        raise validation_error(
            "code_configuration.code",
            f"code '{code}' is a local path: upload it first (the CLI and client do)",
        )
    if not isinstance(script, str) or not script or script.startswith("/") or ".." in script.split("/"):
        raise validation_error(
            "code_configuration.scoring_script",
            "'scoring_script' is required: a path inside the code folder, e.g. score.py",
        )
    return code, script


def parse_compute(value: Any) -> str | None:
    """``compute``: ``azureml:<instance>`` or ``<instance>`` (a compute instance of the workspace)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise validation_error("compute", "'compute' must be a compute instance's name, e.g. azureml:my-ci")
    name = value.removeprefix("azureml:")
    if not NAME_PATTERN.fullmatch(name):
        raise validation_error(
            "compute", f"'{value}' is not a compute instance name; use azureml:<instance name>"
        )
    return name


def placement_kind(local: bool, compute: str | None) -> str:
    """Where a deployment's replicas run: ``process`` (--local: processes of the server's
    machine), ``instance`` (on its compute instance's node), else ``node`` (nodes made for it)."""
    if local:
        return "process"
    return "instance" if compute else "node"


def parse_traffic_flag(text: str, target: str = "traffic") -> dict[str, int]:
    """``"blue=90 green=10"`` (az ml's ``--traffic`` / ``--mirror-traffic``) as weights."""
    out: dict[str, int] = {}
    for part in text.replace(",", " ").split():
        name, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise validation_error(target, f"'{part}' is not NAME=PERCENT (e.g. \"blue=90 green=10\")")
        out[name.strip()] = int(value)
    return parse_weights(out, target)


# --- the gateway's decisions -------------------------------------------------------------------


def choose(traffic: dict[str, int], draw: float) -> str | None:
    """The deployment a request goes to for a uniform DRAW in [0, 1): weights by name order."""
    total = sum(traffic.values())
    if total <= 0:
        return None
    point = draw * total
    acc = 0
    for name in sorted(traffic):
        acc += traffic[name]
        if traffic[name] > 0 and point < acc:
            return name
    return max(sorted(traffic), key=lambda n: traffic[n])


def mirrored(mirror: dict[str, int], draw: float) -> str | None:
    for name, share in mirror.items():
        if share > 0 and draw * 100 < share:
            return name
    return None


def overloaded(in_flight: int, max_concurrent: int, ready: int) -> bool:
    """Azure's 429: more than 2 × max_concurrent_requests_per_instance × ready replicas in flight."""
    return in_flight >= 2 * max_concurrent * max(ready, 0)


def check_deletable(endpoint: EndpointSpec, deployment: str) -> None:
    if endpoint.traffic.get(deployment, 0) > 0:
        raise CloudletError(
            "DeploymentTakesTraffic",
            f"deployment '{deployment}' takes {endpoint.traffic[deployment]} % of the traffic; set its "
            "traffic to 0 first (online-endpoint update --traffic)",
            "traffic",
            409,
        )


LOG_CONTAINERS = ("InferenceServer", "StorageInitializer")
DEFAULT_LOG_LINES, MAX_LOG_LINES = 200, 10000
LOGS_SCHEMA = {
    "type": "object",
    "properties": {
        "containerType": {"type": "string", "enum": list(LOG_CONTAINERS)},
        "tail": {"type": "integer", "minimum": 1, "maximum": MAX_LOG_LINES},
    },
}


def log_lines(body: Any) -> int:
    """getLogs' body (``LOGS_SCHEMA``; none: the last 200 lines): how many lines to show."""
    if body is None:
        return DEFAULT_LOG_LINES
    if not isinstance(body, dict):
        raise validation_error("body", "getLogs takes a JSON object: {tail, containerType}, or none")
    tail = body.get("tail", DEFAULT_LOG_LINES)
    if isinstance(tail, float) and tail.is_integer():
        tail = int(tail)  # JSON Schema's integer: 5.0 is 5
    if type(tail) is not int or not 1 <= tail <= MAX_LOG_LINES:
        raise validation_error("tail", f"tail is a number of lines from 1 to {MAX_LOG_LINES}")
    if "containerType" in body and body["containerType"] not in LOG_CONTAINERS:
        raise validation_error("containerType", f"containerType is one of {', '.join(LOG_CONTAINERS)}")
    return tail
