"""Batch endpoints and deployments in the ARM wire shapes the azure-ai-ml SDK sends (pure).

``PUT {ws}/batchEndpoints/{e}`` ``{properties: {authMode, defaults: {deploymentName}, description}}``
and ``PUT …/deployments/{d}`` ``{properties: {model: {referenceType: "Id", assetId}, codeConfiguration:
{codeId, scoringScript}, environmentId, compute, miniBatchSize, maxConcurrencyPerInstance,
outputAction, outputFileName, retrySettings: {maxRetries, timeout}, errorThreshold, loggingLevel,
resources: {instanceCount}, environmentVariables}}`` ↔ the CLI v2 documents of
``domain.endpoints.batch_endpoints``. A deployment's ``codeId`` is resolved to its snapshot by the caller
(``services.assets.codes.snapshot_for``) and passed in as ``code``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from cloudlet.api.arm.wire import arm_jobs
from cloudlet.api.arm.wire.arm_jobs import (
    _compute,
    _environment,
    _object,
    environment_id,
    iso_seconds,
    seconds_iso,
)
from cloudlet.domain.errors import validation_error

_MODEL_ID = re.compile(r"/models/([^/]+)/versions/([^/]+)$")
ENDPOINT_TYPE = "Microsoft.MachineLearningServices/workspaces/batchEndpoints"
DEPLOYMENT_TYPE = "Microsoft.MachineLearningServices/workspaces/batchEndpoints/deployments"


def endpoint_from_arm(body: Any, name: str) -> dict[str, Any]:
    given = _object(body, "").get("properties")
    props = {} if given is None else _object(given, "properties")
    doc: dict[str, Any] = {"name": name}
    if props.get("description"):
        doc["description"] = props["description"]
    tags = _object(body, "").get("tags")
    if tags is not None:
        doc["tags"] = {str(k): str(v) for k, v in _object(tags, "tags").items()}
    default = _object(props.get("defaults") or {}, "properties.defaults").get("deploymentName")
    if default:
        doc["defaults"] = {"deployment_name": str(default)}
    return doc


def endpoint_to_arm(view: Mapping[str, Any], ws_id: str, location: str) -> dict[str, Any]:
    """The one view of a batch endpoint (``services.endpoints.batch_endpoints.render_endpoint``, made
    with the facade's invoke base) in ARM's shape."""
    default = (view.get("defaults") or {}).get("deployment_name")
    return {
        "id": f"{ws_id}/batchEndpoints/{view['name']}",
        "name": view["name"],
        "type": ENDPOINT_TYPE,
        "location": location,
        "tags": view.get("tags") or {},
        "properties": {
            "authMode": "AADToken",
            "description": view.get("description"),
            "defaults": {"deploymentName": default},
            "scoringUri": view["scoring_uri"],
            "swaggerUri": None,
            "provisioningState": "Succeeded",
        },
    }


def arm_target(target: str | None) -> str | None:
    """A native field target as the ARM body names it (``environment`` → ``properties.environmentId``)."""
    if target == "environment" or (target or "").startswith("environment."):
        return "properties.environmentId"
    return target


def _snake(value: Any) -> Any:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", "_", value).lower() if isinstance(value, str) else value


def deployment_from_arm(body: Any, endpoint: str, name: str, code: str | None) -> dict[str, Any]:
    props = _object(_object(body, "").get("properties") or {}, "properties")
    doc: dict[str, Any] = {"name": name, "endpoint_name": endpoint}
    model = props.get("model")
    if isinstance(model, Mapping) and model.get("assetId"):
        found = _MODEL_ID.search(str(model["assetId"]))
        doc["model"] = f"azureml:{found.group(1)}:{found.group(2)}" if found else str(model["assetId"])
    config = _object(props.get("codeConfiguration") or {}, "properties.codeConfiguration")
    if code is not None:
        doc["code_configuration"] = {"code": code, "scoring_script": config.get("scoringScript")}
    elif config:  # none at all: an MLflow model's no-code deployment (the service checks)
        raise validation_error(
            "properties.codeConfiguration.codeId", "a batch deployment needs its code (codeId)"
        )
    if props.get("environmentId"):
        doc["environment"] = _environment(str(props["environmentId"]))
    if props.get("compute"):
        doc["compute"] = _compute(str(props["compute"]))
    for arm_key, key in (
        ("miniBatchSize", "mini_batch_size"),
        ("maxConcurrencyPerInstance", "max_concurrency_per_instance"),
        ("errorThreshold", "error_threshold"),
        ("outputFileName", "output_file_name"),
        ("description", "description"),
    ):
        if props.get(arm_key) is not None:
            doc[key] = props[arm_key]
    if props.get("outputAction"):
        doc["output_action"] = _snake(props["outputAction"])
    if props.get("loggingLevel"):
        doc["logging_level"] = str(props["loggingLevel"]).lower()
    retry = props.get("retrySettings")
    if isinstance(retry, Mapping):
        doc["retry_settings"] = _retry(retry)
    resources = props.get("resources")
    if isinstance(resources, Mapping) and resources.get("instanceCount"):
        doc["resources"] = {"instance_count": resources["instanceCount"]}
    if isinstance(props.get("environmentVariables"), Mapping):
        doc["environment_variables"] = {str(k): str(v) for k, v in props["environmentVariables"].items()}
    return doc


def deployment_to_arm(
    view: Mapping[str, Any], ws_id: str, endpoint: str, code_id: str | None, location: str
) -> dict[str, Any]:
    retry = view.get("retry_settings") or {}
    config = view.get("code_configuration")
    props: dict[str, Any] = {
        "description": view.get("description"),
        "compute": view.get("compute"),
        "miniBatchSize": view.get("mini_batch_size"),
        "maxConcurrencyPerInstance": view.get("max_concurrency_per_instance"),
        "errorThreshold": view.get("error_threshold"),
        "outputAction": "SummaryOnly" if view.get("output_action") == "summary_only" else "AppendRow",
        "outputFileName": view.get("output_file_name"),
        "loggingLevel": str(view.get("logging_level", "info")).capitalize(),
        "retrySettings": {
            "maxRetries": retry.get("max_retries", 3),
            "timeout": seconds_iso(retry.get("timeout", 30)),
        },
        "resources": {"instanceCount": (view.get("resources") or {}).get("instance_count", 1)},
        "environmentVariables": view.get("environment_variables") or {},
        "provisioningState": "Succeeded",
    }
    if config:  # none: an MLflow model's no-code deployment
        props["codeConfiguration"] = {"codeId": code_id, "scoringScript": config.get("scoring_script")}
    model = view.get("model")
    if isinstance(model, str) and model.startswith("azureml:") and model.count(":") == 2:
        _, name, version = model.split(":")
        props["model"] = {"referenceType": "Id", "assetId": f"{ws_id}/models/{name}/versions/{version}"}
    env_id = environment_id(view.get("environment"), ws_id)
    if env_id is not None:
        props["environmentId"] = env_id
    return {
        "id": f"{ws_id}/batchEndpoints/{endpoint}/deployments/{view['name']}",
        "name": view["name"],
        "type": DEPLOYMENT_TYPE,
        "location": location,
        "tags": view.get("tags") or {},
        "sku": {"name": "Default", "capacity": props["resources"]["instanceCount"]},
        "properties": props,
    }


def invocation_from_arm(body: Any) -> dict[str, Any]:
    """``{properties: {inputData: {<name>: {jobInputType, uri}}, …}}`` → an ``InvokeRequest`` body,
    with the overrides ``batch_endpoints.invoke(params_override=…)`` and ``az ml batch-endpoint invoke``
    send: ``miniBatchSize``, ``compute.instanceCount``, ``errorThreshold``, ``outputFileName``,
    ``retrySettings``, and the output as ``outputData`` (one output; a ``UriFile`` names the file
    too) or ``outputDataset`` (``{datastoreId, path}``)."""
    props = _object(_object(body, "").get("properties") or {}, "properties")
    data = _object(props.get("inputData") or {}, "properties.inputData")
    if len(data) != 1:
        raise validation_error("properties.inputData", "give one input (input=Input(path=…)) to score")
    ((_, item),) = data.items()
    item = _object(item, "properties.inputData")
    out = {"input": item.get("uri"), "input_type": _snake(str(item.get("jobInputType") or "UriFolder"))}
    name = props.get("name") or props.get("jobName")  # invoke(job_name=…)
    if name:
        out["job_name"] = name
    for arm_key, key in (
        ("miniBatchSize", "mini_batch_size"),
        ("errorThreshold", "error_threshold"),
        ("outputFileName", "output_file_name"),
    ):
        if props.get(arm_key) is not None:
            out[key] = props[arm_key]
    compute = _object(props.get("compute") or {}, "properties.compute")
    if compute.get("instanceCount") is not None:
        out["instance_count"] = compute["instanceCount"]
    retry = _object(props.get("retrySettings") or {}, "properties.retrySettings")
    if retry:
        out["retry_settings"] = _retry(retry)
    out.update(_output_from_arm(props))
    return out


_INVOCATION_FIELDS = {
    "input": "properties.inputData",
    "input_type": "properties.inputData",
    "job_name": "properties.name",
    "mini_batch_size": "properties.miniBatchSize",
    "instance_count": "properties.compute.instanceCount",
    "error_threshold": "properties.errorThreshold",
    "output_file_name": "properties.outputFileName",
    "retry_settings": "properties.retrySettings",
    "output_path": "properties.outputData",
}


def invocation_target(target: str | None) -> str | None:
    """An invocation's native field as the SDK's body names it (``mini_batch_size`` →
    ``properties.miniBatchSize``)."""
    head = (target or "").split(".")[0]
    return _INVOCATION_FIELDS.get(head, target)


def _retry(retry: Mapping[str, Any]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if retry.get("maxRetries") is not None:
        settings["max_retries"] = retry["maxRetries"]
    if retry.get("timeout"):
        settings["timeout"] = iso_seconds(str(retry["timeout"]), "properties.retrySettings.timeout")
    return settings


def _output_from_arm(props: Mapping[str, Any]) -> dict[str, Any]:
    """``output_path`` (and, from a ``UriFile`` output, ``output_file_name``) of an invocation."""
    outputs = _object(props.get("outputData") or {}, "properties.outputData")
    if len(outputs) > 1:
        raise validation_error(
            "properties.outputData", "a model deployment's batch job has one output (score): give one"
        )
    if outputs:
        ((_, item),) = outputs.items()
        item = _object(item, "properties.outputData")
        uri = str(item.get("uri") or "")
        if not uri:
            return {}
        if str(item.get("jobOutputType") or "").lower() == "urifile":
            folder, _, file_name = uri.rstrip("/").rpartition("/")
            return {"output_path": folder, "output_file_name": file_name}
        return {"output_path": uri}
    dataset = _object(props.get("outputDataset") or {}, "properties.outputDataset")
    if not dataset.get("path"):
        return {}
    store = str(dataset.get("datastoreId") or "workspaceblobstore").rstrip("/").rpartition("/")[2]
    return {"output_path": f"azureml://datastores/{store}/paths/{str(dataset['path']).lstrip('/')}"}


def invocation_to_arm(ws_id: str, endpoint: str, name: str, status: str) -> dict[str, Any]:
    """A batch job as ``batch_endpoints.invoke`` and ``list_jobs`` answer it (the SDK's ``BatchJob``)."""
    return {
        "id": f"{ws_id}/batchEndpoints/{endpoint}/jobs/{name}",
        "name": name,
        "type": "Microsoft.MachineLearningServices/workspaces/batchEndpoints/jobs",
        "properties": {"status": status, "outputFileName": None},
    }


# Tags the SDK reads on a job: ``jobs.download`` of a batch job (``azureml.batchrun`` and not a
# pipeline component's ``azureml.jobtype``) downloads its scoring child's ``score`` output.
BATCH_TAGS = {"azureml.batchrun": "true"}


def scoring_job_to_arm(view: Mapping[str, Any], ws_id: str) -> dict[str, Any]:
    """A batch invocation (a ``batch_scoring`` parent's native view) as Azure ML shows it: a
    pipeline-shaped job whose one step, the scoring child ``<job>-score``, run history lists
    (``jobs.list(parent_job_name=…)``), tagged as a batch run."""
    compute = view.get("compute")
    compute_id = f"{ws_id}/computes/{compute}" if isinstance(compute, str) and compute else None
    props: dict[str, Any] = {
        "jobType": "Pipeline",
        "displayName": view.get("display_name") or view["name"],
        "experimentName": view.get("experiment_name") or str(view.get("endpoint") or "Default"),
        "description": view.get("description"),
        "tags": {**dict(view.get("tags") or {}), **BATCH_TAGS},
        "properties": {
            "azureml.endpointName": str(view.get("endpoint") or ""),
            "azureml.deploymentName": str(view.get("deployment") or ""),
        },
        "status": view.get("status"),
        "isArchived": False,
        "services": arm_jobs.services_to_arm(view),
        "inputs": {k: arm_jobs._arm_input(v) for k, v in (view.get("inputs") or {}).items()},
        "outputs": {k: arm_jobs._arm_output(v) for k, v in (view.get("outputs") or {}).items()},
        "settings": {"default_compute": compute_id} if compute_id else {},
        "jobs": {},
    }
    if compute_id:
        props["computeId"] = compute_id
    return arm_jobs.job_resource(view, ws_id, props)
