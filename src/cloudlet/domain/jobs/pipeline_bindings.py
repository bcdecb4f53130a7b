"""A pipeline step's bindings and the command job it becomes (pure; ``domain.jobs.pipeline_jobs`` uses it).

A step's inputs and outputs may be bound, as in Azure ML's CLI v2 pipeline YAML:

- ``${{parent.inputs.x}}``: the pipeline's input ``x`` (a literal, or a path with its type and mode);
- ``${{parent.jobs.a.outputs.b}}``: step ``a``'s output ``b`` (its path, once ``a`` has completed);
- ``${{parent.jobs.a.inputs.c}}``: what step ``a`` is given as its input ``c``;
- ``${{parent.outputs.y}}`` (as a step's output): the step writes the pipeline's output ``y``, at
  the path the pipeline gives it (or one of cloudlet's choosing).

An output path may hold ``${{name}}`` (the step's job name), ``${{output_name}}`` (the output's
name) and ``${{default_datastore}}`` (``settings.default_datastore``). An output without a path gets
``azureml://datastores/<default_datastore>/paths/azureml/<step's job name>/<output name>/``, the
folder a command job's output has always had on cloudlet (a ``uri_file`` output: that path without
the last '/', the file itself, which ``jobs.download`` of a pipeline output then finds).

An inline step's output ``artifacts`` declared without a path (``outputs: {artifacts: }``, Azure's
``hello-pipeline-default-artifacts``) is the step's default artifacts, as on Azure ML: the run's
artifact folder, which holds what the step left in ``./outputs`` and ``./logs`` under
``outputs/`` and ``logs/`` (``${{inputs.x}}/outputs/world.txt`` downstream). It is no output
folder of the command job.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs.job_paths import PATH_TYPES

DEFAULT_DATASTORE = "workspaceblobstore"
SERVERLESS = "serverless"
MAX_CHILD_NAME = 128  # jobs.name
_ID = r"[A-Za-z_][A-Za-z0-9_]*"
_WHOLE = re.compile(r"^\s*\$\{\{\s*([^{}]*?)\s*\}\}\s*$")
_ANY = re.compile(r"\$\{\{\s*([^{}]*?)\s*\}\}")
PARENT_INPUT = re.compile(rf"parent\.inputs\.({_ID})")
PARENT_OUTPUT = re.compile(rf"parent\.outputs\.({_ID})")
STEP_OUTPUT = re.compile(rf"parent\.jobs\.({_ID})\.outputs\.({_ID})")
STEP_INPUT = re.compile(rf"parent\.jobs\.({_ID})\.inputs\.({_ID})")
# Placeholders an output path may hold, and what fills them.
PATH_TOKENS = ("name", "output_name", "default_datastore")
# Output modes (Azure's) and what a command job on cloudlet is given for each (docs/pipelines.md).
OUTPUT_MODES = {"rw_mount": "rw_mount", "upload": "upload", "direct": "rw_mount"}
# The output naming a step's default artifacts (see the module's docstring).
ARTIFACTS_OUTPUT = "artifacts"
# Step fields that do not change what a step computes: left out of its reuse key.
_NOT_REUSE = frozenset({"name", "display_name", "description", "tags", "experiment_name", "compute"})
_NOT_REUSE |= {"resources", "queue_settings", "limits", "identity", "services", "outputs", "inputs"}


class Binding:
    """A reference found in a step's input or output."""

    __slots__ = ("kind", "name", "step")

    def __init__(self, kind: str, name: str, step: str | None = None) -> None:
        # "input" (parent.inputs), "output" (parent.outputs), "step" (parent.jobs.s.outputs),
        # "step_input" (parent.jobs.s.inputs: what step s is given)
        self.kind = kind
        self.name = name
        self.step = step

    def __repr__(self) -> str:
        return f"Binding({self.kind!r}, {self.name!r}, {self.step!r})"


def binding_of(value: Any, target: str) -> Binding | None:
    """The binding a value is (``${{parent.…}}``, the whole value), None for a plain value; a
    ``${{…}}`` that is not one of the pipeline forms is refused naming TARGET."""
    if not isinstance(value, str) or "${{" not in value:
        return None
    match = _WHOLE.fullmatch(value)
    ref = match.group(1) if match else None
    if ref is not None:
        if found := PARENT_INPUT.fullmatch(ref):
            return Binding("input", found.group(1))
        if found := PARENT_OUTPUT.fullmatch(ref):
            return Binding("output", found.group(1))
        if found := STEP_OUTPUT.fullmatch(ref):
            return Binding("step", found.group(2), found.group(1))
        if found := STEP_INPUT.fullmatch(ref):
            return Binding("step_input", found.group(2), found.group(1))
        if re.fullmatch(rf"jobs\.({_ID})\.outputs\.({_ID})", ref):
            raise validation_error(target, f"'{value}' needs the 'parent.' prefix: ${{{{parent.{ref}}}}}")
    raise validation_error(
        target,
        f"'{value}' is not a binding a pipeline step understands; use the whole value "
        "${{parent.inputs.<name>}}, ${{parent.jobs.<step>.outputs.<name>}}, "
        "${{parent.jobs.<step>.inputs.<name>}} or (for an output) "
        "${{parent.outputs.<name>}}",
    )


def input_binding(value: Any, target: str) -> Binding | None:
    """The binding of a step input: the value itself, or a mapping's ``path``/``value``."""
    if isinstance(value, dict):
        for key in ("path", "value"):
            found = binding_of(value.get(key), f"{target}.{key}")
            if found is not None:
                return found
        return None
    return binding_of(value, target)


def output_binding(value: Any, target: str) -> Binding | None:
    """The pipeline output a step's output is bound to; a path with ``${{name}}`` and the like is
    a path template (``fill_path``), not a binding."""
    path = value.get("path") if isinstance(value, dict) else value
    if isinstance(path, str) and (match := _WHOLE.fullmatch(path)) and match.group(1) in PATH_TOKENS:
        return None
    if isinstance(path, str) and "${{" in path and not _WHOLE.fullmatch(path):
        return None
    found = binding_of(path, target)
    if found is not None and found.kind != "output":
        raise validation_error(
            target, "a step's output may be bound only to a pipeline output: ${{parent.outputs.<name>}}"
        )
    return found


def child_job_name(parent: str, key: str) -> str:
    """The name of the job that runs step KEY of pipeline PARENT: ``<parent>-<key>``, as the
    parent-job loop names children (``services.jobs.parent_jobs.child_name``: ``_`` for other
    characters, at most 128 with a hash): ``${{name}}`` in an output path is this name."""
    name = f"{parent}-{re.sub(r'[^A-Za-z0-9_-]', '_', key)}"
    if len(name) > MAX_CHILD_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:12]
        name = f"{name[: MAX_CHILD_NAME - 13]}-{digest}"
    return name


def default_output_path(datastore: str, job: str, output: str, kind: Any = "uri_folder") -> str:
    """Where an output with no path of its own goes: a folder, or for a ``uri_file`` output the
    file itself (no trailing '/': ``jobs.download`` lists a '/'-ended path as a folder's prefix)."""
    path = f"azureml://datastores/{datastore}/paths/azureml/{job}/{output}"
    return path if str(kind).lower() == "uri_file" else f"{path}/"


def is_default_artifacts(name: str, value: Any) -> bool:
    """Whether a step's output NAME declared as VALUE is its default artifacts: ``artifacts``
    with no path, mode or binding (at most ``type: uri_folder``)."""
    if name != ARTIFACTS_OUTPUT:
        return False
    if value is None:
        return True
    return (
        isinstance(value, Mapping)
        and set(value) <= {"type"}
        and value.get("type", "uri_folder") == "uri_folder"
    )


def default_artifacts_path(job: str, attempt: int) -> str:
    """Where attempt ATTEMPT of JOB keeps its default artifacts (``./outputs``, ``./logs``): the
    artifact store's ``ExperimentRun/dcid.<job>/``, one folder per attempt here
    (``DataRoot.job_artifacts``; the artifact store is the default datastore's folder)."""
    return f"azureml://datastores/{DEFAULT_DATASTORE}/paths/ExperimentRun/dcid.{job}/attempt-{attempt}/"


def fill_path(path: str, job: str, output: str, datastore: str, target: str) -> str:
    """An output path with ``${{name}}``/``${{output_name}}``/``${{default_datastore}}`` filled."""
    values = {"name": job, "output_name": output, "default_datastore": datastore}

    def one(match: re.Match[str]) -> str:
        token = match.group(1)
        if token not in values:
            raise validation_error(
                target,
                f"'${{{{{token}}}}}' cannot be used in an output path; use "
                + ", ".join(f"${{{{{t}}}}}" for t in PATH_TOKENS),
            )
        return values[token]

    return _ANY.sub(one, path)


def resolve_input(
    value: Any,
    target: str,
    parent_inputs: Mapping[str, Any],
    upstream: Mapping[str, Mapping[str, str]],
    upstream_types: Mapping[str, Mapping[str, str]],
) -> Any:
    """A step input with its binding replaced: a pipeline input's value, or an upstream output
    as ``{type, path}`` (UPSTREAM: step → output → path; UPSTREAM_TYPES: the outputs' types)."""
    found = input_binding(value, target)
    if found is None:
        return value
    extra = {k: v for k, v in value.items() if k not in ("path", "value")} if isinstance(value, dict) else {}
    if found.kind == "input":
        given = parent_inputs[found.name]
        if isinstance(given, dict):
            if given.get("type") in PATH_TYPES:
                return {**given, **extra}
            literal = given.get("value", given.get("default"))
            return {**extra, "value": literal} if extra else literal
        return {**extra, "value": given} if extra else given
    if found.kind == "step":
        assert found.step is not None
        path = upstream.get(found.step, {}).get(found.name)
        if path is None:
            raise validation_error(target, f"step '{found.step}' ended without an output '{found.name}'")
        kind = upstream_types.get(found.step, {}).get(found.name, "uri_folder")
        return {"type": kind, **extra, "path": path}
    raise validation_error(target, "a step's input cannot be bound to a pipeline output")


def resolve_output(
    value: Any,
    target: str,
    output: str,
    job: str,
    parent_outputs: Mapping[str, Any],
    datastore: str,
) -> dict[str, Any]:
    """A step output as the command job's ``{type, path, mode, …}``: a pipeline output's path when
    bound to one, the path given, or cloudlet's default; placeholders filled, mode mapped."""
    found = output_binding(value, target)
    given: dict[str, Any] = dict(value) if isinstance(value, dict) else {}
    if found is not None:
        given.pop("path", None)
        given = {**(parent_outputs.get(found.name) or {}), **given}
    path = given.get("path")
    given["path"] = (
        fill_path(str(path), job, output, datastore, f"{target}.path")
        if path
        else default_output_path(datastore, job, output, given.get("type"))
    )
    if "mode" in given:
        given["mode"] = OUTPUT_MODES.get(str(given["mode"]), given["mode"])
    return given  # a pipeline output's name/version: the step's output is registered as that asset


def step_reuse_key(
    job_doc: Mapping[str, Any], declared_outputs: Mapping[str, Any], component_hash: str | None
) -> str:
    """What decides a step's outputs, hashed: the component (its content hash) or the inline
    command with its code and environment, the step's resolved inputs (an upstream output by its
    path), and its outputs as the step declares them (a path template, not the path it filled in).
    Compute, resources and names do not count: a rerun elsewhere gives the same data."""
    body = {k: v for k, v in job_doc.items() if k not in _NOT_REUSE}
    body["inputs"] = job_doc.get("inputs") or {}
    body["outputs"] = {name: declared_outputs[name] for name in sorted(declared_outputs)}
    if component_hash is not None:
        body["component"] = component_hash
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def retarget(exc: CloudletError, where: str) -> CloudletError:
    """EXC with its target under WHERE (``jobs.train``; "" leaves it as it is)."""
    if not where:
        return exc
    target = f"{where}.{exc.target}" if exc.target and exc.target != "$" else where
    return CloudletError(exc.code, exc.message, target, exc.status, exc.details)
