"""The anonymous component an inline pipeline step runs (pure).

Azure ML registers an ``azureml_anonymous`` component for every inline command step when a pipeline
is submitted, and every step of a pipeline names one (``componentId``): the SDK builds a
``PipelineJob``'s nodes from them and resolves them with ``ml_client.components.get``. A pipeline
submitted through cloudlet's native API has inline steps (``command:``, ``code:``, ``environment:``
…) with no component; the service registers each one's component at submission
(``services.jobs.pipelines.register_inline``) under the version ``inline_version`` gives, and the
ARM facade names the same id (``api/arm/wire/arm_pipeline_jobs``), so the id it shows resolves.

The version is a hash of what the step runs (its bindings — name, compute, inputs' values, … —
left out), so two steps that run the same thing share one component, as Azure's content hash does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from cloudlet.domain.assets.components import ANONYMOUS_NAME
from cloudlet.domain.jobs.job_models import literal_type

ANONYMOUS = ANONYMOUS_NAME  # "azureml_anonymous"
# What a step binds rather than runs: left out of its inline component's content hash.
_BINDING_FIELDS = frozenset({"name", "display_name", "description", "tags", "compute", "inputs", "outputs"})
# What an inline step's component carries over from the step (the rest is the step's binding).
_RUNS = ("command", "code", "environment", "environment_variables", "distribution", "resources")
_STEP_OUTPUT = re.compile(r"^\$\{\{\s*parent\.jobs\.([\w-]+)\.outputs\.([\w-]+)\s*\}\}$")
_PARENT_INPUT = re.compile(r"^\$\{\{\s*parent\.inputs\.([\w-]+)\s*\}\}$")


def inline_version(step: Mapping[str, Any]) -> str:
    """The version of the anonymous component a step runs: a hash of what it runs (an inline
    ``component`` mapping, else the step's own command fields), stable across reads."""
    inline = step.get("component")
    body = (
        inline if isinstance(inline, Mapping) else {k: v for k, v in step.items() if k not in _BINDING_FIELDS}
    )
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def is_inline_command(step: Mapping[str, Any]) -> bool:
    """A command step with no component: the facade names its anonymous component."""
    return step.get("component") is None and step.get("type", "command") == "command"


def inline_component(step: Mapping[str, Any], pipeline: Mapping[str, Any]) -> dict[str, Any]:
    """The command component document an inline command STEP of PIPELINE runs: its command and what
    it runs it with, and its inputs and outputs typed from what they are bound to (an upstream
    step's declared output, a pipeline input, a literal; a path of unknown type is a folder)."""
    doc: dict[str, Any] = {"type": "command"}
    doc.update({field: step[field] for field in _RUNS if step.get(field) is not None})
    doc["inputs"] = {name: _input_type(value, pipeline) for name, value in (step.get("inputs") or {}).items()}
    doc["outputs"] = {
        name: {"type": _output_type(value)} for name, value in (step.get("outputs") or {}).items()
    }
    return doc


def _input_type(value: Any, pipeline: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(value, Mapping):
        if isinstance(value.get("type"), str):
            declared: dict[str, Any] = {"type": value["type"]}
            if value.get("optional"):
                declared["optional"] = True
            return declared
        return {"type": "uri_folder"}
    if isinstance(value, str):
        upstream = _STEP_OUTPUT.match(value)
        if upstream:
            step = (pipeline.get("jobs") or {}).get(upstream.group(1)) or {}
            output = (step.get("outputs") or {}).get(upstream.group(2))
            return {"type": _output_type(output)}
        parent = _PARENT_INPUT.match(value)
        if parent:
            return _input_type((pipeline.get("inputs") or {}).get(parent.group(1)), {})
        if value.startswith("${{"):
            return {"type": "uri_folder"}
    return {"type": literal_type(value)}


def _output_type(value: Any) -> str:
    if isinstance(value, Mapping) and isinstance(value.get("type"), str):
        return str(value["type"])
    return "uri_folder"


__all__ = ["ANONYMOUS", "inline_component", "inline_version", "is_inline_command"]
