"""Online endpoints and deployments in the ARM wire shapes the azure-ai-ml SDK sends (pure).

``PUT {ws}/onlineEndpoints/{e}`` ``{location, identity, tags, properties: {authMode: Key|AMLToken,
description, traffic, mirrorTraffic}}`` and ``PUT …/deployments/{d}`` ``{sku: {capacity}, properties:
{endpointComputeType: Managed, model: <model version id>, codeConfiguration: {codeId, scoringScript},
environmentId, environmentVariables, instanceType, requestSettings: {requestTimeout, maxQueueWait,
maxConcurrentRequestsPerInstance}, livenessProbe/readinessProbe: {initialDelay, period, timeout,
successThreshold, failureThreshold}}}`` ↔ the CLI v2 documents of ``domain.endpoints.online_endpoints``
(validated there). Durations are ISO 8601 on the wire, seconds (probes) or milliseconds (requests)
in cloudlet. A deployment's ``codeId`` is resolved to its snapshot by the caller
(``services.assets.codes.snapshot_for``) and passed in as ``code``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from cloudlet.api.arm.wire.arm_jobs import _environment, _object, environment_id, iso_seconds, seconds_iso
from cloudlet.domain.errors import validation_error

_MODEL_ID = re.compile(r"/models/([^/]+)/versions/([^/]+)$")
ENDPOINT_TYPE = "Microsoft.MachineLearningServices/workspaces/onlineEndpoints"
DEPLOYMENT_TYPE = "Microsoft.MachineLearningServices/workspaces/onlineEndpoints/deployments"
AUTH_FROM_ARM = {"key": "key", "amltoken": "aml_token"}
AUTH_TO_ARM = {"key": "Key", "aml_token": "AMLToken"}
PROBE_FIELDS = {
    "initialDelay": "initial_delay",
    "period": "period",
    "timeout": "timeout",
    "successThreshold": "success_threshold",
    "failureThreshold": "failure_threshold",
}
_PROBE_DURATIONS = ("initialDelay", "period", "timeout")
_REQUEST_DURATIONS = {"requestTimeout": "request_timeout_ms", "maxQueueWait": "max_queue_wait_ms"}


def _props(body: Any) -> Mapping[str, Any]:
    return _object(_object(body, "$").get("properties") or {}, "properties")


def _tags(body: Any) -> dict[str, str] | None:
    tags = _object(body, "$").get("tags")
    return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, Mapping) else None


def arm_target(target: str | None) -> str | None:
    """A native field target as the ARM body names it (``traffic.blue`` → ``properties.traffic.blue``)."""
    if target is None:
        return None
    head, dot, rest = target.partition(".")
    renamed = {
        "auth_mode": "properties.authMode",
        "traffic": "properties.traffic",
        "mirror_traffic": "properties.mirrorTraffic",
        "instance_type": "properties.instanceType",
        "instance_count": "sku.capacity",
        "model": "properties.model",
        "code_configuration": "properties.codeConfiguration",
        "request_settings": "properties.requestSettings",
        "liveness_probe": "properties.livenessProbe",
        "readiness_probe": "properties.readinessProbe",
        "environment": "properties.environmentId",
        "scale_settings": "properties.scaleSettings",
    }.get(head)
    if head == "scale_settings" and rest:
        rest = _SCALE_FIELDS_TO_ARM.get(rest, rest)
    return target if renamed is None else renamed + dot + rest


# -- endpoints ---------------------------------------------------------------------------------
def _endpoint_props(body: Any) -> Mapping[str, Any]:
    """The body's properties, the kinds of its fields and theirs checked (null: left as it is)."""
    top = _object(body, "$")
    shapes = {"location": str, "kind": str, "tags": dict, "identity": dict, "properties": dict}
    for field, kind in shapes.items():
        value = top.get(field)
        if value is not None and not isinstance(value, kind):
            said = "text" if kind is str else "an object"
            raise validation_error(field, f"{field} must be {said} or null")
    if any(not isinstance(v, str) for v in (top.get("tags") or {}).values()):
        raise validation_error("tags", "tags must map names to text")
    props = _props(body)
    kinds = {
        "authMode": (str, "Key or AMLToken"),
        "description": (str, "text"),
        "traffic": (dict, "an object"),
        "mirrorTraffic": (dict, "an object"),
    }
    for field, (kind, said) in kinds.items():
        value = props.get(field)
        if value is not None and not isinstance(value, kind):
            raise validation_error(f"properties.{field}", f"properties.{field} must be {said} or null")
    mode = props.get("authMode")
    if mode is not None and AUTH_FROM_ARM.get(str(mode).lower()) is None:
        raise validation_error(
            "properties.authMode",
            f"authMode '{mode}' is not supported by cloudlet: use Key or AMLToken "
            "(auth_mode='key' or 'aml_token')",
        )
    return props


def endpoint_from_arm(body: Any, name: str) -> dict[str, Any]:
    """The native endpoint document for an SDK PUT body (validated by ``parse_endpoint``)."""
    props = _endpoint_props(body)
    doc: dict[str, Any] = {"name": name}
    mode = props.get("authMode")
    if mode is not None:
        native = AUTH_FROM_ARM[str(mode).lower()]  # checked above
        doc["auth_mode"] = native
    if props.get("description") is not None:
        doc["description"] = str(props["description"])
    tags = _tags(body)
    if tags is not None:
        doc["tags"] = tags
    if props.get("traffic") is not None:
        doc["traffic"] = props["traffic"]
    if props.get("mirrorTraffic") is not None:
        doc["mirror_traffic"] = props["mirrorTraffic"]
    return doc


def endpoint_patch(body: Any, current: Mapping[str, Any]) -> dict[str, Any]:
    """A PATCH (``PartialMinimalTrackedResourceWithIdentity``: tags; or traffic in properties)
    applied to the CURRENT native document."""
    props = _endpoint_props(body)
    doc = dict(current)
    tags = _tags(body)
    if tags is not None:
        doc["tags"] = tags
    if props.get("traffic") is not None:
        doc["traffic"] = props["traffic"]
    if props.get("mirrorTraffic") is not None:
        doc["mirror_traffic"] = props["mirrorTraffic"]
    return doc


def endpoint_to_arm(view: Mapping[str, Any], ws_id: str, location: str) -> dict[str, Any]:
    """The native door's view of an endpoint (``services.endpoints.online_endpoints.render_endpoint``)
    in ARM's shape: both doors show the same endpoint, its URIs and state included."""
    return {
        "id": f"{ws_id}/onlineEndpoints/{view['name']}",
        "name": view["name"],
        "type": ENDPOINT_TYPE,
        "kind": "Managed",
        "location": location,
        "tags": view.get("tags") or {},
        "identity": {"type": "None"},
        "properties": {
            "authMode": AUTH_TO_ARM.get(str(view.get("auth_mode")), "Key"),
            "description": view.get("description"),
            "properties": {},
            "traffic": dict(view.get("traffic") or {}),
            "mirrorTraffic": dict(view.get("mirror_traffic") or {}),
            "scoringUri": view["scoring_uri"],
            "swaggerUri": view["swagger_uri"],
            "provisioningState": view["provisioning_state"],
            "publicNetworkAccess": "Enabled",
        },
    }


# -- deployments -------------------------------------------------------------------------------
def _probe(value: Any, target: str) -> dict[str, int]:
    probe = _object(value, target)
    out: dict[str, int] = {}
    for arm_key, key in PROBE_FIELDS.items():
        item = probe.get(arm_key)
        if item is None:
            continue
        if arm_key in _PROBE_DURATIONS:
            out[key] = iso_seconds(str(item), f"{target}.{arm_key}")
        else:
            out[key] = item
    return out


def _requests(value: Any) -> dict[str, int]:
    target = "properties.requestSettings"
    settings = _object(value, target)
    out: dict[str, int] = {}
    for arm_key, key in _REQUEST_DURATIONS.items():
        if settings.get(arm_key) is not None:
            out[key] = iso_seconds(str(settings[arm_key]), f"{target}.{arm_key}") * 1000
    if settings.get("maxConcurrentRequestsPerInstance") is not None:
        out["max_concurrent_requests_per_instance"] = settings["maxConcurrentRequestsPerInstance"]
    return out


def model_ref(model_id: str) -> str:
    """``…/models/{name}/versions/{v}`` (or ``azureml:name:v``) → ``azureml:name:v``."""
    found = _MODEL_ID.search(model_id)
    if found:
        return f"azureml:{found.group(1)}:{found.group(2)}"
    if model_id.startswith("azureml:") and model_id.count(":") == 2:
        return model_id
    raise validation_error(
        "properties.model",
        f"model {model_id!r} is not a model version's id (…/models/{{name}}/versions/{{version}}); "
        "register the model (Model(path=…) does) and name it",
    )


# ``scaleSettings`` (the SDK's OnlineScaleSettings) ↔ the native ``scale_settings``.
_SCALE_FIELDS_TO_ARM = {
    "type": "scaleType",
    "min_instances": "minInstances",
    "max_instances": "maxInstances",
    "polling_interval": "pollingInterval",
    "target_utilization_percentage": "targetUtilizationPercentage",
}
_SCALE_TYPES = {"default": "default", "targetutilization": "target_utilization"}


def scale_from_arm(value: Any) -> dict[str, Any]:
    """``{scaleType: Default}`` → a fixed count; ``{scaleType: TargetUtilization, minInstances,
    maxInstances, pollingInterval (ISO 8601), targetUtilizationPercentage}`` → cloudlet's autoscale
    on that CPU target (the SDK itself refuses to send it for a ManagedOnlineDeployment; REST
    callers can)."""
    target = "properties.scaleSettings"
    settings = _object(value, target)
    kind = _SCALE_TYPES.get(str(settings.get("scaleType") or "Default").lower())
    if kind is None:
        raise validation_error(
            f"{target}.scaleType",
            f"scaleType '{settings.get('scaleType')}' is not supported; use Default or TargetUtilization",
        )
    doc: dict[str, Any] = {"type": kind}
    if kind == "default":
        return doc
    for key, arm_key in _SCALE_FIELDS_TO_ARM.items():
        item = settings.get(arm_key)
        if key == "type" or item is None:
            continue
        doc[key] = iso_seconds(str(item), f"{target}.{arm_key}") if key == "polling_interval" else item
    return doc


def scale_to_arm(doc: Any) -> dict[str, Any]:
    """The native ``scale_settings`` as the SDK reads it (``TargetUtilizationScaleSettings`` for an
    autoscaled deployment: cloudlet's own fields are in ``properties['cloudlet.scaleSettings']``)."""
    if not isinstance(doc, Mapping) or doc.get("type") != "target_utilization":
        return {"scaleType": "Default"}
    out: dict[str, Any] = {"scaleType": "TargetUtilization"}
    for key, arm_key in _SCALE_FIELDS_TO_ARM.items():
        if key != "type" and doc.get(key) is not None:
            out[arm_key] = seconds_iso(doc[key]) if key == "polling_interval" else doc[key]
    return out


def deployment_from_arm(
    body: Any, endpoint: str, name: str, code: str | None, current: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The native deployment document for an SDK PUT body (validated by ``parse_deployment``).
    CURRENT is the deployment's stored document when it exists: a body without ``scaleSettings``
    (the SDK's ``scale_settings=None``) keeps its autoscale, as an Azure deployment PUT leaves
    the autoscale Azure Monitor holds; ``{scaleType: Default}`` sets a fixed count."""
    resource = _object(body, "$")
    props = _props(body)
    kind = str(props.get("endpointComputeType") or "Managed")
    if kind.lower() != "managed":
        raise validation_error(
            "properties.endpointComputeType",
            f"endpointComputeType '{kind}' is not supported: use ManagedOnlineDeployment",
        )
    doc: dict[str, Any] = {"name": name, "endpoint_name": endpoint}
    model = props.get("model")
    if not model:
        raise validation_error("properties.model", "an online deployment needs a model (model=Model(path=…))")
    doc["model"] = model_ref(str(model))
    config = _object(props.get("codeConfiguration") or {}, "properties.codeConfiguration")
    if code is not None:
        doc["code_configuration"] = {"code": code, "scoring_script": config.get("scoringScript")}
    elif config:  # none at all: an MLflow model's no-code deployment (the service checks)
        raise validation_error(
            "properties.codeConfiguration.codeId",
            "an online deployment needs its scoring code (code_configuration=CodeConfiguration(code=…)), "
            "unless its model is an MLflow model (then give no code_configuration)",
        )
    if props.get("environmentId"):
        doc["environment"] = _environment(str(props["environmentId"]))
    if isinstance(props.get("environmentVariables"), Mapping):
        doc["environment_variables"] = {str(k): str(v) for k, v in props["environmentVariables"].items()}
    if props.get("instanceType") is not None:
        doc["instance_type"] = props["instanceType"]
    sku = resource.get("sku")
    if isinstance(sku, Mapping) and sku.get("capacity") is not None:
        doc["instance_count"] = sku["capacity"]
    if props.get("requestSettings") is not None:
        doc["request_settings"] = _requests(props["requestSettings"])
    for arm_key, key in (("livenessProbe", "liveness_probe"), ("readinessProbe", "readiness_probe")):
        if props.get(arm_key) is not None:
            doc[key] = _probe(props[arm_key], f"properties.{arm_key}")
    if props.get("description") is not None:
        doc["description"] = str(props["description"])
    tags = _tags(body)
    if tags is not None:
        doc["tags"] = tags
    if props.get("scaleSettings") is not None:
        doc["scale_settings"] = scale_from_arm(props["scaleSettings"])
    elif current is not None and (current.get("scale_settings") or {}).get("type") == "target_utilization":
        doc["scale_settings"] = dict(current["scale_settings"])
    return doc


def _scale_extras(doc: Any) -> dict[str, str]:
    """An autoscaled deployment's whole ``scale_settings`` (cloudlet's fields too: the request
    target, window, scale-in delay), as the one string ARM's ``properties`` can carry."""
    if not isinstance(doc, Mapping) or doc.get("type") != "target_utilization":
        return {}
    return {"cloudlet.scaleSettings": json.dumps(dict(doc), sort_keys=True)}


def _probe_to_arm(probe: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm_key, key in PROBE_FIELDS.items():
        if key in probe:
            out[arm_key] = seconds_iso(probe[key]) if arm_key in _PROBE_DURATIONS else probe[key]
    return out


def _ms_iso(ms: int) -> str:
    return seconds_iso(ms // 1000) if ms % 1000 == 0 else f"PT{ms / 1000:g}S"


def deployment_to_arm(
    view: Mapping[str, Any], ws_id: str, endpoint: str, code_id: str | None, location: str
) -> dict[str, Any]:
    requests = view.get("request_settings") or {}
    props: dict[str, Any] = {
        "endpointComputeType": "Managed",
        "description": view.get("description"),
        "properties": {"cloudlet.stage": str(view.get("stage") or "")}
        | ({"cloudlet.reason": str(view["reason"])} if view.get("reason") else {})
        | _scale_extras(view.get("scale_settings")),
        "environmentVariables": view.get("environment_variables") or {},
        "instanceType": view.get("instance_type"),
        "scaleSettings": scale_to_arm(view.get("scale_settings")),
        "requestSettings": {
            "requestTimeout": _ms_iso(int(requests.get("request_timeout_ms", 5000))),
            "maxQueueWait": _ms_iso(int(requests.get("max_queue_wait_ms", 500))),
            "maxConcurrentRequestsPerInstance": requests.get("max_concurrent_requests_per_instance", 1),
        },
        "livenessProbe": _probe_to_arm(view.get("liveness_probe") or {}),
        "readinessProbe": _probe_to_arm(view.get("readiness_probe") or {}),
        "appInsightsEnabled": False,
        "egressPublicNetworkAccess": "Enabled",
        "provisioningState": view.get("provisioning_state") or "Succeeded",
    }
    if view.get("code_configuration"):  # none: an MLflow model's no-code deployment
        props["codeConfiguration"] = {
            "codeId": code_id,
            "scoringScript": view["code_configuration"].get("scoring_script"),
        }
    model = view.get("model")
    if isinstance(model, str) and model.startswith("azureml:") and model.count(":") == 2:
        _, name, version = model.split(":")
        props["model"] = f"{ws_id}/models/{name}/versions/{version}"
    elif isinstance(model, str):
        props["model"] = model
    env_id = environment_id(view.get("environment"), ws_id)
    if env_id is not None:
        props["environmentId"] = env_id
    return {
        "id": f"{ws_id}/onlineEndpoints/{endpoint}/deployments/{view['name']}",
        "name": view["name"],
        "type": DEPLOYMENT_TYPE,
        "kind": "Managed",
        "location": location,
        "tags": view.get("tags") or {},
        "sku": {"name": "Default", "tier": "Standard", "capacity": view.get("instance_count", 1)},
        "properties": props,
    }


def operation_status(current: int, state: str, reason: str | None, generation: int) -> dict[str, Any]:
    """ARM's operation status of a deployment write (GENERATION) given the deployment's CURRENT
    generation and its provisioning STATE: Failed carries ``error`` (code, message), which the
    SDK's poller raises as ``HttpResponseError`` with that message."""
    if generation > current or generation < 1:
        return {"status": "Failed", "error": {"code": "NotFound", "message": f"no operation {generation}"}}
    if generation < current:  # a later write took over: this one never serves
        message = f"superseded by a later update of the deployment (write {current})"
        return {"status": "Canceled", "error": {"code": "Superseded", "message": message}}
    if state == "Succeeded":
        return {"status": "Succeeded"}
    if state == "Failed":
        message = reason or "the deployment failed; see its logs (get-logs)"
        return {"status": "Failed", "error": {"code": "DeploymentFailed", "message": message}}
    return {"status": "InProgress"}
