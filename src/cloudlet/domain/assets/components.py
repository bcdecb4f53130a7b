"""Command components in the Azure ML CLI v2 ``commandComponent`` shape, validated (pure).

``parse_component(doc)`` takes the YAML document (``az ml component create --file F``, a pipeline
step's ``component: ./train.yml`` or an inline ``component: {...}``) and returns a
:class:`ComponentSpec` or raises a ``CloudletError`` whose ``target`` is the field path and whose
message says how to fix it. A component declares its inputs (type, optional, default, min, max,
enum) and outputs; running it is a command job: ``bind_inputs`` applies defaults and checks the
given values, ``command_job_doc`` writes the job document ``job_spec.parse_job`` accepts, and
``component_hash`` is the content hash used as an anonymous component's version and by step reuse.

The command rules (``${{inputs.x}}``, ``$[[...]]``), IO names, literal types, resources,
distribution and inline environments are ``domain.jobs.job_spec``'s, so a component and a job agree.
"""

from __future__ import annotations

import hashlib
import json
import re
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cloudlet.domain.assets.asset_refs import LATEST, VERSION_PATTERN, VERSION_RULE
from cloudlet.domain.assets.environments import check_environment_name
from cloudlet.domain.errors import CloudletError, document_for, validation_error
from cloudlet.domain.jobs.job_models import (
    IO_NAME_PATTERN,
    LITERAL_TYPES,
    OPTIONAL_PART,
    PATH_TYPES,
    PLACEHOLDER,
    Distribution,
    InlineEnvironment,
    InputSpec,
    InputType,
    Literal_,
    OutputSpec,
    OutputType,
    ResourcesSpec,
    _fits,
    _placeholders,
    _split_ref,
    check_command,
    literal_string,
    translate_error,
)
from cloudlet.domain.jobs.job_spec import _prevalidate
from cloudlet.domain.validation import FieldProblem

# azure-ai-ml's rule for component names (``ComponentNameStr``): the SDK refuses anything else.
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,254}$")
NAME_RULE = "lower-case letters, digits and '_', starting with a letter (at most 255), e.g. train_model"
# The name azure-ai-ml gives components it registers for a pipeline's steps (version: a hash).
ANONYMOUS_NAME = "azureml_anonymous"
# What a pipeline step may set over its component's own values.
OVERRIDABLE = (
    "name",
    "display_name",
    "description",
    "experiment_name",
    "tags",
    "compute",
    "environment",
    "environment_variables",
    "resources",
    "distribution",
    "limits",
    "queue_settings",
    "identity",
    "services",
)
# Fields of a component that do not change what runs (left out of ``component_hash``).
_IDENTITY_FIELDS = frozenset({"name", "version"})


def _literals(annotation: Any) -> tuple[str, ...]:
    """The strings of a ``Literal[...]`` (or ``Literal[...] | None``) annotation."""
    if get_origin(annotation) is Literal:
        return tuple(str(a) for a in get_args(annotation))
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(s for arg in get_args(annotation) for s in _literals(arg))
    return ()


# The modes a job accepts are the modes a component may declare (one rule, in job_spec).
INPUT_MODES = _literals(InputSpec.model_fields["mode"].annotation)
OUTPUT_MODES = _literals(OutputSpec.model_fields["mode"].annotation)
OUTPUT_TYPES = _literals(OutputType)
INPUT_TYPES = _literals(InputType)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)


def literal_value(kind: str, value: Any) -> Literal_:
    """VALUE as a literal of type KIND (``"0.01"`` → 0.01 for a number, ``"true"`` → True for a
    boolean); a ``ValueError`` naming the type when it is not one."""
    if isinstance(value, dict | list) or value is None or not _fits(kind, value):
        raise ValueError(f"{value!r} is not a valid {kind}")
    if kind == "boolean":
        return value if isinstance(value, bool) else str(value).lower() == "true"
    if kind == "integer":
        return int(value)
    if kind == "number":
        if isinstance(value, int | float):
            return value
        text = str(value).strip()
        return int(text) if re.fullmatch(r"[+-]?\d+", text) else float(text)
    return literal_string(value)


class ComponentInput(_Frozen):
    """A declared input: a data path (``uri_folder``, ``mltable``, models …) or a typed literal."""

    type: InputType
    optional: bool = False
    default: Literal_ | None = None
    description: str | None = None
    min: int | float | None = None
    max: int | float | None = None
    enum: list[str] | None = Field(default=None, min_length=1)
    mode: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        kind = data.get("type")
        if isinstance(kind, str):
            kind = data["type"] = kind.lower()
        if kind not in LITERAL_TYPES:
            return data
        for key in ("default", *(("min", "max") if kind in ("integer", "number") else ())):
            if data.get(key) is not None:
                try:
                    data[key] = literal_value(kind, data[key])
                except ValueError as exc:
                    raise FieldProblem(key, f"'{key}' {exc}") from None
        if isinstance(data.get("enum"), list):
            data["enum"] = [literal_value("string", v) for v in data["enum"]]
        return data

    @model_validator(mode="after")
    def _check(self) -> ComponentInput:
        if self.type in PATH_TYPES:
            for key in ("default", "min", "max", "enum"):
                if getattr(self, key) is not None:
                    raise FieldProblem(
                        key, f"a {self.type} input takes no '{key}'; give the path when running"
                    )
            if self.mode is not None and self.mode not in INPUT_MODES:
                raise FieldProblem(
                    "mode", f"input mode {self.mode!r} is not one of: {', '.join(INPUT_MODES)}"
                )
            return self
        if self.mode is not None:
            raise FieldProblem("mode", f"'mode' applies to data and model inputs, not {self.type}")
        if (self.min is not None or self.max is not None) and self.type not in ("integer", "number"):
            raise FieldProblem(
                "min" if self.min is not None else "max", f"a {self.type} input takes no min/max"
            )
        if self.enum is not None and self.type != "string":
            raise FieldProblem("enum", f"'enum' applies to string inputs, not {self.type}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise FieldProblem("min", f"min {self.min} is greater than max {self.max}")
        if self.default is not None:
            problem = self.refuse(self.default)
            if problem:
                raise FieldProblem("default", f"default {problem}")
        return self

    def refuse(self, value: Literal_) -> str | None:
        """Why the (already typed) literal VALUE is out of this input's bounds, or None."""
        if self.min is not None and isinstance(value, int | float) and value < self.min:
            return f"{value!r} is below the minimum {self.min}"
        if self.max is not None and isinstance(value, int | float) and value > self.max:
            return f"{value!r} is above the maximum {self.max}"
        if self.enum is not None and str(value) not in self.enum:
            return f"{value!r} is not one of: {', '.join(self.enum)}"
        return None


class ComponentOutput(_Frozen):
    type: OutputType = "uri_folder"
    mode: str | None = None
    description: str | None = None

    @field_validator("type", mode="before")
    @classmethod
    def _fold(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value

    @field_validator("mode")
    @classmethod
    def _mode(cls, value: str | None) -> str | None:
        if value is not None and value not in OUTPUT_MODES:
            raise ValueError(f"output mode {value!r} is not one of: {', '.join(OUTPUT_MODES)}")
        return value


class ComponentSpec(_Frozen):
    schema_: str | None = Field(default=None, alias="$schema")
    type: Literal["command"] = "command"
    # None: an anonymous (inline) component
    name: str | None = Field(default=None, json_schema_extra={"pattern": NAME_PATTERN.pattern})
    version: str | None = None  # None: the next one when registered
    display_name: str | None = None
    description: str | None = Field(default=None, max_length=10_000)
    tags: dict[str, str] = Field(default_factory=dict)
    properties: dict[str, str] = Field(default_factory=dict)
    is_deterministic: bool = True
    inputs: dict[str, ComponentInput] = Field(default_factory=dict)
    outputs: dict[str, ComponentOutput] = Field(default_factory=dict)
    code: str | None = None
    # Local files and folders copied into the code snapshot, each at its top under its own name
    # (Azure ML's ``additional_includes``): the CLI and client do it and send the snapshot.
    additional_includes: list[Annotated[str, Field(min_length=1)]] | None = None
    environment: str | InlineEnvironment | None = None
    command: str
    resources: ResourcesSpec | None = None
    distribution: Annotated[Distribution, Field(discriminator="type")] | None = None
    environment_variables: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not NAME_PATTERN.fullmatch(value):
            raise ValueError(f"component name {value!r} must be {NAME_RULE}")
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

    @field_validator("command")
    @classmethod
    def _command(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("'command' must not be empty; give the shell command to run")
        return value

    @field_validator("properties", mode="before")
    @classmethod
    def _strings(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _check(self) -> ComponentSpec:
        check_command(self.command, list(self.inputs), list(self.outputs))
        required_text = OPTIONAL_PART.sub(" ", self.command)
        for ref in _placeholders(required_text):
            split = _split_ref(ref)
            if split and split[0] == "inputs":
                declared = self.inputs[split[1]]
                if declared.optional and declared.default is None:
                    raise FieldProblem(
                        "command",
                        f"optional input '{split[1]}' is used outside $[[...]]; wrap its part of the "
                        f"command as $[[--{split[1]} ${{{{inputs.{split[1]}}}}}]] or make it required",
                    )
        return self


# ----------------------------------------------------------------------------------------------
# Parsing.


def parse_component(doc: Any, name: str | None = None, version: str | None = None) -> ComponentSpec:
    """Validate a command component document; NAME and VERSION (from the URL or the command line)
    must agree with the body's when both are given."""
    doc = document_for(doc, name, "component")
    if version is not None:
        given = doc.get("version")
        if given is not None and str(given) != version:
            raise validation_error(
                "version",
                f"the body says version '{given}' but the request is for '{version}'; make them match",
            )
        doc["version"] = version
    kind = doc.get("type", "command")
    if not isinstance(kind, str) or kind.lower() != "command":
        raise validation_error(
            "type",
            f"unsupported component type {kind!r}; only 'command' components are supported",
            code="InvalidComponentType",
        )
    doc["type"] = "command"
    if "compute" in doc:
        raise validation_error(
            "compute",
            "a component does not choose its compute; remove 'compute' and set it on the job or "
            "pipeline step that runs the component (or the pipeline's settings.default_compute)",
        )
    doc["inputs"] = _entries(doc.get("inputs"), "inputs", "input", ComponentInput)
    doc["outputs"] = _entries(doc.get("outputs"), "outputs", "output", ComponentOutput)
    shared = {k: doc[k] for k in ("distribution", "environment", "environment_variables", "tags") if k in doc}
    _prevalidate(shared)  # the job rules for these fields, with their error targets
    doc.update(shared)
    try:
        spec = ComponentSpec.model_validate(doc)
    except ValidationError as exc:
        raise translate_error(exc, ComponentSpec, "", "a command component") from None
    if isinstance(spec.environment, str):
        check_environment_name(spec.environment)  # unknown names can never run: this says so
    return spec


def _entries(items: Any, field: str, what: str, model: type[BaseModel]) -> Any:
    if items is None:
        return {}
    if not isinstance(items, dict):
        return items  # the model's own check says it must be a mapping
    checked: dict[str, Any] = {}
    for key, item in items.items():
        target = f"{field}.{key}"
        if not isinstance(key, str) or not IO_NAME_PATTERN.fullmatch(key):
            raise validation_error(target, f"{what} name {key!r} must be letters, digits and '_'")
        if not isinstance(item, dict) and not (what == "output" and item is None):
            raise validation_error(
                target,
                f"{what} '{key}' must be a mapping with its type, e.g. {{type: uri_folder}} or "
                "{type: number, default: 0.01}",
            )
        try:
            checked[key] = model.model_validate(item or {})
        except ValidationError as exc:
            raise translate_error(exc, model, target, f"a component {what}") from None
    return checked


def component_to_doc(spec: ComponentSpec) -> dict[str, Any]:
    """The stored/echoed form: YAML field names, defaults filled in, ``$schema`` dropped."""
    return spec.model_dump(mode="json", exclude={"schema_"}, exclude_none=True)


def component_hash(spec: ComponentSpec, code_snapshot_id: str | None) -> str:
    """A stable content hash of what the component runs (everything but its name and version; a
    local ``code`` counts by CODE_SNAPSHOT_ID, the content hash of its upload, when given)."""
    body = {k: v for k, v in component_to_doc(spec).items() if k not in _IDENTITY_FIELDS}
    if code_snapshot_id is not None:
        body["code"] = code_snapshot_id
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------------------------
# Running a component: its inputs bound, as a command job.


def _who(spec: ComponentSpec) -> str:
    return f"component '{spec.name}'" if spec.name else "the component"


def bind_inputs(spec: ComponentSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The job inputs that run SPEC with GIVEN: defaults applied, required inputs present, literals
    typed and within min/max/enum, data inputs as ``{type, path, mode}``. An optional input without
    a value is left out (its ``$[[...]]`` part of the command is dropped). Binding bound inputs
    again gives the same result."""
    unknown = sorted(set(given) - set(spec.inputs))
    if unknown:
        names = ", ".join(spec.inputs) or "none"
        raise validation_error(
            f"inputs.{unknown[0]}",
            f"'{unknown[0]}' is not an input of {_who(spec)} (its inputs: {names}); fix the name",
        )
    out: dict[str, Any] = {}
    for name, declared in spec.inputs.items():
        value = given.get(name)
        if isinstance(value, dict) and declared.type not in PATH_TYPES:
            value = value.get("value", value.get("default"))
        if isinstance(value, str) and PLACEHOLDER.search(value):
            raise validation_error(
                f"inputs.{name}",
                f"input '{name}' is {value!r}: a binding, which the pipeline resolves to a value or path "
                "before the component runs",
            )
        if value is None:
            value = declared.default
        if value is None:
            if declared.optional:
                continue
            raise validation_error(
                f"inputs.{name}",
                f"input '{name}' ({declared.type}) is required by {_who(spec)}; give it a value "
                "(or declare it optional: true in the component)",
            )
        out[name] = (
            _bind_path(name, declared, value)
            if declared.type in PATH_TYPES
            else _bind_literal(name, declared, value)
        )
    return out


def _bind_literal(name: str, declared: ComponentInput, value: Any) -> Literal_:
    try:
        typed = literal_value(str(declared.type), value)
    except ValueError as exc:
        raise validation_error(f"inputs.{name}", f"input '{name}': {exc}") from None
    problem = declared.refuse(typed)
    if problem:
        raise validation_error(f"inputs.{name}", f"input '{name}': {problem}")
    return typed


def _bind_path(name: str, declared: ComponentInput, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"path": value}
    if not isinstance(value, dict) or not isinstance(value.get("path"), str) or not value["path"]:
        raise validation_error(
            f"inputs.{name}",
            f"input '{name}' is a {declared.type}: give a path (a local path, azureml://… URI or "
            f"azureml:name:version), got {value!r}",
        )
    bound: dict[str, Any] = {"type": declared.type, **value}
    if declared.mode is not None and "mode" not in bound:
        bound["mode"] = declared.mode
    return bound


def bind_outputs(spec: ComponentSpec, given: dict[str, Any]) -> dict[str, Any]:
    """The job outputs: every declared output with its type and mode, and what GIVEN sets for it
    (a path, a mode, a name/version to register); a string is a path."""
    unknown = sorted(set(given) - set(spec.outputs))
    if unknown:
        names = ", ".join(spec.outputs) or "none"
        raise validation_error(
            f"outputs.{unknown[0]}",
            f"'{unknown[0]}' is not an output of {_who(spec)} (its outputs: {names}); fix the name",
        )
    out: dict[str, Any] = {}
    for name, declared in spec.outputs.items():
        value = given.get(name)
        if isinstance(value, str):
            value = {"path": value}
        if value is not None and not isinstance(value, dict):
            raise validation_error(
                f"outputs.{name}", f"output '{name}' must be a path or a mapping such as {{mode: upload}}"
            )
        bound: dict[str, Any] = {"type": declared.type}
        if declared.mode is not None:
            bound["mode"] = declared.mode
        out[name] = {**bound, **{k: v for k, v in (value or {}).items() if v is not None}}
    return out


def command_job_doc(
    spec: ComponentSpec, inputs: dict[str, Any], outputs: dict[str, Any], overrides: dict[str, Any]
) -> dict[str, Any]:
    """The command job document (what ``job_spec.parse_job`` accepts) that runs SPEC with INPUTS and
    OUTPUTS, and a step's OVERRIDES (compute, environment_variables, resources, … — ``OVERRIDABLE``)
    over the component's own values. Environment variables and tags merge; resources merge by key."""
    unknown = sorted(set(overrides) - set(OVERRIDABLE))
    if unknown:
        raise validation_error(
            unknown[0],
            f"'{unknown[0]}' cannot be set on a step that runs a component; "
            f"allowed: {', '.join(OVERRIDABLE)}",
        )
    own = component_to_doc(spec)
    doc: dict[str, Any] = {"type": "command", "command": spec.command}
    for key in ("display_name", "description", "code", "environment", "distribution"):
        if key in own:
            doc[key] = own[key]
    if spec.tags or overrides.get("tags"):
        doc["tags"] = {**spec.tags, **(overrides.get("tags") or {})}
    env_vars = {**spec.environment_variables, **(overrides.get("environment_variables") or {})}
    if env_vars:
        doc["environment_variables"] = env_vars
    resources = {**own.get("resources", {}), **(overrides.get("resources") or {})}
    if resources:
        doc["resources"] = resources
    for key, value in overrides.items():
        if key not in ("tags", "environment_variables", "resources") and value is not None:
            doc[key] = value
    bound_inputs = bind_inputs(spec, inputs)
    if bound_inputs:
        doc["inputs"] = bound_inputs
    bound_outputs = bind_outputs(spec, outputs)
    if bound_outputs:
        doc["outputs"] = bound_outputs
    return doc


def is_anonymous(spec: ComponentSpec) -> bool:
    return spec.name is None or spec.name == ANONYMOUS_NAME


def as_error(exc: CloudletError, where: str) -> CloudletError:
    """EXC with its target under WHERE (``jobs.train.component``), for errors of a pipeline step."""
    target = f"{where}.{exc.target}" if exc.target and exc.target != "$" else where
    return CloudletError(exc.code, exc.message, target, exc.status, exc.details)
