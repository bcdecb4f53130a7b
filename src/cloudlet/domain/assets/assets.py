"""Data, model and environment assets in the Azure ML CLI v2 YAML shapes, and their versions (pure).

``parse_asset(kind, doc, name, version)`` validates a document (``az ml data|model|environment
create --file F``) into an :class:`AssetSpec`; ``parse_reference`` reads the ways a job names an
asset version (``azureml:name:1``, ``azureml:name@latest``, ARM ids and ``azureml://`` URIs of a
workspace's assets); ``next_version`` is the auto-increment rule and ``pick_latest`` the
``@latest`` one (the newest version not archived, as Azure ML).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

# The names and references of assets live in domain/assets/asset_refs.py (re-exported here).
from cloudlet.domain.assets.asset_refs import (
    COLLECTIONS as COLLECTIONS,
)
from cloudlet.domain.assets.asset_refs import (
    KIND_OF_COLLECTION as KIND_OF_COLLECTION,
)
from cloudlet.domain.assets.asset_refs import (
    KINDS as KINDS,
)
from cloudlet.domain.assets.asset_refs import (
    LATEST,
    NAME_PATTERN,
    NAME_RULE,
    VERSION_PATTERN,
    VERSION_RULE,
    AssetKind,
    short_datastore_uri,
)
from cloudlet.domain.assets.asset_refs import (
    AssetRef as AssetRef,
)
from cloudlet.domain.assets.asset_refs import (
    parse_reference as parse_reference,
)
from cloudlet.domain.assets.components import ComponentSpec, component_to_doc, parse_component
from cloudlet.domain.errors import CloudletError, document_for, validation_error
from cloudlet.domain.validation import FieldProblem, translate

DATA_TYPES = ("uri_file", "uri_folder", "mltable")
MODEL_TYPES = ("custom_model", "mlflow_model", "triton_model")
# Fields of an existing version that an update may change (Azure ML: the rest is immutable).
MUTABLE_FIELDS = frozenset({"description", "tags", "properties", "stage"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class _AssetBase(_Strict):
    schema_: str | None = Field(default=None, alias="$schema")
    name: str
    version: str | None = None
    description: str | None = Field(default=None, max_length=10_000)
    tags: dict[str, str] = Field(default_factory=dict)
    properties: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_PATTERN.fullmatch(value):
            raise ValueError(f"name {value!r} must be {NAME_RULE}")
        return value

    @field_validator("version", mode="before")
    @classmethod
    def _version(cls, value: Any) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # YAML reads `version: 1` as a number
        if isinstance(value, str) and not VERSION_PATTERN.fullmatch(value):
            raise ValueError(f"version {value!r} must be {VERSION_RULE}")
        if isinstance(value, str) and value.lower() == LATEST:
            raise ValueError("'latest' is a label, not a version; omit version to get the next one")
        return value

    @field_validator("tags", "properties", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
        return value


def _check_path(path: str, what: str) -> str:
    text = short_datastore_uri(path.strip())
    if text.startswith("azureml://datastores/"):
        if "/paths/" not in text:
            raise FieldProblem("path", f"{text!r} must be azureml://datastores/<datastore>/paths/<path>")
        return text
    if re.match(r"^https?://", text, flags=re.IGNORECASE):
        return text
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", text):
        raise FieldProblem(
            "path",
            f"{what} path {text!r}: only azureml://datastores/<datastore>/paths/<path>, https:// and "
            "local paths (uploaded by the cloudlet CLI/client) are supported",
        )
    raise FieldProblem(
        "path",
        f"{what} path {text!r} is local; create the asset with the cloudlet CLI or client, which "
        "uploads it once (content-hashed) and sends its azureml://datastores/... URI",
    )


class DataAssetSpec(_AssetBase):
    type: Literal["uri_file", "uri_folder", "mltable"] = "uri_folder"
    path: str

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _check_path(value, "a data asset's")


class ModelAssetSpec(_AssetBase):
    type: Literal["custom_model", "mlflow_model", "triton_model"] = "custom_model"
    path: str
    stage: str | None = Field(default=None, max_length=64)
    flavors: dict[str, Any] | None = None
    job_name: str | None = Field(default=None, max_length=255)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _check_path(value, "a model's")


class EnvironmentAssetSpec(_AssetBase):
    image: str | None = Field(default=None, max_length=1024)
    conda_file: dict[str, Any] | str | None = None
    pip: list[str] | None = Field(default=None, max_length=1000)
    build: dict[str, Any] | None = None
    os_type: Literal["linux", "Linux"] | None = None
    inference_config: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _something(self) -> EnvironmentAssetSpec:
        if isinstance(self.conda_file, str):
            raise FieldProblem(
                "conda_file",
                f"conda_file {self.conda_file!r} is a local file; create the environment with the "
                "cloudlet CLI or client (which reads it) or give its contents as a mapping",
            )
        if self.build is not None:
            raise FieldProblem(
                "build",
                "build.path is a local folder; create the environment with the cloudlet CLI or client, "
                "which reads its requirements.txt or conda file into pip",
            )
        if not (self.image or self.conda_file or self.pip):
            raise ValueError(
                "an environment needs 'image', 'conda_file' or pip requirements "
                "(build.path with a requirements.txt), e.g. {image: python:3.11, conda_file: conda.yaml}"
            )
        return self


SPEC_MODELS: dict[AssetKind, type[BaseModel]] = {
    "data": DataAssetSpec,
    "model": ModelAssetSpec,
    "environment": EnvironmentAssetSpec,
    "component": ComponentSpec,
}
WHAT = {
    "data": "a data asset",
    "model": "a model",
    "environment": "an environment",
    "component": "a component",
}


@dataclass(frozen=True)
class AssetSpec:
    kind: AssetKind
    name: str
    version: str | None  # None: the next one (``next_version``)
    doc: dict[str, Any]  # the stored form: YAML field names, no $schema, name or version


def parse_asset(kind: AssetKind, doc: Any, name: str | None = None, version: str | None = None) -> AssetSpec:
    """Validate an asset document; NAME and VERSION (from the URL) must agree with the body's."""
    if kind == "component":  # its own rules (inputs, command); stored the same way
        component = parse_component(doc, name, version)
        if component.name is None:
            raise validation_error(
                "name", "a component needs a name to be registered, e.g. name: train_model"
            )
        stored = component_to_doc(component)
        return AssetSpec(kind, str(component.name), component.version, _without(stored, "name", "version"))
    doc = document_for(doc, name, WHAT[kind].split(" ", 1)[1])
    if version is not None:
        given = doc.get("version")
        if given is not None and str(given) != version:
            raise validation_error(
                "version",
                f"the body says version '{given}' but the request is for '{version}'; make them match",
            )
        doc["version"] = version
    model = SPEC_MODELS[kind]
    try:
        spec = model.model_validate(doc)
    except ValidationError as exc:
        raise translate(exc, model, WHAT[kind]) from None
    assert isinstance(spec, _AssetBase)
    stored = spec.model_dump(mode="json", exclude={"schema_", "name", "version"}, exclude_none=True)
    return AssetSpec(kind, spec.name, spec.version, stored)


def _without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in keys}


def updated_doc(kind: AssetKind, current: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """An existing version changed by WANTED: only description, tags, properties and stage may
    change (its path, type and contents are what jobs that used it read)."""
    for key in sorted(set(current) | set(wanted)):
        if key in MUTABLE_FIELDS or current.get(key) == wanted.get(key):
            continue
        if key in ("tags", "properties") and not wanted.get(key) and not current.get(key):
            continue
        raise CloudletError(
            "AssetVersionImmutable",
            f"{key} of an existing {kind} version cannot change (only {', '.join(sorted(MUTABLE_FIELDS))} "
            "can); create a new version instead (omit version to get the next one)",
            key,
            409,
        )
    return {**current, **{k: v for k, v in wanted.items() if k in MUTABLE_FIELDS}}


# ----------------------------------------------------------------------------------------------
# Versions.


def next_version(existing: Iterable[str]) -> str:
    """Auto-increment: one more than the highest whole-number version (``1`` for the first)."""
    numbers = [int(v) for v in existing if v.isdigit()]
    return str(max(numbers, default=0) + 1)


@dataclass(frozen=True)
class VersionRow:
    version: str
    archived: bool
    order: int  # creation order (the row id)


def pick_latest(rows: Sequence[VersionRow]) -> VersionRow | None:
    """``@latest``: the newest version not archived."""
    live = [r for r in rows if not r.archived]
    return max(live, key=lambda r: r.order) if live else None


# ----------------------------------------------------------------------------------------------
# References from jobs.


def input_kind(input_type: str) -> AssetKind | None:
    """Which kind of asset a job input of INPUT_TYPE names."""
    if input_type in DATA_TYPES:
        return "data"
    if input_type in MODEL_TYPES:
        return "model"
    return None


def output_registration(output: dict[str, Any]) -> tuple[AssetKind, str, str | None] | None:
    """A job output with a ``name`` registers a version when the job completes: a model for the
    model types, a data asset otherwise (Azure ML: ``outputs: {m: {type: mlflow_model, name: m}}``)."""
    name = output.get("name")
    if not name:
        return None
    kind: AssetKind = "model" if output.get("type") in MODEL_TYPES else "data"
    version = output.get("version")
    return kind, str(name), None if version is None else str(version)
