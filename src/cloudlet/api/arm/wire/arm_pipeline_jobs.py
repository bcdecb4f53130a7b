"""Pipeline and sweep jobs in the ARM wire shape the azure-ai-ml SDK speaks, to and from
cloudlet's pipeline and sweep documents (``domain.jobs.pipeline_jobs``, ``domain.jobs.sweep_jobs``). Pure.

A ``@dsl.pipeline`` arrives as ``PUT {ws}/jobs/{name}`` with ``{"properties": {"jobType":
"Pipeline", "inputs", "outputs", "settings": {"default_compute", "continue_on_step_failure",
"force_rerun", …}, "jobs": {step: {"type": "command", "componentId", "computeId"?, "inputs":
{n: {"job_input_type": "literal", "value": "${{parent.inputs.x}}"}}, "outputs", …}}}}``: the top
level camelCase, the steps snake_case (both are accepted in steps). Each step runs the component
the SDK registered just before (an anonymous one, ``…/components/azureml_anonymous/versions/<hash>``),
which the service resolves (``services.jobs.pipelines.resolve``).

``command(...).sweep(...)`` arrives with ``jobType: "Sweep"``: ``trial`` (``command``, ``codeId``,
``environmentId``, …), ``searchSpace`` in Azure's REST form (``{"lr": ["uniform", [0.01, 0.1]],
"depth": ["choice", [[2, 4]]]}``), ``samplingAlgorithm``, ``objective``, ``earlyTermination``,
``limits``. Both were recorded from azure-ai-ml 1.35.2 in tests/data/arm_pipeline_jobs/.

The views (``pipeline_to_arm``, ``sweep_to_arm``) are what ``jobs.get``/``list`` parse back into
the SDK's ``PipelineJob``/``SweepJob``; ``run_view`` is a child (a step, a trial) as run history
lists it for ``jobs.list(parent_job_name=…)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cloudlet.api.arm.wire import arm_jobs, arm_parallel
from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs.inline_components import ANONYMOUS, inline_version

PIPELINE = "Pipeline"
SWEEP = "Sweep"
EXECUTION_LOG = "logs/azureml/executionlogs.txt"
SWEEP_LOG = "azureml-logs/hyperdrive.txt"
_SETTINGS = ("default_compute", "default_datastore", "continue_on_step_failure", "force_rerun")
_STEP_FIELDS = {
    "display_name": "display_name",
    "displayName": "display_name",
    "description": "description",
    "tags": "tags",
    "environment_variables": "environment_variables",
    "environmentVariables": "environment_variables",
}
# Azure's REST search-space expressions: [type, [arguments]] → the document's fields.
_SPACE_ARGS = {
    "choice": ("values",),
    "randint": ("upper",),
    "uniform": ("min_value", "max_value"),
    "quniform": ("min_value", "max_value", "q"),
    "loguniform": ("min_value", "max_value"),
    "qloguniform": ("min_value", "max_value", "q"),
    "normal": ("mu", "sigma"),
    "qnormal": ("mu", "sigma", "q"),
    "lognormal": ("mu", "sigma"),
    "qlognormal": ("mu", "sigma", "q"),
}
_POLICIES = {
    "bandit": "Bandit",
    "median_stopping": "MedianStopping",
    "truncation_selection": "TruncationSelection",
}


def job_type(body: Any) -> str | None:
    """The ``properties.jobType`` of an SDK body, None when there is none."""
    props = body.get("properties") if isinstance(body, Mapping) else None
    kind = props.get("jobType") if isinstance(props, Mapping) else None
    return str(kind) if kind is not None else None


# -- ARM → document: pipelines ------------------------------------------------------------------
def pipeline_from_arm(body: Any, name: str, refs: arm_jobs.Refs | None = None) -> dict[str, Any]:
    """The pipeline document for an SDK ``jobType: Pipeline`` body (parsed later by
    ``PIPELINE.parse``, after the service resolved the steps' components). REFS: how a parallel
    node's task code (a code version's ARM id) is named in the store."""
    props = _object(body.get("properties") if isinstance(body, Mapping) else None, "properties")
    doc: dict[str, Any] = {"type": "pipeline", "name": name}
    _common(props, doc)
    doc["inputs"] = {
        k: arm_jobs._input(k, v) for k, v in _object(props.get("inputs") or {}, "properties.inputs").items()
    }
    doc["outputs"] = {
        k: arm_jobs._output(k, v)
        for k, v in _object(props.get("outputs") or {}, "properties.outputs").items()
    }
    settings = _object(props.get("settings") or {}, "properties.settings")
    out_settings: dict[str, Any] = {}
    for key in _SETTINGS:
        value = settings.get(key)
        if value is None:
            continue
        if key == "default_compute":
            value = _compute(str(value))
        out_settings[key] = value
    if out_settings:
        doc["settings"] = out_settings
    if props.get("computeId"):
        doc["compute"] = _compute(str(props["computeId"]))
    jobs = _object(props.get("jobs"), "properties.jobs")
    code = refs.code if refs is not None else None
    doc["jobs"] = {str(key): _step(str(key), step, code=code) for key, step in jobs.items()}
    return doc


def pipeline_component_jobs(jobs: Any, where: str) -> dict[str, Any]:
    """A pipeline component's ``jobs`` as the SDK sends them (the REST shape of a pipeline job's
    steps) as the document's."""
    steps = _object(jobs, where)
    return {str(key): _step(str(key), step, f"{where}.{key}") for key, step in steps.items()}


def _step(
    key: str, value: Any, where: str | None = None, code: Callable[[str], str] | None = None
) -> dict[str, Any]:
    where = where or f"properties.jobs.{key}"
    step = _object(value, where)
    kind = str(step.get("type") or "command").lower()
    if kind not in ("command", "pipeline", "parallel"):
        raise validation_error(
            f"{where}.type",
            f"steps of type {kind!r} are not supported in pipelines yet; use command, parallel or "
            "pipeline steps",
        )
    if kind == "parallel":  # parallel_run_function: the node carries its component's fields
        return _bound(arm_parallel.step_from_arm(step, where, code), step, where)
    component = step.get("componentId") or step.get("component_id")
    if not component:
        raise validation_error(
            f"{where}.componentId", "a step needs 'componentId' (the component the SDK registered for it)"
        )
    out: dict[str, Any] = {"type": kind, "component": component_reference(str(component), where)}
    for arm, field in _STEP_FIELDS.items():
        if step.get(arm) is not None and (kind == "command" or field in ("display_name", "description")):
            out[field] = step[arm]
    out = _bound(out, step, where)
    if kind == "pipeline":  # a pipeline component: its steps have their own resources
        return out
    if step.get("resources"):
        out["resources"] = arm_jobs._resources(
            _snake_to_camel(_object(step["resources"], f"{where}.resources"))
        )
    if step.get("distribution"):
        dist = _snake_to_camel(_object(step["distribution"], f"{where}.distribution"))
        if "type" in dist and "distributionType" not in dist:
            dist = {**dist, "distributionType": dist["type"]}
        out["distribution"] = arm_jobs._distribution(dist)
    limits = step.get("limits")
    if isinstance(limits, Mapping) and limits.get("timeout"):
        out["limits"] = {"timeout": arm_jobs.iso_seconds(str(limits["timeout"]), f"{where}.limits.timeout")}
    return out


def _bound(out: dict[str, Any], step: Mapping[str, Any], where: str) -> dict[str, Any]:
    """OUT with the node's compute, inputs and outputs as the document binds them."""
    compute = step.get("computeId") or step.get("compute_id") or step.get("compute")
    if compute:
        out["compute"] = _compute(str(compute))
    inputs = _object(step.get("inputs") or {}, f"{where}.inputs")
    out["inputs"] = {k: _step_input(v, f"{where}.inputs.{k}") for k, v in inputs.items()}
    outputs = _object(step.get("outputs") or {}, f"{where}.outputs")
    out["outputs"] = {k: _step_output(v, f"{where}.outputs.{k}") for k, v in outputs.items()}
    return out


def component_reference(component_id: str, where: str = "componentId") -> str:
    """``…/components/{name}/versions/{v}`` (or ``labels/latest``, with or without ``azureml:``)
    as the document names it: ``azureml:{name}:{v}`` / ``azureml:{name}@latest``."""
    text = component_id.removeprefix("azureml:")
    parts = text.rstrip("/").split("/")
    lowered = [p.lower() for p in parts]
    if "components" in lowered:
        at = lowered.index("components")
        rest = parts[at + 1 :]
        if len(rest) == 3 and rest[1].lower() == "versions":
            return f"azureml:{rest[0]}:{rest[2]}"
        if len(rest) == 3 and rest[1].lower() == "labels":
            return f"azureml:{rest[0]}@{rest[2]}"
        if len(rest) == 1:
            return f"azureml:{rest[0]}@latest"
    if component_id.startswith("azureml:") and "/" not in text:
        return component_id  # azureml:name:1, azureml:name@latest
    raise validation_error(
        f"{where}.componentId",
        f"componentId {component_id!r} is not a component version's id "
        "(…/components/{name}/versions/{version}); register the component first",
    )


def _step_input(value: Any, field: str) -> Any:
    item = _object(value, field)
    kind = str(item.get("job_input_type") or item.get("jobInputType") or "literal").lower()
    if kind == "literal":
        return str(item.get("value", ""))
    return arm_jobs._input(field.rsplit(".", 1)[1], {**item, "jobInputType": kind})


def _step_output(value: Any, field: str) -> Any:
    item = _object(value, field)
    if str(item.get("type") or "").lower() == "literal" or (
        "value" in item and not item.get("job_output_type") and not item.get("jobOutputType")
    ):
        return str(item.get("value", ""))  # a binding: ${{parent.outputs.x}}
    kind = item.get("job_output_type") or item.get("jobOutputType") or "uri_folder"
    arm = {"jobOutputType": kind, **{k: v for k, v in item.items() if k in ("uri", "mode", "description")}}
    for snake, camel in (("asset_name", "assetName"), ("asset_version", "assetVersion")):
        if item.get(snake) is not None:
            arm[camel] = item[snake]
    return arm_jobs._output(field.rsplit(".", 1)[1], arm)


# -- ARM → document: sweeps ---------------------------------------------------------------------
def sweep_from_arm(body: Any, name: str, refs: arm_jobs.Refs) -> dict[str, Any]:
    """The sweep document for an SDK ``jobType: Sweep`` body (parsed later by ``SWEEP.parse``)."""
    props = _object(body.get("properties") if isinstance(body, Mapping) else None, "properties")
    doc: dict[str, Any] = {"type": "sweep", "name": name}
    _common(props, doc)
    trial = _object(props.get("trial"), "properties.trial")
    out_trial: dict[str, Any] = {"command": trial.get("command")}
    if trial.get("codeId"):
        out_trial["code"] = refs.code(str(trial["codeId"]))
    if trial.get("environmentId"):
        out_trial["environment"] = arm_jobs._environment(str(trial["environmentId"]))
    if trial.get("environmentVariables"):
        out_trial["environment_variables"] = dict(
            _object(trial["environmentVariables"], "properties.trial.environmentVariables")
        )
    if trial.get("resources"):
        out_trial["resources"] = arm_jobs._resources(
            _object(trial["resources"], "properties.trial.resources")
        )
    if trial.get("distribution"):
        out_trial["distribution"] = arm_jobs._distribution(
            _object(trial["distribution"], "properties.trial.distribution")
        )
    doc["trial"] = out_trial
    doc["inputs"] = {
        k: arm_jobs._input(k, v) for k, v in _object(props.get("inputs") or {}, "properties.inputs").items()
    }
    doc["outputs"] = {
        k: arm_jobs._output(k, v)
        for k, v in _object(props.get("outputs") or {}, "properties.outputs").items()
    }
    if props.get("computeId"):
        doc["compute"] = _compute(str(props["computeId"]))
    space = _object(props.get("searchSpace"), "properties.searchSpace")
    doc["search_space"] = {str(k): _space(str(k), v) for k, v in space.items()}
    sampling = _object(props.get("samplingAlgorithm"), "properties.samplingAlgorithm")
    algorithm: dict[str, Any] = {"type": str(sampling.get("samplingAlgorithmType") or "").lower()}
    for arm, key in (("seed", "seed"), ("rule", "rule")):
        if sampling.get(arm) is not None:
            algorithm[key] = sampling[arm].lower() if isinstance(sampling[arm], str) else sampling[arm]
    doc["sampling_algorithm"] = algorithm
    objective = _object(props.get("objective"), "properties.objective")
    doc["objective"] = {"goal": objective.get("goal"), "primary_metric": objective.get("primaryMetric")}
    policy = props.get("earlyTermination")
    if isinstance(policy, Mapping) and policy.get("policyType"):
        doc["early_termination"] = {"type": policy["policyType"]} | {
            key: policy[arm]
            for arm, key in (
                ("evaluationInterval", "evaluation_interval"),
                ("delayEvaluation", "delay_evaluation"),
                ("slackFactor", "slack_factor"),
                ("slackAmount", "slack_amount"),
                ("truncationPercentage", "truncation_percentage"),
                ("excludeFinishedJobs", "exclude_finished_jobs"),
            )
            if policy.get(arm) is not None
        }
    limits = _object(props.get("limits") or {}, "properties.limits")
    out_limits: dict[str, Any] = {}
    for arm, key in (
        ("maxTotalTrials", "max_total_trials"),
        ("maxConcurrentTrials", "max_concurrent_trials"),
    ):
        if limits.get(arm) is not None:
            out_limits[key] = limits[arm]
    for arm, key in (("timeout", "timeout"), ("trialTimeout", "trial_timeout")):
        if limits.get(arm):
            out_limits[key] = arm_jobs.iso_seconds(str(limits[arm]), f"properties.limits.{arm}")
    if out_limits:
        doc["limits"] = out_limits
    return doc


def _space(key: str, value: Any) -> Any:
    """``["uniform", [0.01, 0.1]]`` → ``{"type": "uniform", "min_value": 0.01, "max_value": 0.1}``;
    a mapping (the document's own form) passes as it is."""
    field = f"properties.searchSpace.{key}"
    if isinstance(value, Mapping):
        return dict(value)
    if not (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], list)
    ):
        raise validation_error(
            field, f"search space {key!r} must be [type, [arguments]], e.g. ['uniform', [0, 1]]"
        )
    kind, args = value[0].lower(), value[1]
    names = _SPACE_ARGS.get(kind)
    if names is None:
        raise validation_error(
            field, f"search space type {value[0]!r} is not one of {', '.join(_SPACE_ARGS)}"
        )
    if kind == "choice":
        values = args[0] if len(args) == 1 and isinstance(args[0], list) else args
        return {"type": "choice", "values": list(values)}
    if len(args) != len(names):
        raise validation_error(
            field, f"{kind} takes {len(names)} arguments ({', '.join(names)}), not {len(args)}"
        )
    return {"type": kind, **dict(zip(names, args, strict=True))}


# -- document view → ARM ------------------------------------------------------------------------
def pipeline_to_arm(view: Mapping[str, Any], workspace_id: str) -> dict[str, Any]:
    """The ARM resource for a pipeline job's native view (``services.views.jobs.render``)."""
    props = _common_view(view, PIPELINE)
    props["inputs"] = {k: arm_jobs._arm_input(v) for k, v in (view.get("inputs") or {}).items()}
    props["outputs"] = {k: arm_jobs._arm_output(v) for k, v in (view.get("outputs") or {}).items()}
    settings = dict(view.get("settings") or {})
    if isinstance(settings.get("default_compute"), str):
        settings["default_compute"] = _arm_compute(settings["default_compute"], workspace_id)
    props["settings"] = settings
    props["jobs"] = {
        key: _arm_step(key, step, workspace_id) for key, step in (view.get("jobs") or {}).items()
    }
    return arm_jobs.job_resource(view, workspace_id, props)


def pipeline_component_jobs_to_arm(jobs: Mapping[str, Any], workspace_id: str) -> dict[str, Any]:
    """A stored pipeline component's ``jobs`` in the REST shape the SDK reads (``componentId``)."""
    return {
        key: _arm_step(key, step, workspace_id) for key, step in jobs.items() if isinstance(step, Mapping)
    }


def _arm_step(key: str, step: Mapping[str, Any], workspace_id: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": key, "type": "pipeline" if step.get("type") == "pipeline" else "command"}
    component = step.get("component")
    if step.get("type") == "parallel":
        out.update(arm_parallel.step_to_arm(step, workspace_id))
    elif isinstance(component, Mapping) and component.get("name") and component.get("version"):
        out["componentId"] = f"{workspace_id}/components/{component['name']}/versions/{component['version']}"
    elif isinstance(component, str) and component.startswith("azureml:") and "/" not in component:
        named = component.removeprefix("azureml:")  # azureml:name:version / azureml:name@label
        name, _, version = named.partition(":") if ":" in named else named.partition("@")
        where = "versions" if ":" in named else "labels"
        out["componentId"] = f"{workspace_id}/components/{name}/{where}/{version}"
    elif isinstance(component, str):
        out["componentId"] = component
    elif out["type"] == "command":  # an inline step: its command's is registered at submission
        out["componentId"] = f"{workspace_id}/components/{ANONYMOUS}/versions/{inline_version(step)}"
    for field in ("display_name", "description", "tags", "environment_variables"):
        if step.get(field):
            out[field] = step[field]
    if isinstance(step.get("compute"), str):
        out["computeId"] = _arm_compute(step["compute"], workspace_id)
    inputs: dict[str, Any] = {}
    for name, value in (step.get("inputs") or {}).items():
        if isinstance(value, Mapping) and value.get("type") and value.get("path"):
            inputs[name] = {"job_input_type": value["type"], "uri": value["path"]}
        else:
            literal = value.get("value", value.get("path")) if isinstance(value, Mapping) else value
            inputs[name] = {"job_input_type": "literal", "value": str(literal)}
    out["inputs"] = inputs
    outputs: dict[str, Any] = {}
    for name, value in (step.get("outputs") or {}).items():
        if isinstance(value, str):
            outputs[name] = {"type": "literal", "value": value}
        elif isinstance(value, Mapping) and isinstance(value.get("path"), str) and "${{" in value["path"]:
            outputs[name] = {"type": "literal", "value": value["path"]}
        else:
            outputs[name] = {"job_output_type": (value or {}).get("type", "uri_folder")}
    out["outputs"] = outputs
    return out


def sweep_to_arm(view: Mapping[str, Any], workspace_id: str) -> dict[str, Any]:
    """The ARM resource for a sweep job's native view."""
    props = _common_view(view, SWEEP)
    props["inputs"] = {k: arm_jobs._arm_input(v) for k, v in (view.get("inputs") or {}).items()}
    props["outputs"] = {k: arm_jobs._arm_output(v) for k, v in (view.get("outputs") or {}).items()}
    trial = view.get("trial") or {}
    arm_trial: dict[str, Any] = {"command": trial.get("command")}
    env = trial.get("environment")
    if isinstance(env, str):
        arm_trial["environmentId"] = arm_jobs._arm_environment(env, workspace_id)
    props["trial"] = arm_trial
    if isinstance(view.get("compute"), str) and view["compute"] not in ("serverless",):
        props["computeId"] = _arm_compute(view["compute"], workspace_id)
    props["searchSpace"] = {k: _arm_space(v) for k, v in (view.get("search_space") or {}).items()}
    algorithm = view.get("sampling_algorithm") or {}
    kind = algorithm.get("type", "random") if isinstance(algorithm, Mapping) else str(algorithm)
    props["samplingAlgorithm"] = {"samplingAlgorithmType": str(kind).capitalize()}
    objective = view.get("objective") or {}
    props["objective"] = {"goal": objective.get("goal"), "primaryMetric": objective.get("primary_metric")}
    policy = view.get("early_termination")
    if isinstance(policy, Mapping) and policy.get("type"):
        props["earlyTermination"] = {
            "policyType": _POLICIES.get(str(policy["type"]), str(policy["type"]))
        } | {
            arm: policy[key]
            for arm, key in (
                ("evaluationInterval", "evaluation_interval"),
                ("delayEvaluation", "delay_evaluation"),
                ("slackFactor", "slack_factor"),
                ("slackAmount", "slack_amount"),
                ("truncationPercentage", "truncation_percentage"),
            )
            if policy.get(key) is not None
        }
    limits = view.get("limits") or {}
    arm_limits: dict[str, Any] = {"jobLimitsType": "Sweep"}
    for arm, key in (
        ("maxTotalTrials", "max_total_trials"),
        ("maxConcurrentTrials", "max_concurrent_trials"),
    ):
        if limits.get(key) is not None:
            arm_limits[arm] = limits[key]
    for arm, key in (("timeout", "timeout"), ("trialTimeout", "trial_timeout")):
        if limits.get(key):
            arm_limits[arm] = arm_jobs.seconds_iso(int(limits[key]))
    props["limits"] = arm_limits
    return arm_jobs.job_resource(view, workspace_id, props)


def _arm_space(expr: Any) -> Any:
    if not isinstance(expr, Mapping):
        return expr
    kind = str(expr.get("type"))
    if kind == "choice":
        return ["choice", [list(expr.get("values") or [])]]
    return [kind, [expr.get(arg) for arg in _SPACE_ARGS.get(kind, ())]]


def run_view(child: Mapping[str, Any]) -> dict[str, Any]:
    """A child job (a step, a trial) in run history's ``Run`` shape, from the fields of its row."""
    return {
        "runId": child["name"],
        "runUuid": None,
        "parentRunId": child.get("parent"),
        "rootRunId": child.get("parent"),
        "displayName": child.get("display_name") or child["name"],
        "description": child.get("description"),
        "experimentId": child.get("experiment_name"),
        "status": child.get("status"),
        "tags": dict(child.get("tags") or {}),
        "properties": {k: str(v) for k, v in (child.get("properties") or {}).items()},
        "createdUtc": child.get("created"),
        "startTimeUtc": child.get("started"),
        "endTimeUtc": child.get("ended"),
        "lastModifiedUtc": child.get("ended") or child.get("started") or child.get("created"),
        "compute": {"target": child.get("compute")} if child.get("compute") else None,
        "runType": "azureml.StepRun",
    }


def execution_log(parent: str, steps: Sequence[Mapping[str, Any]], status: str, noun: str = "step") -> str:
    """A pipeline's ``executionlogs.txt`` (a sweep's ``hyperdrive.txt``, NOUN ``trial``): a line per
    step start and end in time order, then the parent's end once it has ended (STEPS: ``key``,
    ``name``, ``status``, ``started``/``ended`` ISO times)."""
    lines = [f"[{noun}s] {parent} submitted"]
    events: list[tuple[str, str]] = []
    for step in steps:
        if step.get("started"):
            events.append(
                (str(step["started"]), f"[{step['started']}] {noun} {step['key']} ({step['name']}) started")
            )
        if step.get("ended"):
            events.append(
                (
                    str(step["ended"]),
                    f"[{step['ended']}] {noun} {step['key']} ({step['name']}) {step['status']}",
                )
            )
    lines += [text for _, text in sorted(events)]
    if status in ("Completed", "Failed", "Canceled"):
        lines.append(f"[{noun}s] {parent} {status}")
    return "\n".join(lines) + "\n"


# -- helpers ------------------------------------------------------------------------------------
def _common(props: Mapping[str, Any], doc: dict[str, Any]) -> None:
    for arm, key in (
        ("displayName", "display_name"),
        ("experimentName", "experiment_name"),
        ("description", "description"),
    ):
        if props.get(arm) is not None:
            doc[key] = props[arm]
    if props.get("tags"):
        doc["tags"] = dict(_object(props["tags"], "properties.tags"))


def _common_view(view: Mapping[str, Any], kind: str) -> dict[str, Any]:
    return {
        "jobType": kind,
        "displayName": view.get("display_name") or view["name"],
        "experimentName": view.get("experiment_name") or "Default",
        "description": view.get("description"),
        "tags": dict(view.get("tags") or {}),
        "properties": {},
        "status": view.get("status"),
        "isArchived": False,
        "services": arm_jobs.services_to_arm(view),
    }


def _compute(value: str) -> str:
    if value.startswith("${{"):
        return value
    named = arm_jobs.arm_name(value, "computes")
    if named:
        return f"azureml:{named[0]}"
    if value in ("serverless", "local") or value.startswith("azureml:"):
        return value
    return f"azureml:{value}"


def _arm_compute(value: str, workspace_id: str) -> str:
    name = value.removeprefix("azureml:")
    if name in ("serverless", "local") or "/" in name or name.startswith("${{"):
        return name
    return f"{workspace_id}/computes/{name}"


def _snake_to_camel(item: Mapping[str, Any]) -> dict[str, Any]:
    def camel(key: str) -> str:
        head, *rest = key.split("_")
        return head + "".join(part.capitalize() for part in rest)

    return {camel(str(k)): v for k, v in item.items()}


def arm_target(target: str | None) -> str | None:
    """A pipeline document's step field (``jobs.score.task.entry_script``) as the SDK's body names
    it (``properties.jobs.score.task.entry_script``); any other target as it is."""
    if target is not None and target.startswith("jobs."):
        return f"properties.{target}"
    return target


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise validation_error(field, f"'{field}' must be an object")
    return value
