"""Pipeline jobs (``type: pipeline``, Azure ML's CLI v2 ``pipelineJob`` YAML), pure.

``PIPELINE.parse`` validates a pipeline document into its stored form; ``PIPELINE.advance`` decides,
from the stored form and the steps' child jobs (``domain.jobs.parent_jobs``), which steps start now,
which are cancelled, and when the pipeline is over. A step is a command job: an inline command
(``command:``, ``code:``, ``environment:`` …) or a component (``component:`` an inline component:
the client inlines ``./train.yml`` and the service resolves ``azureml:train:1`` before ``parse``).

The steps form a DAG from their bindings (``domain.jobs.pipeline_bindings``): a step starts when every
step it reads from has completed; its compute is its own ``compute``, else the pipeline's
``settings.default_compute`` (``serverless`` and ``local`` as for command jobs). A failed step fails
the pipeline (the running steps are cancelled) unless ``settings.continue_on_step_failure``: then
what depends on it never starts, the rest runs, and the pipeline fails once all is done.

A step's ``reuse_key`` hashes what decides its outputs; the loop reuses a Completed job of the
workspace with the same key unless ``settings.force_rerun`` (docs/pipelines.md).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from cloudlet.domain.assets import assets, components
from cloudlet.domain.assets.assets import AssetKind, AssetSpec
from cloudlet.domain.errors import CloudletError, document_for, validation_error
from cloudlet.domain.jobs import pipeline_parallel
from cloudlet.domain.jobs.job_spec import (
    IO_NAME_PATTERN,
    PATH_TYPES,
    InputSpec,
    OutputSpec,
    normalise_compute,
    parse_job,
    translate_error,
)
from cloudlet.domain.jobs.job_status import ACTIVE, JobStatus
from cloudlet.domain.jobs.notifications import NotificationSetting
from cloudlet.domain.jobs.parent_jobs import ChildView, NewChild, ParentContext, ParentStep
from cloudlet.domain.jobs.pipeline_bindings import OUTPUT_MODES, child_job_name, output_binding, retarget
from cloudlet.domain.jobs.pipeline_dag import (
    FAILED,
    FAKE_PATH,
    checkable,
    child_doc,
    downstream_of,
    fake_upstream,
    is_reference,
    order,
    progress,
    reuse_key,
    upstream_of,
)

TOP_LEVEL = frozenset(
    {
        "$schema",
        "type",
        "name",
        "display_name",
        "description",
        "experiment_name",
        "tags",
        "properties",
        "inputs",
        "outputs",
        "settings",
        "jobs",
        "compute",
        "notification_setting",  # the pipeline's own end (domain/jobs/notifications.py); not its steps'
    }
)
SETTINGS = ("default_compute", "default_datastore", "continue_on_step_failure", "force_rerun")
# What an inline command step may hold (a command job's fields, less what the pipeline owns).
COMMAND_STEP = frozenset(
    {
        "type",
        "name",
        "display_name",
        "description",
        "tags",
        "command",
        "code",
        "environment",
        "inputs",
        "outputs",
        "environment_variables",
        "compute",
        "resources",
        "distribution",
        "limits",
        "queue_settings",
        "identity",
        "services",
    }
)
COMPONENT_STEP = frozenset({"type", "component", "inputs", "outputs", *components.OVERRIDABLE})
_OTHER_STEP_TYPES = ("sweep", "spark", "automl", "data_transfer", "import")


# ----------------------------------------------------------------------------------------------
# Parsing.


def parse_pipeline(doc: Any, name: str) -> dict[str, Any]:
    """Validate a pipeline job document; its stored form (settings normalised, each step checked
    as the command job it becomes, the DAG checked for unknown steps, ports and cycles)."""
    doc = document_for(doc, name, "pipeline job")
    kind = doc.get("type")
    if not isinstance(kind, str) or kind.lower() != "pipeline":
        raise validation_error("type", f"a pipeline job has type: pipeline, not {kind!r}")
    for key in doc:
        if key not in TOP_LEVEL:
            raise validation_error(
                str(key),
                f"unknown field '{key}' in a pipeline job; remove it "
                f"(fields: {', '.join(sorted(TOP_LEVEL))})",
            )
    out: dict[str, Any] = {"type": "pipeline", "name": name}
    for key in ("display_name", "description", "experiment_name"):
        if doc.get(key) is not None:
            if not isinstance(doc[key], str):
                raise validation_error(key, f"'{key}' must be a string")
            out[key] = doc[key]
    for key in ("tags", "properties"):
        if doc.get(key) is not None:
            if not isinstance(doc[key], dict):
                raise validation_error(key, f"'{key}' must be a mapping of names to strings")
            out[key] = {str(k): str(v) for k, v in doc[key].items()}
    out["inputs"] = _parent_inputs(doc.get("inputs"))
    out["outputs"] = _parent_outputs(doc.get("outputs"))
    out["settings"] = _settings(doc.get("settings"), doc.get("compute"))
    if doc.get("notification_setting") is not None:
        out["notification_setting"] = _notification_setting(doc["notification_setting"])
    jobs = doc.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        raise validation_error(
            "jobs", "a pipeline needs 'jobs': a mapping of step names to steps (e.g. a command step)"
        )
    steps: dict[str, Any] = {}
    for key, step in jobs.items():
        if not isinstance(key, str) or not IO_NAME_PATTERN.fullmatch(key):
            raise validation_error(f"jobs.{key}", f"step name {key!r} must be letters, digits and '_'")
        steps[key] = _step(step, f"jobs.{key}")
    out["jobs"] = steps
    order(out)  # unknown steps and ports, cycles
    for key in steps:
        if not checkable(out, key):
            continue  # a registered component is checked once the server has resolved it
        trial = child_doc(out, key, fake_upstream(out, key))  # its errors name jobs.<key>.…
        if trial["type"] == "pipeline":
            continue  # a pipeline component: checked as a pipeline when its step was parsed
        try:
            parse_job(trial, child_job_name(name, key))
        except CloudletError as exc:
            raise retarget(exc, f"jobs.{key}") from None
    return out


def _notification_setting(value: Any) -> dict[str, Any]:
    try:
        setting = NotificationSetting.model_validate(value)
    except ValidationError as exc:
        raise translate_error(
            exc, NotificationSetting, "notification_setting", "a notification setting"
        ) from None
    return setting.model_dump(mode="json", exclude_none=True)


def _parent_inputs(inputs: Any) -> dict[str, Any]:
    if inputs is None:
        return {}
    if not isinstance(inputs, dict):
        raise validation_error("inputs", "'inputs' must map names to literals or {type, path} mappings")
    out: dict[str, Any] = {}
    for key, item in inputs.items():
        target = f"inputs.{key}"
        if not isinstance(key, str) or not IO_NAME_PATTERN.fullmatch(key):
            raise validation_error(target, f"input name {key!r} must be letters, digits and '_'")
        if isinstance(item, dict):
            try:
                spec = InputSpec.model_validate(item)
            except ValidationError as exc:
                raise translate_error(exc, InputSpec, target, "an input") from None
            out[key] = spec.model_dump(mode="json", exclude_none=True)
        elif isinstance(item, str | int | float | bool):
            out[key] = item
        else:
            raise validation_error(target, f"input '{key}' must be a literal or a {{type, path}} mapping")
    return out


def _parent_outputs(outputs: Any) -> dict[str, Any]:
    if outputs is None:
        return {}
    if not isinstance(outputs, dict):
        raise validation_error("outputs", "'outputs' must map names to {type, path, mode} mappings")
    out: dict[str, Any] = {}
    for key, item in outputs.items():
        target = f"outputs.{key}"
        if not isinstance(key, str) or not IO_NAME_PATTERN.fullmatch(key):
            raise validation_error(target, f"output name {key!r} must be letters, digits and '_'")
        out[key] = _output_decl(item, target)
    return out


def _output_decl(item: Any, target: str) -> dict[str, Any]:
    """An output's declaration checked (type, path, mode; ``direct`` allowed), kept as written."""
    if item is None:
        return {}
    if not isinstance(item, dict):
        raise validation_error(target, "an output must be a mapping such as {type: uri_folder, mode: upload}")
    mode = item.get("mode")
    if mode is not None and (not isinstance(mode, str) or mode not in OUTPUT_MODES):
        raise validation_error(
            f"{target}.mode",
            f"output mode {mode!r} is not one of: {', '.join(OUTPUT_MODES)} (ro_mount and download are "
            "input modes)",
        )
    checked = {**item, "mode": OUTPUT_MODES[mode]} if mode is not None else dict(item)
    path = checked.get("path")
    if path is not None and not isinstance(path, str):
        raise validation_error(f"{target}.path", "an output's path must be an azureml://datastores/… URI")
    if isinstance(path, str) and not path.startswith("azureml://datastores/") and "${{" not in path:
        raise validation_error(
            f"{target}.path",
            f"output path {path!r} must be azureml://datastores/<datastore>/paths/<path> "
            "(it may use ${{name}} and ${{output_name}})",
        )
    try:
        OutputSpec.model_validate({**checked, "path": None})
    except ValidationError as exc:
        raise translate_error(exc, OutputSpec, target, "an output") from None
    return dict(item)


def setting_warnings(doc: Mapping[str, Any]) -> list[str]:
    """A warning for each setting of a parsed pipeline that Azure ML (and so cloudlet) ignores."""
    out = []
    for key in doc.get("settings") or {}:
        if key not in SETTINGS:
            near = difflib.get_close_matches(key, SETTINGS, n=1)
            hint = f"did you mean '{near[0]}'? " if near else ""
            out.append(
                f"settings.{key}: unknown pipeline setting, ignored (as Azure ML does); {hint}"
                f"settings are: {', '.join(SETTINGS)}"
            )
    return out


def _settings(settings: Any, compute: Any) -> dict[str, Any]:
    if settings is None:
        settings = {}
    if not isinstance(settings, dict):
        raise validation_error("settings", "'settings' must be a mapping (default_compute, force_rerun, …)")
    out: dict[str, Any] = {}
    for key, value in settings.items():
        target = f"settings.{key}"
        if key not in SETTINGS:
            # Azure ML ignores a setting it does not know (the samples' ``default_datestore``
            # typo): kept as written, so ``setting_warnings`` names it whenever the doc is read.
            out[str(key)] = value
            continue
        if key in ("continue_on_step_failure", "force_rerun"):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise validation_error(target, f"'{key}' must be true or false")
            out[key] = value
        elif value is not None:
            if not isinstance(value, str) or not value.strip():
                raise validation_error(target, f"'{key}' must name a {key.removeprefix('default_')}")
            out[key] = _compute(value, target) if key == "default_compute" else _datastore(value)
    if compute is not None and "default_compute" not in out:
        if not isinstance(compute, str):
            raise validation_error("compute", "'compute' must name a compute, e.g. azureml:cpu-cluster")
        out["default_compute"] = _compute(compute, "compute")
    return out


def _compute(value: str, target: str) -> str:
    try:
        return normalise_compute(value)
    except ValueError as exc:
        raise validation_error(target, str(exc)) from None


def _datastore(value: str) -> str:
    text = value.strip()
    return text[len("azureml:") :] if text.lower().startswith("azureml:") else text


def _step(step: Any, where: str) -> dict[str, Any]:
    if not isinstance(step, dict):
        raise validation_error(where, "a step must be a mapping: a command step or {component: …}")
    kind = str(step.get("type", "command")).lower()
    if kind == "pipeline":
        return _pipeline_step(step, where)
    if kind == "parallel":
        return pipeline_parallel.parse_step(step, where)
    if kind != "command":
        what = "are not supported in pipelines yet" if kind in _OTHER_STEP_TYPES else "are unknown"
        raise validation_error(
            f"{where}.type", f"steps of type {kind!r} {what}; use type: command, parallel or pipeline"
        )
    if "component" in step:
        allowed = COMPONENT_STEP
        component = step["component"]
        if is_reference(component):  # azureml:name:1, @latest: the server resolves it, then parses again
            pass
        elif not isinstance(component, dict):
            raise validation_error(
                f"{where}.component",
                f"component {component!r} was not resolved: a local file is inlined by `cloudlet job "
                "create`, an azureml:name:version reference by the server; send the component itself",
            )
        else:
            try:
                spec = components.parse_component(component)
            except CloudletError as exc:
                raise retarget(exc, f"{where}.component") from None
            step = {**step, "component": components.component_to_doc(spec)}
    elif "command" in step:
        allowed = COMMAND_STEP
    else:
        raise validation_error(where, "a step needs 'command' (an inline command) or 'component'")
    for key in step:
        if key not in allowed:
            raise validation_error(
                f"{where}.{key}", f"'{key}' cannot be set on this step; allowed: {', '.join(sorted(allowed))}"
            )
    if step.get("compute") is not None:
        if not isinstance(step["compute"], str):
            raise validation_error(
                f"{where}.compute", "'compute' must name a compute, e.g. azureml:cpu-cluster"
            )
        step = {**step, "compute": _compute(step["compute"], f"{where}.compute")}
    for field in ("inputs", "outputs"):
        if step.get(field) is not None and not isinstance(step[field], dict):
            raise validation_error(f"{where}.{field}", f"'{field}' must be a mapping of names")
    for key, value in (step.get("outputs") or {}).items():
        if output_binding(value, f"{where}.outputs.{key}") is None:
            _output_decl(value, f"{where}.outputs.{key}")
        elif isinstance(value, dict):
            _output_decl({k: v for k, v in value.items() if k != "path"}, f"{where}.outputs.{key}")
    out = {k: v for k, v in step.items() if v is not None or k == "outputs"}
    out["type"] = "command"
    return out


# What a pipeline component step may hold, and a pipeline component's own fields.
PIPELINE_STEP = frozenset(
    {"type", "component", "inputs", "outputs", "compute", "display_name", "description"}
)
_PIPELINE_COMPONENT = frozenset({"$schema", "type", "name", "version", "display_name", "description", "tags"})
_PIPELINE_COMPONENT |= {"inputs", "outputs", "jobs", "settings", "is_deterministic"}
# A literal for each declared literal input without a default: the component's steps are
# checked as they would run (the step's own values come when it runs).
_TRIAL_LITERALS: dict[str, Any] = {"integer": 1, "number": 1.0, "boolean": True, "string": "x"}


def _pipeline_step(step: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``type: pipeline`` step: a pipeline component (its YAML inlined by the CLI or client)
    run as a child pipeline with the step's inputs and outputs."""
    for key in step:
        if key not in PIPELINE_STEP:
            raise validation_error(
                f"{where}.{key}",
                f"'{key}' cannot be set on a pipeline step; allowed: {', '.join(sorted(PIPELINE_STEP))}",
            )
    component = step.get("component")
    if is_reference(component):  # a registered pipeline component: the server resolves it, then parses again
        return _pipeline_reference(step, where)
    if not isinstance(component, dict):
        raise validation_error(
            f"{where}.component", "a pipeline step needs 'component': a pipeline component (its YAML file)"
        )
    inner = pipeline_component(component, f"{where}.component")
    out = {k: v for k, v in step.items() if v is not None or k == "outputs"}
    for field, declared in (("inputs", inner["inputs"]), ("outputs", inner["outputs"])):
        given = out.get(field)
        if given is not None and not isinstance(given, dict):
            raise validation_error(f"{where}.{field}", f"'{field}' must be a mapping of names")
        for name in given or {}:
            if name not in declared:
                raise validation_error(
                    f"{where}.{field}.{name}",
                    f"the pipeline component declares no {field[:-1]} '{name}' ({field}: "
                    f"{', '.join(declared) or 'none'})",
                )
    for key, value in (out.get("outputs") or {}).items():
        if output_binding(value, f"{where}.outputs.{key}") is None:
            _output_decl(value, f"{where}.outputs.{key}")
    if out.get("compute") is not None:
        if not isinstance(out["compute"], str):
            raise validation_error(
                f"{where}.compute", "'compute' must name a compute, e.g. azureml:cpu-cluster"
            )
        out["compute"] = _compute(out["compute"], f"{where}.compute")
    return {**out, "type": "pipeline", "component": inner}


def _pipeline_reference(step: dict[str, Any], where: str) -> dict[str, Any]:
    out = {k: v for k, v in step.items() if v is not None or k == "outputs"}
    for field in ("inputs", "outputs"):
        if out.get(field) is not None and not isinstance(out[field], dict):
            raise validation_error(f"{where}.{field}", f"'{field}' must be a mapping of names")
    if out.get("compute") is not None:
        if not isinstance(out["compute"], str):
            raise validation_error(
                f"{where}.compute", "'compute' must name a compute, e.g. azureml:cpu-cluster"
            )
        out["compute"] = _compute(out["compute"], f"{where}.compute")
    return {**out, "type": "pipeline"}


def registered_pipeline_component(
    doc: dict[str, Any], name: str | None, version: str | None
) -> tuple[str, str | None, dict[str, Any]]:
    """A pipeline component to register (``cloudlet component create`` of a ``type: pipeline``
    YAML): its name, version and stored form (checked as the pipeline it runs; what a step runs)."""
    doc = document_for(doc, name, "component")
    given = doc.get("version")
    if version is not None and given is not None and str(given) != version:
        raise validation_error(
            "version", f"the body says version '{given}' but the request is for '{version}'; make them match"
        )
    wanted = version if version is not None else (str(given) if given is not None else None)
    named = doc.get("name")
    if not isinstance(named, str) or not components.NAME_PATTERN.fullmatch(named):
        raise validation_error("name", f"a component needs a name to be registered: {components.NAME_RULE}")
    body = {k: v for k, v in doc.items() if k not in ("name", "version", "$schema")}
    stored = pipeline_component(body, "")
    for key in ("display_name", "description", "tags", "is_deterministic"):
        if body.get(key) is not None:
            stored[key] = body[key]
    stored.pop("name", None)
    return named, wanted, stored


def pipeline_component(component: dict[str, Any], where: str) -> dict[str, Any]:
    """A pipeline component (``type: pipeline``, inputs and outputs declared, ``jobs``) checked as
    the pipeline it runs; its stored form (declared inputs kept as declared)."""
    kind = str(component.get("type", "pipeline")).lower()
    if kind != "pipeline":
        raise validation_error(f"{where}.type", f"a pipeline step runs a pipeline component, not {kind!r}")
    for key in component:
        if key not in _PIPELINE_COMPONENT:
            raise validation_error(
                f"{where}.{key}",
                f"unknown field '{key}' in a pipeline component "
                f"(fields: {', '.join(sorted(_PIPELINE_COMPONENT))})",
            )
    inputs = component.get("inputs") or {}
    if not isinstance(inputs, dict):
        raise validation_error(f"{where}.inputs", "'inputs' must map names to declarations ({type: …})")
    declared: dict[str, Any] = {}
    trial: dict[str, Any] = {}
    for name, item in inputs.items():
        if not isinstance(item, dict):
            declared[name] = trial[name] = item  # a literal default
            continue
        item = {k: v for k, v in item.items() if k not in ("optional", "description")}
        declared[name] = item
        kind_of = str(item.get("type", "uri_folder")).lower()
        if kind_of in PATH_TYPES and not item.get("path"):
            trial[name] = {**item, "path": FAKE_PATH}
        elif kind_of not in PATH_TYPES and item.get("default") is None and item.get("value") is None:
            trial[name] = {**item, "default": _TRIAL_LITERALS.get(kind_of, "x")}
        else:
            trial[name] = item
    body = {k: v for k, v in component.items() if k in ("jobs", "outputs", "settings")}
    try:
        parsed = parse_pipeline({**body, "type": "pipeline", "inputs": trial}, "component")
    except CloudletError as exc:
        raise retarget(exc, where) from None
    outputs = {n: {"type": "uri_folder", **o} for n, o in parsed["outputs"].items()}
    named = {k: str(component[k]) for k in ("name", "version") if component.get(k) is not None}
    return {**parsed, **named, "inputs": declared, "outputs": outputs}


# ----------------------------------------------------------------------------------------------
# Advancing.


def advance(doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext) -> ParentStep:
    """One pass of a pipeline: start the ready steps, stop on a failure, settle when all is done."""
    by_key = {child.key: child for child in children}
    active = tuple(k for k, c in by_key.items() if c.status in ACTIVE)
    if context.cancel_requested:
        return ParentStep(
            cancel=active,
            cancel_reason="the pipeline was canceled",
            outcome=JobStatus.CANCELED,
            message="canceled",
        )
    steps = order(doc)
    # Failed before canceled: a step the pipeline cancelled after another failed is not the cause.
    ended = [k for k in steps if k in by_key and by_key[k].status in FAILED]
    failed = sorted(ended, key=lambda k: by_key[k].status is not JobStatus.FAILED)
    settings = doc["settings"]
    if failed and not settings.get("continue_on_step_failure"):
        first = failed[0]
        message = f"step {first} failed: {_why(by_key[first])}"
        return ParentStep(
            cancel=active,
            cancel_reason=f"the pipeline failed: {message}",
            outcome=JobStatus.FAILED,
            message=message,
            progress=progress(doc, children),
        )
    blocked = downstream_of(doc, steps, set(failed))
    submit: list[NewChild] = []
    for key in steps:
        if key in by_key or key in blocked:
            continue
        ups = upstream_of(doc, key)
        if not all(up in by_key and by_key[up].status is JobStatus.COMPLETED for up in ups):
            continue
        upstream = {up: dict(by_key[up].outputs) for up in ups}
        try:
            job_doc = child_doc(doc, key, upstream)
        except CloudletError as exc:
            message = f"step {key} could not start: {exc.message}"
            return ParentStep(
                cancel=active,
                cancel_reason=f"the pipeline failed: {message}",
                outcome=JobStatus.FAILED,
                message=message,
            )
        submit.append(NewChild(key=key, doc=job_doc, reuse_key=reuse_key(doc, key, job_doc)))
    if submit or active:
        return ParentStep(submit=tuple(submit), progress=progress(doc, children))
    waiting = [k for k in steps if k not in by_key and k not in blocked]
    if waiting:  # nothing runs, nothing can start: an upstream step ended without completing
        message = f"steps {', '.join(waiting)} cannot start"
        return ParentStep(outcome=JobStatus.FAILED, message=message, progress=progress(doc, children))
    if failed:
        parts = [f"step {k} failed: {_why(by_key[k])}" for k in failed]
        if blocked:
            parts.append(
                f"not run (they depend on a failed step): {', '.join(k for k in steps if k in blocked)}"
            )
        return ParentStep(
            outcome=JobStatus.FAILED, message="; ".join(parts), progress=progress(doc, children)
        )
    return ParentStep(
        outcome=JobStatus.COMPLETED, message=progress(doc, children), progress=progress(doc, children)
    )


def _why(child: ChildView) -> str:
    if child.status is JobStatus.CANCELED:
        return child.error or "it was canceled"
    return child.error or "no error was recorded"


class PipelineKind:
    """``ParentKind`` for ``type: pipeline``."""

    def parse(self, doc: Any, name: str) -> dict[str, Any]:
        return parse_pipeline(doc, name)

    def metric_keys(self, doc: Mapping[str, Any]) -> Sequence[str]:
        return ()

    def advance(
        self, doc: Mapping[str, Any], children: Sequence[ChildView], context: ParentContext
    ) -> ParentStep:
        return advance(doc, children, context)


PIPELINE = PipelineKind()


def parse_asset(kind: AssetKind, doc: Any, name: str | None = None, version: str | None = None) -> AssetSpec:
    """``domain.assets.assets.parse_asset``, and ``type: pipeline`` and ``type: parallel`` components
    (which build on it) too."""
    if kind == "component" and isinstance(doc, dict) and str(doc.get("type", "")).lower() == "pipeline":
        named, wanted, stored = registered_pipeline_component(doc, name, version)
        return AssetSpec(kind, named, wanted, stored)
    if kind == "component" and isinstance(doc, dict) and str(doc.get("type", "")).lower() == "parallel":
        named, wanted, stored = pipeline_parallel.registered_component(doc, name, version)
        return AssetSpec(kind, named, wanted, stored)
    return assets.parse_asset(kind, doc, name, version)
