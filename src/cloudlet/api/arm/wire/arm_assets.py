"""Data, model and environment asset versions between the ARM shapes azure-ai-ml sends and parses
(``{"properties": {"dataType", "dataUri", …}}``) and cloudlet's asset documents (the CLI v2 YAML
shape ``domain/assets/assets.py`` validates). Pure: the rules stay in ``domain/assets/assets.py``.

- ``from_arm(kind, body, workspace_arm_id)``: the document to validate, and ``isArchived`` when the
  body says it (the SDK archives by PUTting the version with ``isArchived: true``);
- ``version_view`` / ``container_view``: the ARM resources, with ``systemData``;
- ``arm_target``: a native error's field target, named as the ARM body names it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import yaml

from cloudlet.domain.assets.assets import COLLECTIONS, AssetKind
from cloudlet.domain.errors import validation_error

PROVIDER_TYPE = "Microsoft.MachineLearningServices/workspaces"
# The environment azure-ai-ml makes for a job's inline environment (versions named by a hash).
ANONYMOUS_ENVIRONMENT = "CliV2AnonymousEnvironment"
# ARM property → document field, per kind (both ways).
_FIELDS: dict[AssetKind, dict[str, str]] = {
    "data": {"dataType": "type", "dataUri": "path"},
    "model": {
        "modelType": "type",
        "modelUri": "path",
        "flavors": "flavors",
        "jobName": "job_name",
        "stage": "stage",
    },
    "environment": {
        "image": "image",
        "condaFile": "conda_file",
        "osType": "os_type",
        "build": "build",
        "inferenceConfig": "inference_config",
    },
}
# The kinds translated here (components have their own: api/arm/wire/arm_components.py).
KINDS: tuple[AssetKind, ...] = tuple(_FIELDS)
_COMMON = {"description": "description", "tags": "tags", "properties": "properties"}
_LONG_WORKSPACE = re.compile(
    r"^azureml://subscriptions/[^/]+/resource[gG]roups/[^/]+/(?:providers/[^/]+/)?workspaces/([^/]+)/"
)


@dataclass(frozen=True)
class ArmVersion:
    doc: dict[str, Any]  # the asset document (YAML field names), not yet validated
    archived: bool | None  # isArchived, when the body says it


def from_arm(kind: AssetKind, body: Any, workspace: str) -> ArmVersion:
    """The document for an SDK ``PUT {ws}/{kind}/{name}/versions/{v}`` body. WORKSPACE: the
    workspace's name, which a long datastore URI the SDK writes after its upload must name."""
    if not isinstance(body, Mapping) or not isinstance(body.get("properties"), Mapping):
        raise validation_error("properties", "the body must be an object with 'properties' (an object)")
    props: Mapping[str, Any] = body["properties"]
    fields = {**_COMMON, **_FIELDS[kind]}
    doc: dict[str, Any] = {}
    for arm, key in fields.items():
        value = props.get(arm)
        if value is None:
            continue
        doc[key] = value
    if isinstance(doc.get("type"), str):
        doc["type"] = doc["type"].lower()
    path = doc.get("path")
    if isinstance(path, str):
        match = _LONG_WORKSPACE.match(path.strip())
        if match and match.group(1).lower() != workspace.lower():
            uri = "dataUri" if kind == "data" else "modelUri"
            raise validation_error(
                f"properties.{uri}",
                f"{path!r} is in workspace '{match.group(1)}', not '{workspace}'; upload it to this "
                "workspace's datastore (the SDK does so for a local path)",
            )
    conda = doc.get("conda_file")
    if isinstance(conda, str):
        doc["conda_file"] = _conda(conda)
    if isinstance(doc.get("os_type"), str) and doc["os_type"].lower() == "linux":
        del doc["os_type"]  # the only one (what a version reads back as): not stored
    for key in ("tags", "properties", "flavors"):  # empty: as if not given (a re-PUT of a GET)
        if not doc.get(key):
            doc.pop(key, None)
    archived = props.get("isArchived")
    if archived is not None and not isinstance(archived, bool):
        raise validation_error("properties.isArchived", "isArchived must be true or false")
    return ArmVersion(doc, archived)


def _conda(text: str) -> Any:
    """ARM carries the conda file as its YAML text; the document as the mapping it is."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise validation_error("properties.condaFile", f"condaFile is not YAML: {exc}") from None
    if not isinstance(value, dict):
        raise validation_error(
            "properties.condaFile", "condaFile must be a conda environment file (a YAML mapping)"
        )
    return value


def arm_target(kind: AssetKind, target: str | None) -> str | None:
    """A native document field (``path``, ``type``, ``conda_file.x``) as the ARM body's property."""
    if target is None:
        return None
    if target == "$":  # the document as a whole: the body's properties
        return "properties"
    head, dot, rest = target.partition(".")
    names = {v: k for k, v in {**_COMMON, **_FIELDS[kind]}.items()}
    if head in names:
        return f"properties.{names[head]}{dot}{rest}"
    return target


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat()


@dataclass(frozen=True)
class VersionRow:
    """What a rendered version needs of a stored one."""

    name: str
    version: str
    spec: Mapping[str, Any]
    archived: bool
    created_by: str
    created_at: float
    modified_at: float


def _system(created_by: str, created_at: float, modified_at: float) -> dict[str, Any]:
    return {
        "createdAt": _when(created_at),
        "createdBy": created_by,
        "createdByType": "User",
        "lastModifiedAt": _when(modified_at),
        "lastModifiedBy": created_by,
        "lastModifiedByType": "User",
    }


def version_view(kind: AssetKind, workspace_id: str, row: VersionRow) -> dict[str, Any]:
    """A version as ARM answers it (``workspace_id``: the workspace's ARM id)."""
    collection = COLLECTIONS[kind]
    spec = row.spec
    props: dict[str, Any] = {
        "description": spec.get("description"),
        "tags": dict(spec.get("tags") or {}),
        "properties": dict(spec.get("properties") or {}),
        "isArchived": row.archived,
        "isAnonymous": kind == "environment" and row.name == ANONYMOUS_ENVIRONMENT,
        "provisioningState": "Succeeded",
    }
    for arm, key in _FIELDS[kind].items():
        if spec.get(key) is not None:
            props[arm] = spec[key]
    if kind == "data":
        props.setdefault("dataType", "uri_folder")
    elif kind == "model":
        props.setdefault("modelType", "custom_model")
        props.setdefault("flavors", {})  # the SDK iterates it
    else:
        if isinstance(props.get("condaFile"), Mapping):
            props["condaFile"] = yaml.safe_dump(dict(props["condaFile"]), sort_keys=False)
        props["osType"] = "Linux"
        props["environmentType"] = "UserCreated"
        props["autoRebuild"] = "Disabled"
    return {
        "id": f"{workspace_id}/{collection}/{row.name}/versions/{row.version}",
        "name": row.version,
        "type": f"{PROVIDER_TYPE}/{collection}/versions",
        "properties": props,
        "systemData": _system(row.created_by, row.created_at, row.modified_at),
    }


@dataclass(frozen=True)
class ContainerRow:
    """A name and its versions' summary (``latest``: the newest not archived, else the newest)."""

    name: str
    latest: VersionRow
    next_version: str
    archived: bool  # every version is


def container_view(kind: AssetKind, workspace_id: str, row: ContainerRow) -> dict[str, Any]:
    collection = COLLECTIONS[kind]
    latest = row.latest
    return {
        "id": f"{workspace_id}/{collection}/{row.name}",
        "name": row.name,
        "type": f"{PROVIDER_TYPE}/{collection}",
        "properties": {
            "description": latest.spec.get("description"),
            "tags": dict(latest.spec.get("tags") or {}),
            "properties": {},
            "isArchived": row.archived,
            "latestVersion": latest.version,
            "nextVersion": row.next_version,
            "provisioningState": "Succeeded",
        },
        "systemData": _system(latest.created_by, latest.created_at, latest.modified_at),
    }


LIST_VIEWS = {"activeonly": "active_only", "archivedonly": "archived_only", "all": "all"}


def list_view(value: str | None) -> str:
    """``listViewType`` (ActiveOnly, ArchivedOnly, All) → the native view name."""
    if value is None:
        return "active_only"
    view = LIST_VIEWS.get(value.replace("_", "").lower())
    if view is None:
        raise validation_error(
            "listViewType", f"listViewType {value!r} is not one of ActiveOnly, ArchivedOnly, All"
        )
    return view
