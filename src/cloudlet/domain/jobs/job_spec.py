"""Command jobs in the Azure ML CLI v2 ``commandJob`` YAML shape, validated into plain models.

``parse_job(doc)`` takes the YAML document (as a dict) and returns a :class:`CommandJobSpec` or
raises a ``CloudletError`` whose ``target`` is the field path and whose message says how to fix it.
Field names are Azure's, so a file written for ``az ml job create`` is accepted as-is.

The models and the pure rules they carry (placeholder substitution, ``render_command``; the
per-process environment of distributed jobs, ``distribution_envs``; queue priority,
``priority_value``) are in ``domain/jobs/job_models.py`` and re-exported here. ``parse_job`` builds on
them and on the rules that build on them: process limits (``domain/jobs/job_limits.py``), environments
(curated names, inline pip/conda, images: ``domain.assets.environments``) and asset references.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from cloudlet.domain.assets.environments import check_environment_name
from cloudlet.domain.errors import document_for, validation_error
from cloudlet.domain.jobs.job_limits import check_processes
from cloudlet.domain.jobs.job_models import (
    _DISTRIBUTION_BY_TYPE,
    DEFAULT_INSTANCE_TYPE,
    DEFAULT_PRIORITY,
    DISTRIBUTION_TYPES,
    IO_NAME_PATTERN,
    JOB_NAME_PATTERN,
    LITERAL_TYPES,
    OPTIONAL_PART,
    PLACEHOLDER,
    PRIORITIES,
    CommandJobSpec,
    Distribution,
    InlineEnvironment,
    InputSpec,
    InputType,
    JobIdentity,
    LimitsSpec,
    Literal_,
    MpiDistribution,
    OutputSpec,
    OutputType,
    PyTorchDistribution,
    QueueSettings,
    ResourcesSpec,
    TensorFlowDistribution,
    check_command,
    data_inputs,
    distribution_env,
    distribution_envs,
    job_tier_value,
    literal_inputs,
    literal_string,
    normalise_compute,
    priority_value,
    render_command,
    translate_error,
)
from cloudlet.domain.jobs.job_paths import (
    CODE_SNAPSHOT_PATTERN,
    MODEL_TYPES,
    PATH_TYPES,
    URI_TYPES,
    is_remote_path,
)

# parse_job and job_to_doc, and the models and rules they build on (domain/jobs/job_models.py), re-exported.
__all__ = [
    "CODE_SNAPSHOT_PATTERN",
    "DEFAULT_INSTANCE_TYPE",
    "DEFAULT_PRIORITY",
    "DISTRIBUTION_TYPES",
    "IO_NAME_PATTERN",
    "JOB_NAME_PATTERN",
    "LITERAL_TYPES",
    "MODEL_TYPES",
    "OPTIONAL_PART",
    "PATH_TYPES",
    "PLACEHOLDER",
    "PRIORITIES",
    "URI_TYPES",
    "CommandJobSpec",
    "Distribution",
    "InlineEnvironment",
    "InputSpec",
    "InputType",
    "JobIdentity",
    "LimitsSpec",
    "Literal_",
    "MpiDistribution",
    "OutputSpec",
    "OutputType",
    "PyTorchDistribution",
    "QueueSettings",
    "ResourcesSpec",
    "TensorFlowDistribution",
    "check_command",
    "data_inputs",
    "distribution_env",
    "distribution_envs",
    "is_remote_path",
    "job_tier_value",
    "job_to_doc",
    "literal_inputs",
    "literal_string",
    "normalise_compute",
    "parse_job",
    "priority_value",
    "render_command",
    "translate_error",
]


# ----------------------------------------------------------------------------------------------
# Parsing.


def parse_job(doc: Any, name: str | None = None) -> CommandJobSpec:
    """Validate a command job document; ``name`` (from the URL) wins over a missing name in the body."""
    doc = document_for(doc, name, "job")
    kind = doc.get("type", "command")
    if not isinstance(kind, str) or kind.lower() != "command":
        raise validation_error(
            "type", f"unsupported job type {kind!r}; only 'command' jobs are supported", code="InvalidJobType"
        )
    doc["type"] = "command"
    _prevalidate(doc)
    try:
        spec = CommandJobSpec.model_validate(doc)
    except ValidationError as exc:
        raise translate_error(exc, CommandJobSpec, "", "a command job") from None
    check_processes(spec)  # before anything counts on them: no job may start absurdly many
    if isinstance(spec.environment, str):
        check_environment_name(spec.environment)  # unknown names can never run: this says so
    return spec


def _prevalidate(doc: dict[str, Any]) -> None:
    """Validate the mapping-valued fields one entry at a time, for precise error targets."""
    inputs = doc.get("inputs")
    if isinstance(inputs, dict):
        checked: dict[str, Any] = {}
        for key, item in inputs.items():
            target = f"inputs.{key}"
            if not isinstance(key, str) or not IO_NAME_PATTERN.fullmatch(key):
                raise validation_error(target, f"input name {key!r} must be letters, digits and '_'")
            if isinstance(item, dict):
                try:
                    checked[key] = InputSpec.model_validate(item)
                except ValidationError as exc:
                    raise translate_error(exc, InputSpec, target, "an input") from None
            elif isinstance(item, str | int | float | bool):
                checked[key] = item
            else:
                raise validation_error(
                    target,
                    f"input '{key}' must be a literal (string, number, boolean) or a mapping such as "
                    "{type: uri_folder, path: ./data}",
                )
        doc["inputs"] = checked
    outputs = doc.get("outputs")
    if isinstance(outputs, dict):
        out_checked: dict[str, Any] = {}
        for key, item in outputs.items():
            target = f"outputs.{key}"
            if not isinstance(key, str) or not IO_NAME_PATTERN.fullmatch(key):
                raise validation_error(target, f"output name {key!r} must be letters, digits and '_'")
            try:
                out_checked[key] = OutputSpec.model_validate(item if item is not None else {})
            except ValidationError as exc:
                raise translate_error(exc, OutputSpec, target, "an output") from None
        doc["outputs"] = out_checked
    env_vars = doc.get("environment_variables")
    if isinstance(env_vars, dict):
        for key, value in env_vars.items():
            if not isinstance(value, str):
                raise validation_error(
                    f"environment_variables.{key}",
                    f"environment variable '{key}' must be a string, got {value!r}; quote it in YAML "
                    f'({key}: "{value}")',
                )
    dist = doc.get("distribution")
    if isinstance(dist, dict):
        dist_type = dist.get("type")
        model = _DISTRIBUTION_BY_TYPE.get(dist_type.lower()) if isinstance(dist_type, str) else None
        if model is None:
            raise validation_error(
                "distribution.type",
                f"unknown distribution type {dist_type!r}; use one of: {', '.join(DISTRIBUTION_TYPES)}",
            )
        try:
            doc["distribution"] = model.model_validate({**dist, "type": dist_type.lower()})  # type: ignore[union-attr]
        except ValidationError as exc:
            raise translate_error(exc, model, "distribution", f"a {dist_type} distribution") from None
    env = doc.get("environment")
    if isinstance(env, dict):
        try:
            doc["environment"] = InlineEnvironment.model_validate(env)
        except ValidationError as exc:
            raise translate_error(exc, InlineEnvironment, "environment", "an inline environment") from None
    tags = doc.get("tags")
    if isinstance(tags, dict):
        doc["tags"] = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in tags.items()}


def job_to_doc(spec: CommandJobSpec) -> dict[str, Any]:
    """The stored/echoed form: YAML field names, defaults filled in, ``$schema`` dropped."""
    return spec.model_dump(mode="json", exclude={"schema_"}, exclude_none=True)
