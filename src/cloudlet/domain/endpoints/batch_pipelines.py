"""Pipeline-component batch deployments (``type: pipeline``, Azure's
``pipelineComponentBatchDeployment`` YAML), pure.

A deployment names a pipeline component (``component: azureml:hello_batch@latest``, or inline:
the CLI and client inline a local YAML file) and ``settings`` (a pipeline's: ``default_compute``,
``default_datastore``, ``continue_on_step_failure``, ``force_rerun``). The service pins the
registered component's definition when the deployment is created (``parse_deployment`` then checks
it as the pipeline it runs). Invoking the endpoint runs the component as a pipeline job
(``invocation_job``): the invocation's input is the component's one data input, the other inputs
keep their defaults, and the job is tagged with its endpoint and deployment.
"""

from __future__ import annotations

from typing import Any

from cloudlet.domain.errors import validation_error
from cloudlet.domain.jobs.job_spec import PATH_TYPES
from cloudlet.domain.jobs.pipeline_dag import is_reference

FIELDS = frozenset(
    {"$schema", "name", "endpoint_name", "type", "description", "tags", "component", "settings"}
)
SETTINGS = ("default_compute", "default_datastore", "continue_on_step_failure", "force_rerun")
_MODEL_FIELDS = ("model", "code_configuration", "compute", "environment", "resources")
TAG_ENDPOINT = "batch_endpoint"
TAG_DEPLOYMENT = "batch_deployment"


def is_pipeline(doc: Any) -> bool:
    """DOC is a pipeline-component batch deployment (``type: pipeline``)."""
    return isinstance(doc, dict) and str(doc.get("type") or "").lower() == "pipeline"


def parse_deployment(doc: dict[str, Any], endpoint: str, name: str) -> dict[str, Any]:
    """A pipeline deployment checked; its stored form. A registered component is left as its
    reference (``needs_component``) for the service to resolve and parse again."""
    from cloudlet.domain.endpoints.batch_endpoints import _check_path_name
    from cloudlet.domain.jobs.pipeline_jobs import pipeline_component

    for key in doc:
        if key not in FIELDS:
            hint = " (a model deployment's field; a pipeline deployment runs its component)"
            hint = hint if key in _MODEL_FIELDS else ""
            raise validation_error(
                key,
                f"'{key}' is not a field of a pipeline batch deployment{hint}; "
                f"fields: {', '.join(sorted(FIELDS))}",
            )
    _check_path_name(name, doc.get("name"), "name")
    _check_path_name(endpoint, doc.get("endpoint_name"), "endpoint_name")
    settings = doc.get("settings") or {}
    if not isinstance(settings, dict):
        raise validation_error(
            "settings", "settings is a mapping (default_compute, continue_on_step_failure, …)"
        )
    for key in settings:
        if key not in SETTINGS:
            raise validation_error(
                f"settings.{key}",
                f"settings.{key} is not a pipeline deployment setting; known: {', '.join(SETTINGS)}",
            )
    if not isinstance(settings.get("default_compute"), str) or not settings["default_compute"].strip():
        raise validation_error(
            "settings.default_compute",
            "a pipeline deployment needs settings.default_compute: the cluster its steps run on",
        )
    out: dict[str, Any] = {"name": name, "endpoint_name": endpoint, "type": "pipeline"}
    for key in ("description", "tags"):
        if doc.get(key) is not None:
            out[key] = doc[key]
    out["settings"] = dict(settings)
    component = doc.get("component")
    if is_reference(component):
        out["component"] = str(component)
        return out
    if not isinstance(component, dict):
        raise validation_error(
            "component",
            "component names a pipeline component: azureml:<name>@latest (registered) or its YAML file, "
            "which the CLI and client inline",
        )
    out["component"] = pipeline_component(component, "component")  # errors name component.…
    # Checked as the pipeline an invocation runs, with a stand-in for the invocation's input.
    from cloudlet.domain.jobs.pipeline_jobs import PIPELINE

    PIPELINE.parse(invocation_job(out, {"type": "uri_folder", "path": _TRIAL_PATH}, "trial"), "trial")
    return out


_TRIAL_PATH = "azureml://datastores/workspaceblobstore/paths/azureml/validation/input/"


def needs_component(spec: dict[str, Any]) -> bool:
    return isinstance(spec.get("component"), str)


def compute_of(spec: dict[str, Any]) -> str:
    return str(spec["settings"]["default_compute"]).removeprefix("azureml:")


def data_input(component: dict[str, Any]) -> str | None:
    """The component's one data input, which an invocation's input fills; None when it has none."""
    paths = [
        n
        for n, v in (component.get("inputs") or {}).items()
        if isinstance(v, dict) and str(v.get("type", "uri_folder")) in PATH_TYPES
    ]
    if len(paths) > 1:
        raise validation_error(
            "component.inputs",
            f"the component has several data inputs ({', '.join(paths)}); an invocation gives one input, "
            "so a pipeline deployment's component takes at most one data input",
        )
    return paths[0] if paths else None


def invocation_job(spec: dict[str, Any], data: dict[str, Any], job_name: str) -> dict[str, Any]:
    """The pipeline job of one invocation of deployment SPEC (its component resolved): DATA (a
    ``{type, path}`` input) fills the component's data input; the rest keep their defaults."""
    component = spec["component"]
    inputs = dict(component.get("inputs") or {})
    target = data_input(component)
    if target is not None:
        inputs[target] = {**{k: v for k, v in inputs[target].items() if k != "default"}, **data}
    for name, value in list(inputs.items()):
        if isinstance(value, dict) and str(value.get("type", "uri_folder")) not in PATH_TYPES:
            literal = value.get("default", value.get("value"))
            if literal is None:
                raise validation_error(
                    f"component.inputs.{name}",
                    f"input '{name}' has no default, and an invocation gives only the data input",
                )
            inputs[name] = literal
    outputs = {
        n: {k: v for k, v in o.items() if k != "path"} for n, o in (component.get("outputs") or {}).items()
    }
    return {
        "type": "pipeline",
        "name": job_name,
        "display_name": job_name,
        "experiment_name": str(spec["endpoint_name"]),
        "tags": {TAG_ENDPOINT: str(spec["endpoint_name"]), TAG_DEPLOYMENT: str(spec["name"])},
        "inputs": inputs,
        "outputs": outputs,
        "settings": {**(component.get("settings") or {}), **spec["settings"]},
        "jobs": component["jobs"],
    }
