"""Pipeline jobs, the service side: what a pipeline needs from the store before and after it runs.

- ``resolve``: a submitted pipeline's registered components (``component: azureml:train:1``,
  ``azureml:train@latest``) replaced by the components themselves (``services.assets.components``), and
  each component's ``code`` by the snapshot it runs, then the whole document checked again
  (``domain.jobs.pipeline_jobs``) against the components its steps now run; a ``parallel`` step's
  task code becomes a snapshot with cloudlet's batch driver added (``services.endpoints.batch_code.
  with_driver``: the driver batch deployments run), which its command job runs;
- ``dag``: the text DAG of ``job show`` (each step, its status, its upstream, reuse); ``graph``
  the same steps as data (the studio draws them); ``full_graph`` with the pipeline's inputs and
  outputs as nodes and each binding as a named edge (the studio's full-page graph);
- ``outputs``: where the pipeline's outputs are (the step outputs bound to them);
- ``register_inline``: at submission, each inline command step's anonymous component
  (``domain.jobs.inline_components``), as Azure registers them: the ``componentId`` the ARM facade
  shows for the step then resolves (``ml_client.components.get``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from cloudlet.domain.assets import components
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs import inline_components
from cloudlet.domain.jobs.job_spec import CODE_SNAPSHOT_PATTERN
from cloudlet.domain.jobs.pipeline_bindings import retarget
from cloudlet.domain.jobs.pipeline_dag import DagStep, dag_steps, dag_text, is_reference, parent_outputs
from cloudlet.domain.jobs.pipeline_graph import PipelineGraph
from cloudlet.domain.jobs.pipeline_graph import graph as full_graph_of
from cloudlet.domain.jobs.pipeline_jobs import PIPELINE
from cloudlet.services.access import workspaces
from cloudlet.services.assets import codes
from cloudlet.services.assets import components as component_service
from cloudlet.services.core.context import Caller
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.endpoints import batch_code
from cloudlet.services.jobs.job_children import children, view_of
from cloudlet.store.schema import Job, Workspace


def resolve(session: Session, ws: Workspace, doc: dict[str, Any], data: DataRoot) -> dict[str, Any]:
    """DOC (a parsed pipeline) with its registered components resolved and code snapshots
    checked (a parallel step's with the batch driver added); parsed again, so a step is checked
    against the component it now runs."""
    jobs = doc.get("jobs") or {}
    changed: dict[str, Any] = {}
    for key, step in jobs.items():
        if step.get("type") == "parallel":
            task = {**step["task"], "code": _with_driver(session, ws, data, step["task"]["code"], key)}
            if task != step["task"]:
                changed[key] = {**step, "task": task}
            continue
        component = step.get("component")
        if component is None:
            continue
        try:
            if step.get("type") == "pipeline" and is_reference(component):
                component = component_service.resolve_pipeline(session, ws, component)
            elif is_reference(component):
                component = components.component_to_doc(
                    component_service.resolve(session, ws, component, None)
                )
            component = component_service.checked_code(session, ws, component)
        except CloudletError as exc:
            raise retarget(exc, f"jobs.{key}.component") from None
        if component != step["component"]:
            changed[key] = {**step, "component": component}
    if not changed:
        return doc
    resolved = {**doc, "jobs": {key: changed.get(key, step) for key, step in jobs.items()}}
    return PIPELINE.parse(resolved, str(doc["name"]))


log = logging.getLogger("cloudlet.pipelines")


def register_inline(
    session: Session, ws: Workspace, doc: dict[str, Any], caller: Caller, data: DataRoot
) -> None:
    """Register the anonymous component of each inline command step of the pipeline DOC (resolved)
    under the version the facade names it by. A step whose command cannot stand as a component
    (or whose version holds other content) keeps running as it is: what it runs is the step's,
    the component is only its record for the SDK."""
    ref = None
    for key, step in (doc.get("jobs") or {}).items():
        if not isinstance(step, dict) or not inline_components.is_inline_command(step):
            continue
        version = inline_components.inline_version(step)
        if component_service.has_anonymous(session, ws, version):  # the same content, submitted before
            continue
        ref = ref or workspaces.ref_of_id(session, ws.id)
        try:
            spec = components.parse_component(inline_components.inline_component(step, doc))
            component_service.register_anonymous(session, ref, ws, spec, caller, data, version=version)
        except CloudletError as exc:
            log.info("pipeline %s: step %s has no anonymous component: %s", doc.get("name"), key, exc)


def _with_driver(session: Session, ws: Workspace, data: DataRoot, code: str, key: str) -> str:
    """The snapshot that runs parallel step KEY: its task's code with the batch driver added."""
    target = f"jobs.{key}.task.code"
    if not CODE_SNAPSHOT_PATTERN.fullmatch(code):
        raise validation_error(
            target,
            f"code {code!r} is not an uploaded snapshot (codes/<sha256>); the CLI and client upload a "
            "local folder for you",
        )
    path = data.code(ws.id, code.removeprefix("codes/"))
    if not path.is_file():
        raise validation_error(target, f"code snapshot {code!r} was not uploaded to this workspace")
    digest = codes.store_snapshot(session, data, ws.id, batch_code.with_driver(path.read_bytes()))
    return f"codes/{digest}"


def dag(parent: Job, kids: Sequence[Job]) -> str:
    """The pipeline's steps as text for ``job show`` (``pipeline_dag.dag_text``)."""
    return dag_text(parent.spec, [view_of(kid) for kid in kids])


def graph(parent: Job, kids: Sequence[Job]) -> list[DagStep]:
    """The pipeline's steps as a graph (each step's status and upstream), for the studio."""
    return dag_steps(parent.spec, [view_of(kid) for kid in kids])


def full_graph(session: Session, parent: Job) -> PipelineGraph:
    """The pipeline's steps (read now), inputs and outputs, and its bindings as named edges (a
    reused step names the job it reused: ``reused_from``), for the studio's full-page graph."""
    return full_graph_of(parent.spec, [view_of(kid) for kid in children(session, parent)])


def outputs(parent: Job, kids: Sequence[Job]) -> dict[str, str]:
    """Where each of the pipeline's outputs is: the path of the step output bound to it."""
    return parent_outputs(parent.spec, [view_of(kid) for kid in kids])
