"""Component versions between the ARM shape azure-ai-ml sends and parses
(``{"properties": {"componentSpec": {...}, "isAnonymous", "isArchived", "properties", …}}``) and
cloudlet's component documents (the CLI v2 ``commandComponent`` shape ``domain/assets/components.py``
validates). Pure: the rules stay in ``domain/assets/components.py``. Recorded bodies:
``tests/data/arm_components/``.

- ``from_arm(body, name, version)``: the document to validate and ``isArchived`` when the body says
  it. An anonymous component (``azureml_anonymous``, what the SDK registers for each step of a
  pipeline) carries version "1" in its spec and its content hash in the URL: the URL's version wins;
  its spec keeps the name of the component it was loaded from (``train_model`` of a YAML file,
  what ``load_component`` + ``jobs.create_or_update`` send): the URL's ``azureml_anonymous`` wins
  too, the spec's name kept as its display name when it has none;
- ``version_view``: the ARM resource, its ``componentSpec`` as the SDK reads it back (literal
  defaults, min and max as strings, the code as a code version's ARM id);
- a pipeline component's spec (``type: pipeline``, what the SDK registers for a ``@dsl.pipeline``
  used inside another) has its ``jobs`` in the REST shape of a pipeline job's steps: they become
  the document's (``arm_pipeline_jobs.pipeline_component_jobs``);
- a parallel component's spec (``type: parallel``, what ``parallel_run_function`` registers) keeps
  its fields as they are; its code is its ``task``'s;
- ``arm_target``: a native error's field target as the ARM body names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloudlet.api.arm.wire import arm_parallel
from cloudlet.api.arm.wire.arm_assets import PROVIDER_TYPE, VersionRow, _system
from cloudlet.api.arm.wire.arm_pipeline_jobs import pipeline_component_jobs, pipeline_component_jobs_to_arm
from cloudlet.domain.assets.components import ANONYMOUS_NAME
from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs.job_spec import LITERAL_TYPES, literal_string

COLLECTION = "components"
# The version azure-ai-ml asks for by ``components.get(name)``: the component's default (latest).
DEFAULT_VERSION = "azureml_default"
SPEC = "properties.componentSpec"
# What the SDK adds to a spec that is not the component's (its loader's bookkeeping).
_DROPPED = ("_source", "$schema", "id", "creation_context", "is_anonymous", "sourceJobId")
_LITERAL_KEYS = ("default", "min", "max")


@dataclass(frozen=True)
class ArmComponent:
    doc: dict[str, Any]  # the component document (YAML field names), not yet validated
    archived: bool | None  # isArchived, when the body says it
    anonymous: bool


def from_arm(body: Any, name: str, version: str) -> ArmComponent:
    """The document for an SDK ``PUT {ws}/components/{name}/versions/{version}`` body."""
    if not isinstance(body, Mapping) or not isinstance(body.get("properties"), Mapping):
        raise validation_error("properties", "the body must be an object with 'properties' (an object)")
    props: Mapping[str, Any] = body["properties"]
    spec = props.get("componentSpec")
    if not isinstance(spec, Mapping):
        raise validation_error(
            SPEC, "properties.componentSpec must be the component (an object with type, command, inputs …)"
        )
    anonymous = props.get("isAnonymous") is True or name == ANONYMOUS_NAME
    doc = {k: v for k, v in spec.items() if k not in _DROPPED}
    if anonymous:
        given_name = doc.get("name")
        if isinstance(given_name, str) and given_name != name and not doc.get("display_name"):
            doc["display_name"] = given_name
        doc["name"] = name
    given = doc.get("version")
    if anonymous or given is None:
        doc["version"] = version  # the SDK's anonymous spec says "1"; its version is the URL's hash
    elif str(given) != version:
        raise validation_error(
            f"{SPEC}.version",
            f"componentSpec.version '{given}' differs from the URL's version '{version}'; make them match",
        )
    for field in ("description", "tags", "properties"):
        value = props.get(field)
        if value:  # the resource's own value (the SDK writes both, the same)
            doc[field] = value
        elif not doc.get(field):
            doc.pop(field, None)
    for section in ("inputs", "outputs"):
        items = doc.get(section)
        if isinstance(items, Mapping):
            doc[section] = {k: _folded(v) for k, v in items.items()}
    if str(doc.get("type") or "").lower() == "pipeline":  # a @dsl.pipeline used as a component
        doc["jobs"] = pipeline_component_jobs(doc.get("jobs"), f"{SPEC}.jobs")
    archived = props.get("isArchived")
    if archived is not None and not isinstance(archived, bool):
        raise validation_error("properties.isArchived", "isArchived must be true or false")
    return ArmComponent(doc, archived, anonymous)


def _folded(item: Any) -> Any:
    """An input or output with its type as the YAML writes it (the REST API says ``String``)."""
    if isinstance(item, Mapping) and isinstance(item.get("type"), str):
        return {**item, "type": item["type"].lower()}
    return item


def arm_target(target: str | None) -> str | None:
    """A native document field (``inputs.x.default``, ``command``) as the ARM body's property."""
    if target is None:
        return None
    if target == "$":
        return SPEC
    if target.startswith(("properties", SPEC)):
        return target
    return f"{SPEC}.{target}"


def version_view(workspace_id: str, row: VersionRow, code_id: str | None) -> dict[str, Any]:
    """A component version as ARM answers it (``workspace_id``: the workspace's ARM id; CODE_ID:
    the code version's ARM id for the stored ``codes/<sha256>``, when one has it)."""
    doc = dict(row.spec)
    spec: dict[str, Any] = {"name": row.name, "version": row.version, **doc}
    spec.setdefault("type", "command")
    if code_id is not None and isinstance(spec.get("task"), Mapping):  # a parallel component's
        spec["task"] = {**spec["task"], "code": f"azureml:{code_id}"}
    elif code_id is not None:
        spec["code"] = f"azureml:{code_id}"
    spec["inputs"] = {k: _literal_strings(v) for k, v in (doc.get("inputs") or {}).items()}
    spec["outputs"] = dict(doc.get("outputs") or {})
    if spec["type"] == "parallel":
        spec = arm_parallel.component_spec(spec)
    if spec["type"] == "pipeline":  # its steps as the SDK sends (and reads) them
        spec["jobs"] = pipeline_component_jobs_to_arm(doc.get("jobs") or {}, workspace_id)
    props: dict[str, Any] = {
        "componentSpec": spec,
        "description": doc.get("description"),
        "tags": dict(doc.get("tags") or {}),
        "properties": dict(doc.get("properties") or {}),
        "isArchived": row.archived,
        "isAnonymous": row.name == ANONYMOUS_NAME,
        "provisioningState": "Succeeded",
    }
    return {
        "id": f"{workspace_id}/{COLLECTION}/{row.name}/versions/{row.version}",
        "name": row.version,
        "type": f"{PROVIDER_TYPE}/{COLLECTION}/versions",
        "properties": props,
        "systemData": _system(row.created_by, row.created_at, row.modified_at),
    }


def _literal_strings(item: Any) -> Any:
    """Literal defaults, min and max as the strings the REST API carries (``"0.01"``, ``"True"``)."""
    if not isinstance(item, Mapping) or item.get("type") not in LITERAL_TYPES:
        return item
    return {k: literal_string(v) if k in _LITERAL_KEYS and v is not None else v for k, v in item.items()}
