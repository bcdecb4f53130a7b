"""Compute documents as Azure Resource Manager has them (what azure-ai-ml sends and reads) to and
from cloudlet's own (the CLI v2 YAML shape, ``compute_spec.py``). Pure: no I/O.

``from_arm`` turns a ``PUT …/computes/{name}`` body into the native document that
``services.compute.computes`` validates (so every rule stays there); ``to_arm`` turns the native view
(``services/views/computes.render``) into the ARM resource; ``arm_target`` names a native field by its
ARM path in error answers.
"""

from __future__ import annotations

import re
from typing import Any

from cloudlet.api.arm.wire.arm_schedules import trigger_from_arm
from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_spec import seconds_to_iso
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.errors import CloudletError

ARM_COMPUTE_TYPE = "Microsoft.MachineLearningServices/workspaces/computes"
ARM_TYPES: dict[str, str] = {
    ComputeType.AMLCOMPUTE: "AmlCompute",
    ComputeType.COMPUTE_INSTANCE: "ComputeInstance",
    ComputeType.VIRTUAL_MACHINE: "VirtualMachine",
    ComputeType.KUBERNETES: "Kubernetes",
}
NATIVE_TYPES = {arm.lower(): native for native, arm in ARM_TYPES.items()}
ISO_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")

# native field → where the SDK wrote it (for error targets)
_INNER = "properties.properties."
TARGETS = {
    "type": "properties.computeType",
    "size": _INNER + "vmSize",
    "tier": _INNER + "vmPriority",
    "min_instances": _INNER + "scaleSettings.minNodeCount",
    "max_instances": _INNER + "scaleSettings.maxNodeCount",
    "idle_time_before_scale_down": _INNER + "scaleSettings.nodeIdleTimeBeforeScaleDown",
    "idle_time_before_shutdown": _INNER + "idleTimeBeforeShutdown",
    "idle_time_before_shutdown_minutes": _INNER + "idleTimeBeforeShutdown",
    "ssh_settings.ssh_key_value": _INNER + "sshSettings.adminPublicKey",
    "ssh_public_access_enabled": _INNER + "sshSettings.sshPublicAccess",
    "create_on_behalf_of.user_object_id": _INNER + "personalComputeInstanceSettings.assignedUser.objectId",
    "enable_root_access": _INNER + "enableRootAccess",
    "location": "location",
    "description": "properties.description",
    "tags": "tags",
    "resource_id": "properties.resourceId",
    "address": _INNER + "address",
    "namespace": _INNER + "namespace",
}


def arm_target(native: str | None) -> str | None:
    if native is None:
        return None
    return TARGETS.get(native, native)


def _invalid(target: str, message: str) -> CloudletError:
    return CloudletError("ValidationError", message, target)


def iso_seconds(value: Any, target: str) -> int:
    """'PT2M' → 120, 'PT1H30M' → 5400, 'P1D' → 86400 (fractions of a second are dropped)."""
    match = ISO_DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None or value in ("P", "PT"):
        raise _invalid(target, f"{value!r} is not an ISO 8601 duration such as 'PT2M'")
    days, hours, minutes = (int(g or 0) for g in match.groups()[:3])
    return days * 86400 + hours * 3600 + minutes * 60 + int(float(match.group(4) or 0))


def as_object(value: Any, target: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(target, f"'{target}' must be a JSON object")
    return value


# The fields the OpenAPI document types (api/arm/computes.py): given, they are of that type; a
# string may be null (as GET shows it: a resource read and sent back), an object may not
# (scaleSettings is a PATCH's, read there).
NULLABLE_STRINGS = ("location", "computeLocation", "description", "resourceId")
_RESOURCE_TYPES: dict[str, Any] = {"location": str, "tags": dict, "identity": dict, "properties": dict}
_PROPERTIES_TYPES: dict[str, Any] = {
    "computeType": str,
    "computeLocation": str,
    "description": str,
    "resourceId": str,
    "properties": dict,
    "scaleSettings": dict,
}


def _check_types(parent: dict[str, Any], types: dict[str, Any], prefix: str) -> None:
    for key, kind in types.items():
        value = parent.get(key)
        if key not in parent or isinstance(value, kind) or (value is None and key in NULLABLE_STRINGS):
            continue
        raise _invalid(
            prefix + key, f"'{prefix}{key}' must be {'a string' if kind is str else 'a JSON object'}"
        )


def given_object(parent: dict[str, Any], key: str, target: str) -> dict[str, Any]:
    """PARENT[KEY], which when given (null included) is a JSON object; {} when not given."""
    if key in parent and not isinstance(parent[key], dict):
        raise _invalid(target, f"'{target}' must be a JSON object")
    return as_object(parent.get(key), target)


def _set(doc: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        doc[key] = value


def from_arm(body: Any, name: str) -> dict[str, Any]:
    """The native compute document for an ARM compute resource body."""
    resource = as_object(body, "$")
    _check_types(resource, _RESOURCE_TYPES, "")
    outer = as_object(resource.get("properties"), "properties")
    _check_types(outer, _PROPERTIES_TYPES, "properties.")
    arm_type = outer.get("computeType")
    if not isinstance(arm_type, str) or arm_type.lower() not in NATIVE_TYPES:
        raise CloudletError(
            "InvalidComputeType",
            f"properties.computeType {arm_type!r} is not supported; "
            f"use one of: {', '.join(ARM_TYPES.values())}",
            "properties.computeType",
        )
    kind = NATIVE_TYPES[arm_type.lower()]
    inner = as_object(outer.get("properties"), "properties.properties")
    doc: dict[str, Any] = {"name": name, "type": kind}
    _set(doc, "location", outer.get("computeLocation") or resource.get("location"))
    _set(doc, "description", outer.get("description"))
    _set(doc, "tags", resource.get("tags"))
    identity = _identity_from_arm(resource.get("identity"))
    _set(doc, "identity", identity)
    if kind == ComputeType.AMLCOMPUTE:
        _aml_from_arm(inner, doc)
    elif kind == ComputeType.COMPUTE_INSTANCE:
        _instance_from_arm(inner, doc)
    else:
        _set(doc, "resource_id", outer.get("resourceId"))
        if kind == ComputeType.VIRTUAL_MACHINE:
            _set(doc, "address", inner.get("address"))
            _vm_ssh_from_arm(inner, doc)
        else:
            _set(doc, "namespace", inner.get("namespace"))
    return doc


def _vm_ssh_from_arm(inner: dict[str, Any], doc: dict[str, Any]) -> None:
    """Azure's VirtualMachine ``sshPort`` and ``administratorAccount`` as ``ssh_settings``; a key
    is cloudlet's ``sshPrivateKeyFile`` (a path on the server: key material is not taken)."""
    account = as_object(inner.get("administratorAccount"), _INNER + "administratorAccount")
    ssh: dict[str, Any] = {}
    _set(ssh, "admin_username", account.get("username"))
    _set(ssh, "admin_password", account.get("password"))
    _set(ssh, "ssh_private_key_file", account.get("sshPrivateKeyFile"))
    _set(ssh, "ssh_port", inner.get("sshPort"))
    if account.get("privateKeyData"):
        raise _invalid(
            _INNER + "administratorAccount.privateKeyData",
            "cloudlet does not take key material over the API: put the key on the server and name it "
            "in administratorAccount.sshPrivateKeyFile (ssh_settings.ssh_private_key_file in YAML)",
        )
    _set(doc, "ssh_settings", ssh or None)


def _vm_to_arm(view: dict[str, Any]) -> dict[str, Any]:
    ssh = view.get("ssh_settings") or {}
    inner: dict[str, Any] = {"address": view.get("address"), "sshPort": ssh.get("ssh_port")}
    if ssh.get("admin_username"):
        inner["administratorAccount"] = {"username": ssh["admin_username"]}
    if "state" in view:
        inner["state"] = view["state"]
    return inner


def _identity_from_arm(value: Any) -> dict[str, Any] | None:
    identity = as_object(value, "identity")
    kind = identity.get("type")
    if kind is None or (isinstance(kind, str) and kind.lower() == "none"):
        return None
    if not isinstance(kind, str):
        raise _invalid("identity.type", "identity.type is a string: SystemAssigned or UserAssigned")
    folded = kind.replace(" ", "").lower()
    native = {
        "systemassigned": "system_assigned",
        "userassigned": "user_assigned",
        "systemassigned,userassigned": "system_assigned,user_assigned",
    }.get(folded)
    if native is None:
        raise _invalid("identity.type", f"identity.type {kind!r} is not SystemAssigned or UserAssigned")
    users = as_object(identity.get("userAssignedIdentities"), "identity.userAssignedIdentities")
    out: dict[str, Any] = {"type": native}
    if users:
        out["user_assigned_identities"] = [{"resource_id": rid} for rid in users]
    return out


def _aml_from_arm(inner: dict[str, Any], doc: dict[str, Any]) -> None:
    target = _INNER + "scaleSettings"
    scale = as_object(inner.get("scaleSettings"), target)
    _set(doc, "size", inner.get("vmSize"))
    _set(doc, "tier", inner.get("vmPriority"))
    _set(doc, "min_instances", scale.get("minNodeCount"))
    _set(doc, "max_instances", scale.get("maxNodeCount"))
    idle = scale.get("nodeIdleTimeBeforeScaleDown")
    if idle is not None:
        doc["idle_time_before_scale_down"] = iso_seconds(idle, target + ".nodeIdleTimeBeforeScaleDown")
    access = inner.get("remoteLoginPortPublicAccess")
    if access in ("Enabled", "Disabled"):
        doc["ssh_public_access_enabled"] = access == "Enabled"
    credentials = as_object(inner.get("userAccountCredentials"), _INNER + "userAccountCredentials")
    if credentials:
        doc["ssh_settings"] = {
            k: v
            for k, v in {
                "admin_username": credentials.get("adminUserName"),
                "ssh_key_value": credentials.get("adminUserSshPublicKey"),
                "admin_password": credentials.get("adminUserPassword"),
            }.items()
            if v is not None
        }
    _set(doc, "enable_node_public_ip", inner.get("enableNodePublicIp"))


def _instance_from_arm(inner: dict[str, Any], doc: dict[str, Any]) -> None:
    _set(doc, "size", inner.get("vmSize"))
    _set(doc, "idle_time_before_shutdown", inner.get("idleTimeBeforeShutdown"))
    for arm, native in (
        ("enableNodePublicIp", "enable_node_public_ip"),
        ("enableSSO", "enable_sso"),
        ("enableRootAccess", "enable_root_access"),
        ("enableOSPatching", "enable_os_patching"),
        ("releaseQuotaOnStop", "release_quota_on_stop"),
    ):
        _set(doc, native, inner.get(arm))
    ssh = as_object(inner.get("sshSettings"), _INNER + "sshSettings")
    if ssh.get("sshPublicAccess") in ("Enabled", "Disabled"):
        doc["ssh_public_access_enabled"] = ssh["sshPublicAccess"] == "Enabled"
    settings = {
        k: v
        for k, v in {
            "ssh_key_value": ssh.get("adminPublicKey"),
            "admin_username": ssh.get("adminUserName"),
            "ssh_port": ssh.get("sshPort"),
        }.items()
        if v is not None
    }
    if settings:
        doc["ssh_settings"] = settings
    _schedules_from_arm(inner, doc)
    if inner.get("setupScripts"):
        raise _invalid(
            _INNER + "setupScripts",
            "setup scripts sent through azure-ai-ml are not supported yet; give them in a compute file "
            "(`cloudlet compute create --file instance.yml` with setup_scripts)",
        )
    personal = as_object(
        inner.get("personalComputeInstanceSettings"), _INNER + "personalComputeInstanceSettings"
    )
    user = as_object(personal.get("assignedUser"), _INNER + "personalComputeInstanceSettings.assignedUser")
    if user.get("objectId"):
        doc["create_on_behalf_of"] = {"user_object_id": user["objectId"]}
        _set(doc["create_on_behalf_of"], "user_tenant_id", user.get("tenantId"))


def _schedules_from_arm(inner: dict[str, Any], doc: dict[str, Any]) -> None:
    """``schedules.computeStartStop[]`` (cron or recurrence triggers) in the native shape."""
    target = _INNER + "schedules.computeStartStop"
    items = as_object(inner.get("schedules"), _INNER + "schedules").get("computeStartStop") or []
    if not isinstance(items, list):
        raise _invalid(target, f"'{target}' must be a list")
    out = []
    for i, item in enumerate(items):
        item = as_object(item, f"{target}[{i}]")
        kind = str(item.get("triggerType") or ("Cron" if item.get("cron") else "Recurrence")).lower()
        kind = "cron" if kind == "cron" else "recurrence"
        source = as_object(item.get(kind), f"{target}[{i}].{kind}")
        trigger = trigger_from_arm(kind, source, f"{target}[{i}].{kind}")  # job schedules' fields
        entry = {"action": str(item.get("action", "")).lower(), "trigger": trigger}
        if item.get("status"):
            entry["state"] = str(item["status"]).lower()
        out.append(entry)
    if out:
        doc["schedules"] = {"compute_start_stop": out}


# -- native view → ARM resource ----------------------------------------------------------------
def to_arm(view: dict[str, Any]) -> dict[str, Any]:
    """The ARM resource for a native compute view (``services/views/computes.render``)."""
    kind = view["type"]
    outer: dict[str, Any] = {
        "computeType": ARM_TYPES.get(kind, "UnsupportedCompute"),
        "computeLocation": view.get("location"),
        "description": view.get("description"),
        "provisioningState": view.get("provisioning_state"),
        "provisioningErrors": [
            {"error": {"code": e.get("code"), "message": e.get("message")}}
            for e in view.get("provisioning_errors") or []
            if isinstance(e, dict)
        ]
        or None,
        "createdOn": view.get("created_on"),
        "modifiedOn": view.get("last_modified_on"),
        "isAttachedCompute": kind in compute_types.ATTACHED,
        "disableLocalAuth": True,
        "resourceId": view.get("resource_id"),
    }
    if kind == ComputeType.AMLCOMPUTE:
        outer["properties"] = _aml_to_arm(view)
    elif kind == ComputeType.COMPUTE_INSTANCE:
        outer["properties"] = _instance_to_arm(view)
    else:
        inner = _vm_to_arm(view) if kind == ComputeType.VIRTUAL_MACHINE else {}
        if kind == ComputeType.KUBERNETES:
            inner["namespace"] = view.get("namespace")
        outer["properties"] = inner
    resource: dict[str, Any] = {
        "id": view["id"],
        "name": view["name"],
        "type": ARM_COMPUTE_TYPE,
        "location": view.get("location"),
        "tags": view.get("tags") or {},
        "properties": outer,
    }
    identity = view.get("identity")
    if isinstance(identity, dict) and identity.get("type") not in (None, "none"):
        arm_identity = {
            "system_assigned": "SystemAssigned",
            "user_assigned": "UserAssigned",
            "system_assigned,user_assigned": "SystemAssigned,UserAssigned",
        }.get(identity["type"], "None")
        resource["identity"] = {"type": arm_identity}
    return resource


def _aml_to_arm(view: dict[str, Any]) -> dict[str, Any]:
    tier = view.get("tier", Tier.DEDICATED)
    return {
        "vmSize": view.get("size"),
        "vmPriority": "LowPriority" if tier == Tier.LOW_PRIORITY else "Dedicated",
        "scaleSettings": {
            "minNodeCount": view.get("min_instances", 0),
            "maxNodeCount": view.get("max_instances"),
            "nodeIdleTimeBeforeScaleDown": seconds_to_iso(int(view.get("idle_time_before_scale_down") or 0)),
        },
        "remoteLoginPortPublicAccess": "Enabled" if view.get("ssh_public_access_enabled") else "Disabled",
        "enableNodePublicIp": view.get("enable_node_public_ip", True),
        "osType": "Linux",
        "allocationState": view.get("allocation_state"),
        "currentNodeCount": view.get("current_node_count", 0),
        "targetNodeCount": view.get("target_node_count", 0),
        "errors": None,
    }


def _instance_to_arm(view: dict[str, Any]) -> dict[str, Any]:
    minutes = view.get("idle_time_before_shutdown_minutes")
    ssh = view.get("ssh_settings") or {}
    inner: dict[str, Any] = {
        "vmSize": view.get("size"),
        "state": view.get("state"),
        "idleTimeBeforeShutdown": f"PT{minutes}M" if minutes else None,
        "enableNodePublicIp": view.get("enable_node_public_ip", True),
        "enableSSO": view.get("enable_sso", True),
        "enableRootAccess": view.get("enable_root_access", True),
        "enableOSPatching": view.get("enable_os_patching", False),
        "releaseQuotaOnStop": view.get("release_quota_on_stop", False),
        "applicationSharingPolicy": "Personal",
        "computeInstanceAuthorizationType": "personal",
        "sshSettings": {
            "sshPublicAccess": "Enabled" if view.get("ssh_public_access_enabled") else "Disabled",
            "adminUserName": ssh.get("admin_username"),
            "sshPort": ssh.get("ssh_port"),
            "adminPublicKey": ssh.get("ssh_key_value"),
        },
        "applications": [
            {"displayName": app.get("display_name"), "endpointUri": app.get("endpoint_uri")}
            for app in view.get("services") or []
            if isinstance(app, dict)
        ],
    }
    on_behalf = view.get("create_on_behalf_of")
    if isinstance(on_behalf, dict):
        user = {"objectId": on_behalf.get("user_object_id"), "tenantId": on_behalf.get("user_tenant_id")}
        inner["personalComputeInstanceSettings"] = {"assignedUser": user}
    return inner


def node_to_arm(node: dict[str, Any]) -> dict[str, Any]:
    """listNodes keeps Azure's keys only (``services.compute.nodes.render`` adds cloudlet's detail)."""
    keys = ("nodeId", "privateIpAddress", "publicIpAddress", "port", "nodeState", "runId")
    return {key: node.get(key) for key in keys}
