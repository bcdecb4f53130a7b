"""A pipeline's steps as a DAG, and each step as the command job that runs it (pure).

Used by ``domain.jobs.pipeline_jobs`` (parse, advance) and by ``job show`` (``dag_text``): the upstream
of a step are the steps whose outputs it binds (``${{parent.jobs.<step>.outputs.<name>}}``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cloudlet.domain.assets import components
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs import pipeline_parallel
from cloudlet.domain.jobs.job_spec import normalise_compute
from cloudlet.domain.jobs.job_status import ACTIVE, JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView
from cloudlet.domain.jobs.pipeline_bindings import (
    DEFAULT_DATASTORE,
    SERVERLESS,
    child_job_name,
    input_binding,
    is_default_artifacts,
    output_binding,
    resolve_input,
    resolve_output,
    retarget,
    step_reuse_key,
)

FAILED = frozenset({JobStatus.FAILED, JobStatus.CANCELED})
FAKE_PATH = "azureml://datastores/workspaceblobstore/paths/azureml/validation/output/"


_BARE_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(?::[^:/@]+|@[^:/@]+)$")


def is_reference(component: Any) -> bool:
    """A registered component named by reference (``azureml:train:1``, ``azureml:train@latest``,
    ``train:1``, ``train@latest``, an ARM id), which the server resolves
    (``services.jobs.pipelines.resolve``); not a local file (``./train.yml``, ``file:train.yml``)."""
    if not isinstance(component, str):
        return False
    text = component.strip()
    if text.lower().startswith("azureml:"):
        return True
    return bool(_BARE_REFERENCE.fullmatch(text)) and not text.lower().endswith((".yml", ".yaml"))


def checkable(doc: Mapping[str, Any], key: str) -> bool:
    """Step KEY and the steps it reads from are known in full (no unresolved component)."""
    steps = doc["jobs"]
    return not any(is_reference(steps[k].get("component")) for k in (key, *upstream_of(doc, key)))


def _component(step: Mapping[str, Any]) -> components.ComponentSpec | None:
    """A command step's component (None for an inline command or a pipeline component)."""
    if step.get("type") == "pipeline":
        return None
    raw = step.get("component")
    if is_reference(raw):
        raise validation_error("component", f"component '{raw}' was not resolved (a registered component)")
    return components.parse_component(raw) if isinstance(raw, dict) else None


def step_outputs(step: Mapping[str, Any]) -> dict[str, str]:
    """A step's outputs and their types."""
    if step.get("type") == "pipeline":
        return {
            name: str(out.get("type", "uri_folder")) for name, out in step["component"]["outputs"].items()
        }
    spec = _component(step)
    if spec is not None:
        return {name: str(out.type) for name, out in spec.outputs.items()}
    return {
        name: str((value or {}).get("type", "uri_folder")) if isinstance(value, dict) else "uri_folder"
        for name, value in (step.get("outputs") or {}).items()
    }


def follow(doc: Mapping[str, Any], value: Any, target: str) -> Any:
    """VALUE with ``${{parent.jobs.<step>.inputs.<name>}}`` replaced by what that step is given
    (followed through other steps' inputs); a missing step or input, or a loop, is refused."""
    steps = doc["jobs"]
    seen: list[str] = []
    while (binding := input_binding(value, target)) is not None and binding.kind == "step_input":
        assert binding.step is not None
        here = f"{binding.step}.inputs.{binding.name}"
        if here in seen:
            raise validation_error(
                target, f"the step inputs bind to each other in a loop: {' → '.join(seen)}"
            )
        seen.append(here)
        if binding.step not in steps:
            raise validation_error(
                target, f"step '{binding.step}' does not exist (steps: {', '.join(steps)})"
            )
        given = steps[binding.step].get("inputs") or {}
        if binding.name not in given:
            raise validation_error(
                target,
                f"step '{binding.step}' is given no input '{binding.name}' (it is given: "
                f"{', '.join(given) or 'none'})",
            )
        value = given[binding.name]
    return value


def upstream_of(doc: Mapping[str, Any], key: str) -> list[str]:
    """The steps step KEY reads from (``${{parent.jobs.<step>.outputs.…}}``), in document order;
    unknown steps, ports and pipeline inputs/outputs are refused naming the field."""
    steps = doc["jobs"]
    step = steps[key]
    found: list[str] = []
    for name, value in (step.get("inputs") or {}).items():
        target = f"jobs.{key}.inputs.{name}"
        binding = input_binding(follow(doc, value, target), target)
        if binding is None:
            continue
        if binding.kind == "input":
            if binding.name not in doc["inputs"]:
                known = ", ".join(doc["inputs"]) or "none"
                raise validation_error(
                    target, f"pipeline input '{binding.name}' is not declared (pipeline inputs: {known})"
                )
        elif binding.kind == "step":
            assert binding.step is not None
            if binding.step not in steps:
                raise validation_error(
                    target, f"step '{binding.step}' does not exist (steps: {', '.join(steps)})"
                )
            if binding.step == key:
                raise validation_error(target, f"step '{key}' cannot read its own output '{binding.name}'")
            if not is_reference(steps[binding.step].get("component")):  # else checked once resolved
                ports = step_outputs(steps[binding.step])
                if binding.name not in ports:
                    raise validation_error(
                        target,
                        f"step '{binding.step}' has no output '{binding.name}' (its outputs: "
                        f"{', '.join(ports) or 'none'})",
                    )
            if binding.step not in found:
                found.append(binding.step)
        else:
            raise validation_error(target, "a step's input cannot be bound to a pipeline output")
    for name, value in (step.get("outputs") or {}).items():
        binding = output_binding(value, f"jobs.{key}.outputs.{name}")
        if binding is not None and binding.name not in doc["outputs"]:
            known = ", ".join(doc["outputs"]) or "none"
            raise validation_error(
                f"jobs.{key}.outputs.{name}",
                f"pipeline output '{binding.name}' is not declared (pipeline outputs: {known})",
            )
    return found


def order(doc: Mapping[str, Any]) -> list[str]:
    """The steps in an order where each comes after the steps it reads from; a cycle is refused
    naming a step on it."""
    upstream = {key: upstream_of(doc, key) for key in doc["jobs"]}
    done: list[str] = []
    state: dict[str, int] = {}

    def visit(key: str, path: list[str]) -> None:
        if state.get(key) == 2:
            return
        if state.get(key) == 1:
            cycle = " → ".join([*path[path.index(key) :], key])
            raise validation_error(
                f"jobs.{key}.inputs",
                f"the steps form a cycle: {cycle}; a step cannot depend on itself through other steps",
            )
        state[key] = 1
        for up in upstream[key]:
            visit(up, [*path, key])
        state[key] = 2
        done.append(key)

    for key in doc["jobs"]:
        visit(key, [])
    return done


def fake_upstream(doc: Mapping[str, Any], key: str) -> dict[str, dict[str, str]]:
    return {up: dict.fromkeys(step_outputs(doc["jobs"][up]), FAKE_PATH) for up in upstream_of(doc, key)}


# ----------------------------------------------------------------------------------------------
# A step as the command job that runs it.


def step_compute(doc: Mapping[str, Any], key: str) -> str | None:
    """The compute step KEY runs on (None: serverless)."""
    step = doc["jobs"][key]
    raw = step.get("compute")
    compute = normalise_compute(raw) if isinstance(raw, str) else doc["settings"].get("default_compute")
    return None if compute is None or compute.lower() == SERVERLESS else compute


def child_doc(doc: Mapping[str, Any], key: str, upstream: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
    """The command job document that runs step KEY, its bindings resolved (UPSTREAM: step →
    output → path of the completed steps it reads from)."""
    step = doc["jobs"][key]
    job = child_job_name(doc["name"], key)
    datastore = doc["settings"].get("default_datastore", DEFAULT_DATASTORE)
    types = {up: step_outputs(doc["jobs"][up]) for up in upstream}
    where = f"jobs.{key}"
    inputs = {
        name: resolve_input(
            follow(doc, value, f"{where}.inputs.{name}"),
            f"{where}.inputs.{name}",
            doc["inputs"],
            upstream,
            types,
        )
        for name, value in (step.get("inputs") or {}).items()
    }
    if step.get("type") == "pipeline":
        return _pipeline_child(doc, key, job, inputs)
    spec = _component(step)
    declared = step.get("outputs") or {}
    names = (
        list(spec.outputs)
        if spec is not None  # the job's default artifacts are no output folder of it
        else [n for n, v in declared.items() if not is_default_artifacts(n, v)]
    )
    outputs = {
        name: resolve_output(
            declared.get(name), f"{where}.outputs.{name}", name, job, doc["outputs"], datastore
        )
        for name in names
    }
    if spec is not None:
        overrides = {k: v for k, v in step.items() if k in components.OVERRIDABLE and k != "name"}
        outputs = {n: {k: v for k, v in o.items() if k != "type"} for n, o in outputs.items()}
        try:
            result = components.command_job_doc(spec, inputs, outputs, overrides)
        except CloudletError as exc:
            raise retarget(exc, where) from None
    else:
        if step.get("type") == "parallel":
            result = pipeline_parallel.command_job(step)
        else:
            result = {k: v for k, v in step.items() if k not in ("inputs", "outputs", "name")}
        result["inputs"] = {n: _typed_input(v) for n, v in inputs.items()}
        result["outputs"] = outputs
    result["type"] = "command"
    result["name"] = job
    result["display_name"] = str(step.get("display_name") or key)
    result.setdefault("experiment_name", doc.get("experiment_name") or doc["name"])
    compute = step_compute(doc, key)
    if compute is None:
        result.pop("compute", None)
    else:
        result["compute"] = compute
    return result


def _pipeline_child(doc: Mapping[str, Any], key: str, job: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """The child pipeline that runs pipeline step KEY: its component's jobs with the step's
    resolved INPUTS (a declared input not given keeps its declaration: its default), its
    outputs at the paths the step gives them (so the steps after it find them), and the step's
    compute as its default."""
    step = doc["jobs"][key]
    component = step["component"]
    where = f"jobs.{key}"
    datastore = doc["settings"].get("default_datastore", DEFAULT_DATASTORE)
    declared = step.get("outputs") or {}
    outputs = {}
    for name, decl in component["outputs"].items():
        given = resolve_output(
            declared.get(name), f"{where}.outputs.{name}", name, job, doc["outputs"], datastore
        )
        outputs[name] = {**decl, **given}
    settings = dict(component.get("settings") or {})
    compute = step_compute(doc, key)
    settings["default_compute"] = compute or SERVERLESS
    settings.setdefault("default_datastore", datastore)
    return {
        "type": "pipeline",
        "name": job,
        "display_name": str(step.get("display_name") or key),
        "experiment_name": doc.get("experiment_name") or doc["name"],
        "inputs": {**component["inputs"], **{n: _typed_input(v) for n, v in inputs.items()}},
        "outputs": outputs,
        "settings": settings,
        "jobs": component["jobs"],
    }


def _typed_input(value: Any) -> Any:
    """A resolved input as a command job takes it (a path gets a type when it lacks one)."""
    if isinstance(value, dict) and "path" in value and "type" not in value:
        return {"type": "uri_folder", **value}
    return value


def reuse_key(doc: Mapping[str, Any], key: str, job_doc: Mapping[str, Any]) -> str | None:
    """The reuse key of step KEY run as JOB_DOC; None when its component is not deterministic."""
    step = doc["jobs"][key]
    if step.get("type") == "pipeline":
        return None  # a child pipeline: its own steps are reused one by one
    spec = _component(step)
    if spec is not None and not spec.is_deterministic:
        return None
    component_hash = components.component_hash(spec, spec.code) if spec is not None else None
    declared = {n: v if v is not None else {} for n, v in (step.get("outputs") or {}).items()}
    if spec is not None:
        declared = {n: declared.get(n) or {"type": o.type} for n, o in spec.outputs.items()}
    return step_reuse_key(job_doc, declared, component_hash)


def downstream_of(doc: Mapping[str, Any], steps: Sequence[str], failed: set[str]) -> set[str]:
    """The steps that read, directly or through others, from a step in FAILED."""
    blocked: set[str] = set()
    for key in steps:  # upstream before downstream
        if key not in failed and any(up in failed or up in blocked for up in upstream_of(doc, key)):
            blocked.add(key)
    return blocked


def progress(doc: Mapping[str, Any], children: Sequence[ChildView]) -> str:
    """``2 of 4 steps completed (1 reused)``, with failures and running steps when there are any."""
    total = len(doc["jobs"])
    completed = [c for c in children if c.status is JobStatus.COMPLETED]
    reused = sum(1 for c in completed if c.reused_from)
    text = f"{len(completed)} of {total} steps completed"
    if reused:
        text += f" ({reused} reused)"
    running = sum(1 for c in children if c.status in ACTIVE)
    failed = sum(1 for c in children if c.status in FAILED)
    if running:
        text += f", {running} running"
    if failed:
        text += f", {failed} failed"
    return text


def parent_outputs(doc: Mapping[str, Any], children: Sequence[ChildView]) -> dict[str, str]:
    """The pipeline's outputs: each one's path, from the step output bound to it."""
    by_key = {child.key: child for child in children}
    out: dict[str, str] = {}
    for key, step in doc["jobs"].items():
        for name, value in (step.get("outputs") or {}).items():
            binding = output_binding(value, f"jobs.{key}.outputs.{name}")
            child = by_key.get(key)
            if binding is not None and child is not None and name in child.outputs:
                out[binding.name] = child.outputs[name]
    return out


@dataclass(frozen=True)
class DagStep:
    """One step of a pipeline's graph: its status, the steps it reads from, where it runs and the
    job that ran it (None before it started)."""

    key: str
    status: str  # a JobStatus value, or "Skipped" / "NotStarted" for a step without a job
    upstream: tuple[str, ...]
    compute: str  # "serverless" when none
    job: str | None
    reused_from: str | None


def dag_steps(doc: Mapping[str, Any], children: Sequence[ChildView]) -> list[DagStep]:
    """The pipeline's steps, in an order where a step follows its upstream: what ``dag_text``
    prints and the studio draws."""
    by_key = {child.key: child for child in children}
    steps = order(doc)
    failed = {k for k in steps if k in by_key and by_key[k].status in FAILED}
    blocked = downstream_of(doc, steps, failed)
    found = []
    for key in steps:
        child = by_key.get(key)
        status = child.status.value if child else ("Skipped" if key in blocked else "NotStarted")
        found.append(
            DagStep(
                key=key,
                status=status,
                upstream=tuple(upstream_of(doc, key)),
                compute=step_compute(doc, key) or SERVERLESS,
                job=child.name if child else None,
                reused_from=child.reused_from if child else None,
            )
        )
    return found


def dag_text(doc: Mapping[str, Any], children: Sequence[ChildView]) -> str:
    """The steps as text for ``job show``: each step, its status, the steps it reads from, its
    compute and job (and the job it reused), in an order where a step follows its upstream."""
    steps = dag_steps(doc, children)
    width = max(len(s.key) for s in steps)
    up_width = max(7, *(len(", ".join(s.upstream)) + 2 for s in steps))  # "(start)" or "← a, b"
    rows = []
    for step in steps:
        after = f"← {', '.join(step.upstream)}" if step.upstream else "(start)"
        line = f"{step.key:<{width}}  {step.status:<10}  {after:<{up_width}}  on {step.compute}"
        if step.job is not None:
            line += f"  job {step.job}"
            if step.reused_from:
                line += f" (reused {step.reused_from})"
        rows.append(line.rstrip())
    return "\n".join(rows)
