"""Command jobs in the ARM wire shape the azure-ai-ml SDK speaks, to and from cloudlet's job
document (the CLI v2 YAML shape, ``job_spec.CommandJobSpec``). Pure.

The SDK sends ``PUT {ws}/jobs/{name}`` with ``{"properties": {"jobType": "Command", "command",
"codeId", "computeId", "environmentId", "inputs": {n: {"jobInputType", "uri" | "value", "mode"}},
"outputs", "distribution": {"distributionType", …}, "resources": {"instanceCount", …},
"limits": {"timeout": "PT10M"}, …}}`` (recorded from azure-ai-ml 1.35.2 in
tests/data/arm_jobs/). References to other resources (``codeId``, ``environmentId``,
``computeId``) arrive as ARM ids; ``from_arm`` turns them into the document's own references with
the ``Refs`` the caller passes, so this module needs no store. Errors name the ARM field
(``properties.inputs.data.uri``) so the SDK's user sees which of their arguments is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs import notifications as notification_rules
from cloudlet.domain.jobs import queue_settings

JOB_TYPE = "Command"
# ARM's input modes and their CLI v2 names.
_INPUT_MODES = {
    "readonlymount": "ro_mount",
    "readwritemount": "rw_mount",
    "download": "download",
    "direct": "direct",
    "evalmount": "ro_mount",
    "evaldownload": "download",
}
_OUTPUT_MODES = {"readwritemount": "rw_mount", "upload": "upload", "direct": "rw_mount"}
_ARM_INPUT_MODE = {
    "ro_mount": "ReadOnlyMount",
    "rw_mount": "ReadWriteMount",
    "download": "Download",
    "direct": "Direct",
}
_ARM_OUTPUT_MODE = {"rw_mount": "ReadWriteMount", "upload": "Upload"}
_DATA_TYPES = ("uri_file", "uri_folder", "mltable", "custom_model", "mlflow_model", "triton_model")
_DISTRIBUTIONS = {"pytorch": "PyTorch", "mpi": "Mpi", "tensorflow": "TensorFlow"}
_SERVICE_FIELDS = {"job_service_type": "jobServiceType"}  # a job service's field, native -> REST
_ID_NAME = re.compile(r"/(computes|codes|environments)/([^/]+)(?:/versions/([^/]+))?/?$", re.IGNORECASE)
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


@dataclass(frozen=True)
class Refs:
    """How the caller's store names what an ARM id points at: ``code`` maps a code version's ARM
    id to the document's ``code`` (a snapshot reference) and raises the store's not-found error
    itself; environments and computes are named by the document as ``azureml:name[:version]``."""

    code: Callable[[str], str]


def arm_name(arm_id: str, kind: str) -> tuple[str, str | None] | None:
    """(name, version) of a ``…/{kind}/{name}[/versions/{v}]`` ARM id (with or without the SDK's
    ``azureml:`` prefix), None for anything else."""
    match = _ID_NAME.search(arm_id.removeprefix("azureml:"))
    if match is None or match.group(1).lower() != kind:
        return None
    return match.group(2), match.group(3)


def iso_seconds(value: str, field: str) -> int:
    """'PT10M' → 600; a bare number is taken as seconds (older SDKs send them)."""
    if re.fullmatch(r"\d+", value):
        return int(value)
    match = _DURATION.fullmatch(value)
    if not match or value in ("P", "PT"):
        raise validation_error(field, f"'{value}' is not an ISO 8601 duration such as 'PT10M'")
    days, hours, minutes = (int(g or 0) for g in match.groups()[:3])
    seconds = float(match.group(4) or 0)
    return int(days * 86400 + hours * 3600 + minutes * 60 + seconds)


def seconds_iso(seconds: int) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    out = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    return out + (f"{secs}S" if secs or out == "PT" else "")


# -- ARM → document -----------------------------------------------------------------------------
def from_arm(body: Any, name: str, refs: Refs) -> dict[str, Any]:
    """The job document for an SDK ``PUT {ws}/jobs/{name}`` body (validated later, as any
    document, by ``job_spec.parse_job``)."""
    props = _object(body.get("properties") if isinstance(body, Mapping) else None, "properties")
    job_type = props.get("jobType")
    if job_type != JOB_TYPE:
        raise validation_error(
            "properties.jobType",
            f"jobType {job_type!r} is not supported here yet; submit a Command job",
            code="UnsupportedJobType",
        )
    doc: dict[str, Any] = {"type": "command", "name": name, "command": props.get("command")}
    for arm, key in (
        ("displayName", "display_name"),
        ("experimentName", "experiment_name"),
        ("description", "description"),
    ):
        if props.get(arm) is not None:
            doc[key] = props[arm]
    for arm, key in (("tags", "tags"), ("environmentVariables", "environment_variables")):
        if props.get(arm):
            doc[key] = dict(_object(props[arm], f"properties.{arm}"))
    if props.get("codeId"):
        doc["code"] = refs.code(str(props["codeId"]))
    if props.get("environmentId"):
        doc["environment"] = _environment(str(props["environmentId"]))
    if props.get("computeId"):
        doc["compute"] = _compute(str(props["computeId"]))
    doc["inputs"] = {
        k: _input(k, v) for k, v in _object(props.get("inputs") or {}, "properties.inputs").items()
    }
    doc["outputs"] = {
        k: _output(k, v) for k, v in _object(props.get("outputs") or {}, "properties.outputs").items()
    }
    if props.get("resources"):
        doc["resources"] = _resources(_object(props["resources"], "properties.resources"))
    if props.get("distribution"):
        doc["distribution"] = _distribution(_object(props["distribution"], "properties.distribution"))
    limits = props.get("limits")
    if isinstance(limits, Mapping) and limits.get("timeout"):
        doc["limits"] = {"timeout": iso_seconds(str(limits["timeout"]), "properties.limits.timeout")}
    queue = props.get("queueSettings")
    if isinstance(queue, Mapping):  # "Spot", 3: the job model's QueueSettings reads both spellings
        doc["queue_settings"] = {
            k: v
            for k, v in (("job_tier", queue.get("jobTier")), ("priority", queue.get("priority")))
            if v is not None
        }
    identity = props.get("identity")
    if isinstance(identity, Mapping) and identity.get("identityType"):
        doc["identity"] = {"type": _identity_type(str(identity["identityType"]))}
    if props.get("notificationSetting"):
        doc["notification_setting"] = notification_from_arm(props["notificationSetting"])
    return doc


def notification_from_arm(value: Any) -> dict[str, Any]:
    """Azure's ``notificationSetting`` (``emailOn``, ``emails``, ``webhooks: {NAME: {webhookType,
    eventType, url}}``) as the job document's ``notification_setting`` (validated with it)."""
    setting = _object(value, "properties.notificationSetting")
    doc: dict[str, Any] = {}
    if setting.get("emails") is not None:
        doc["emails"] = setting["emails"]
    if setting.get("emailOn") is not None:
        doc["email_on"] = setting["emailOn"]
    hooks = _object(setting.get("webhooks") or {}, "properties.notificationSetting.webhooks")
    if hooks:
        doc["webhooks"] = {
            name: {
                key: hook[arm]
                for arm, key in (("url", "url"), ("eventType", "event_type"), ("webhookType", "webhook_type"))
                if isinstance(hook, Mapping) and hook.get(arm) is not None
            }
            for name, hook in hooks.items()
        }
    return doc


def queue_settings_to_arm(shown: Mapping[str, Any]) -> dict[str, Any]:
    """The view's ``queue_settings`` (``queue_settings.shown``) in the SDK's wire shape:
    ``{"jobTier": "Spot", "priority": 3}`` (``JobTierNames``/``JobPriorityValues``: the tier's
    PascalCase name, the priority as 1/2/3); no ``jobTier`` for the default tier."""
    out: dict[str, Any] = {}
    if shown.get("job_tier"):
        out["jobTier"] = str(shown["job_tier"]).capitalize()
    if shown.get("priority") in queue_settings.PRIORITY_VALUES:
        out["priority"] = queue_settings.PRIORITY_VALUES[str(shown["priority"])]
    return out


def notification_to_arm(setting: Mapping[str, Any]) -> dict[str, Any]:
    """A stored ``notification_setting`` in Azure's REST shape (events in their PascalCase names)."""
    hooks = {}
    for name, hook in (setting.get("webhooks") or {}).items():
        arm: dict[str, Any] = {"url": hook["url"]}
        if hook.get("event_type"):
            arm["eventType"] = notification_rules.EVENTS.get(hook["event_type"], hook["event_type"])
        if hook.get("webhook_type"):
            arm["webhookType"] = hook["webhook_type"]
        hooks[name] = arm
    return {
        "emails": list(setting.get("emails") or []),
        "emailOn": [notification_rules.EVENTS.get(e, e) for e in setting.get("email_on") or []],
        "webhooks": hooks,
    }


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise validation_error(field, f"'{field}' must be an object")
    return value


def _environment(env_id: str) -> str:
    if env_id.startswith("azureml://registries/"):
        return env_id  # a curated (registry) environment: resolved as the document resolves it
    named = arm_name(env_id, "environments")
    if named is None:
        if env_id.startswith("azureml:"):
            return env_id
        raise validation_error(
            "properties.environmentId",
            f"environmentId {env_id!r} is not an environment version's id "
            "(…/environments/{name}/versions/{version}) or a registry environment",
        )
    env, version = named
    return f"azureml:{env}:{version}" if version else f"azureml:{env}@latest"


def _compute(compute_id: str) -> str:
    named = arm_name(compute_id, "computes")
    return f"azureml:{named[0]}" if named else compute_id


def _input(key: str, value: Any) -> Any:
    field = f"properties.inputs.{key}"
    item = _object(value, field)
    kind = str(item.get("jobInputType") or "").lower()
    if kind == "literal":
        return str(item.get("value", ""))
    if kind not in _DATA_TYPES:
        raise validation_error(
            f"{field}.jobInputType",
            f"input type {item.get('jobInputType')!r} is not supported; use literal or one of "
            + ", ".join(_DATA_TYPES),
        )
    out: dict[str, Any] = {"type": kind, "path": item.get("uri")}
    mode = _mode(item, field, _INPUT_MODES, _ARM_INPUT_MODE.values())
    if mode:
        out["mode"] = mode
    if item.get("description"):
        out["description"] = item["description"]
    return out


def _output(key: str, value: Any) -> dict[str, Any]:
    field = f"properties.outputs.{key}"
    item = _object(value, field)
    kind = str(item.get("jobOutputType") or "uri_folder").lower()
    if kind not in _DATA_TYPES:
        raise validation_error(f"{field}.jobOutputType", f"output type {kind!r} is not one of {_DATA_TYPES}")
    out: dict[str, Any] = {"type": kind}
    if item.get("uri"):
        out["path"] = item["uri"]
    mode = _mode(item, field, _OUTPUT_MODES, _ARM_OUTPUT_MODE.values())
    if mode:
        out["mode"] = mode
    if item.get("assetName"):
        out["name"] = item["assetName"]
    if item.get("assetVersion"):
        out["version"] = str(item["assetVersion"])
    if item.get("description"):
        out["description"] = item["description"]
    return out


def _mode(item: Mapping[str, Any], field: str, modes: Mapping[str, str], names: Iterable[str]) -> str | None:
    """The document's mode for an ARM ``mode`` (any case), None when there is none."""
    given = str(item.get("mode") or "")
    if not given:
        return None
    if given.lower() not in modes:
        raise validation_error(f"{field}.mode", f"mode {given!r} is not one of {', '.join(names)}")
    return modes[given.lower()]


def _resources(item: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm, key in (
        ("instanceCount", "instance_count"),
        ("instanceType", "instance_type"),
        ("shmSize", "shm_size"),
    ):
        if item.get(arm) is not None:
            out[key] = item[arm]
    if item.get("properties"):
        out["properties"] = dict(item["properties"])
    return out


def _distribution(item: Mapping[str, Any]) -> dict[str, Any]:
    kind = str(item.get("distributionType") or "").lower()
    if kind not in _DISTRIBUTIONS:
        raise validation_error(
            "properties.distribution.distributionType",
            f"distribution {item.get('distributionType')!r} is not one of PyTorch, Mpi, TensorFlow",
        )
    out: dict[str, Any] = {"type": kind}
    for arm, key in (
        ("processCountPerInstance", "process_count_per_instance"),
        ("workerCount", "worker_count"),
        ("parameterServerCount", "parameter_server_count"),
    ):
        if item.get(arm) is not None:
            out[key] = item[arm]
    return out


def _identity_type(value: str) -> str:
    folded = value.lower()
    return {"amltoken": "aml_token", "useridentity": "user_identity", "managed": "managed"}.get(
        folded, folded
    )


# -- document view → ARM --------------------------------------------------------------------------
def to_arm(view: Mapping[str, Any], workspace_id: str, code_id: str | None = None) -> dict[str, Any]:
    """The ARM resource for a job's native view (``services.views.jobs.render``): what ``jobs.get``,
    ``jobs.list`` and the answer to the PUT carry. ``workspace_id`` is the workspace's ARM id."""
    props: dict[str, Any] = {
        "jobType": JOB_TYPE,
        "command": view.get("command"),
        "displayName": view.get("display_name") or view["name"],
        "experimentName": view.get("experiment_name") or "Default",
        "description": view.get("description"),
        "tags": dict(view.get("tags") or {}),
        "properties": {str(k): str(v) for k, v in (view.get("properties") or {}).items()},
        "environmentVariables": dict(view.get("environment_variables") or {}),
        "status": view.get("status"),
        "isArchived": False,
        "inputs": {k: _arm_input(v) for k, v in (view.get("inputs") or {}).items()},
        "outputs": {k: _arm_output(v) for k, v in (view.get("outputs") or {}).items()},
        "services": services_to_arm(view),
    }
    if code_id:
        props["codeId"] = code_id
    env = view.get("environment")
    if isinstance(env, str):
        props["environmentId"] = _arm_environment(env, workspace_id)
    elif isinstance(env, Mapping) and env.get("name") and env.get("version"):
        # a workspace environment, inlined at submission (services.assets.assets.resolve_job)
        props["environmentId"] = f"{workspace_id}/environments/{env['name']}/versions/{env['version']}"
    if view.get("compute") and view.get("compute") not in ("serverless",):
        props["computeId"] = f"{workspace_id}/computes/{view['compute']}"
    resources = view.get("resources") or {}
    props["resources"] = {
        k: v
        for k, v in (
            ("instanceCount", resources.get("instance_count", 1)),
            ("instanceType", resources.get("instance_type")),
            ("shmSize", resources.get("shm_size")),
        )
        if v is not None
    }
    dist = view.get("distribution")
    if isinstance(dist, Mapping):
        props["distribution"] = {"distributionType": _DISTRIBUTIONS[str(dist["type"])]} | {
            arm: dist[key]
            for arm, key in (
                ("processCountPerInstance", "process_count_per_instance"),
                ("workerCount", "worker_count"),
                ("parameterServerCount", "parameter_server_count"),
            )
            if dist.get(key) is not None
        }
    limits = view.get("limits")
    if isinstance(limits, Mapping) and limits.get("timeout"):
        props["limits"] = {"jobLimitsType": "Command", "timeout": seconds_iso(int(limits["timeout"]))}
    queue = view.get("queue_settings")
    if isinstance(queue, Mapping) and queue:
        props["queueSettings"] = queue_settings_to_arm(queue)
    if isinstance(view.get("notification_setting"), Mapping):
        props["notificationSetting"] = notification_to_arm(view["notification_setting"])
    return job_resource(view, workspace_id, props)


def services_to_arm(view: Mapping[str, Any]) -> dict[str, Any]:
    """A job view's ``services`` as the REST ``JobService`` names its fields (``jobServiceType``):
    the SDK's ``Job.studio_url`` reads ``services["Studio"].endpoint``. Every job kind's resource
    carries them so."""
    return {
        name: {_SERVICE_FIELDS.get(key, key): value for key, value in service.items()}
        for name, service in (view.get("services") or {}).items()
    }


def job_resource(view: Mapping[str, Any], workspace_id: str, props: dict[str, Any]) -> dict[str, Any]:
    """The ARM job resource around PROPS (any job type): id, name, the error, systemData."""
    props.setdefault("properties", {}).update(wait_properties(view.get("waiting")))
    error = view.get("error")
    if error:
        props["error"] = {"code": error.get("code", "JobFailed"), "message": error.get("message", "")}
    created = view.get("creation_context") or {}
    return {
        "id": f"{workspace_id}/jobs/{view['name']}",
        "name": view["name"],
        "type": "Microsoft.MachineLearningServices/workspaces/jobs",
        "properties": props,
        "systemData": {
            "createdAt": created.get("created_at"),
            "createdBy": created.get("created_by"),
            "createdByType": "User",
        },
    }


WAIT_PREFIX = "cloudlet.wait."


def wait_properties(waiting: Any) -> dict[str, str]:
    """A queued job's wait (the view's ``waiting``) as entries of the job's ``properties``, which the
    SDK keeps (``ml_client.jobs.get(name).properties``; string values, as Azure's): ``reason`` (the
    code), ``message``, ``position`` ("3", or "10,000+" deeper than the queue read), ``eta`` (ISO
    time) and ``etaInSeconds``, ``asOf``, and ``etaNote`` where the estimate includes a node's boot.
    None of them once the job runs."""
    if not isinstance(waiting, Mapping):
        return {}
    values = {
        "reason": waiting.get("code"),
        "message": waiting.get("message"),
        "position": waiting.get("position_text"),
        "eta": waiting.get("eta"),
        "etaInSeconds": waiting.get("eta_in_s"),
        "asOf": waiting.get("as_of"),
        "etaNote": waiting.get("eta_note"),  # where the estimate includes a node's boot
    }
    return {WAIT_PREFIX + key: str(value) for key, value in values.items() if value is not None}


def environment_id(env: Any, workspace_id: str) -> str | None:
    """A stored ``environment`` as ARM's ``environmentId``: ``azureml:<n>:<v>`` (or a workspace
    environment inlined when it was resolved, which keeps its ``name`` and ``version``) → the
    version's id; ``azureml:<n>@latest`` → the container's; a registry URI as it is; None for
    an inline environment of no registered version (or none)."""
    if isinstance(env, str):
        return _arm_environment(env, workspace_id)
    if isinstance(env, Mapping) and env.get("name") and env.get("version"):
        return f"{workspace_id}/environments/{env['name']}/versions/{env['version']}"
    return None


def _arm_environment(env: str, workspace_id: str) -> str:
    if env.startswith("azureml:") and not env.startswith("azureml://"):
        name = env.removeprefix("azureml:")
        if "@" in name:
            name, _ = name.split("@", 1)
            return f"{workspace_id}/environments/{name}"
        if ":" in name:
            name, version = name.split(":", 1)
            return f"{workspace_id}/environments/{name}/versions/{version}"
    return env


def _arm_input(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        return {"jobInputType": "literal", "value": str(value)}
    if value.get("type") not in _DATA_TYPES:
        literal = value.get("value", value.get("default"))
        return {"jobInputType": "literal", "value": str(literal)}
    out = {"jobInputType": value["type"], "uri": value.get("path")}
    if value.get("mode"):
        out["mode"] = _ARM_INPUT_MODE.get(str(value["mode"]), str(value["mode"]))
    return out


def _arm_output(value: Any) -> dict[str, Any]:
    item = value if isinstance(value, Mapping) else {}
    out: dict[str, Any] = {"jobOutputType": item.get("type", "uri_folder")}
    if item.get("uri") or item.get("path"):
        out["uri"] = item.get("uri") or item.get("path")
    out["mode"] = _ARM_OUTPUT_MODE.get(str(item.get("mode") or "rw_mount"), "ReadWriteMount")
    if item.get("name"):
        out["assetName"] = item["name"]
    if item.get("version"):
        out["assetVersion"] = str(item["version"])
    return out
