"""Pipeline-component batch deployments, the service side (``domain.endpoints.batch_pipelines``).

- ``checked_deployment``: the stored form of a ``type: pipeline`` deployment: its registered
  component pinned (``services.assets.components.resolve_pipeline``) and checked, its default compute a
  cluster of the workspace;
- ``invoke``: one invocation, the component run as a pipeline job (``services.jobs.jobs.submit``: the
  parent-job loop runs its steps) with the invocation's input.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.endpoints import batch_pipelines as rules
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs.pipeline_bindings import retarget
from cloudlet.services.assets import components as component_service
from cloudlet.services.compute import computes
from cloudlet.services.core.context import Caller
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store.schema import Job, Workspace


def checked_deployment(
    session: Session, ws: Workspace, endpoint_name: str, name: str, body: dict[str, Any]
) -> dict[str, Any]:
    spec = rules.parse_deployment(body, endpoint_name, name)
    if rules.needs_component(spec):
        try:
            component = component_service.resolve_pipeline(session, ws, spec["component"])
        except CloudletError as exc:
            raise retarget(exc, "component") from None
        spec = rules.parse_deployment({**body, "component": component}, endpoint_name, name)
    compute = computes.find(session, ws, rules.compute_of(spec))
    if compute is None or compute.type != ComputeType.AMLCOMPUTE:
        raise validation_error(
            "settings.default_compute",
            f"a pipeline deployment's steps run on a cluster; '{rules.compute_of(spec)}' is not a cluster in "
            "this workspace (cloudlet compute create --type amlcompute)",
        )
    return spec


def invoke(
    session: Session,
    ws: Workspace,
    spec: dict[str, Any],
    data_input: dict[str, Any],
    job_name: str,
    caller: Caller,
    data: DataRoot,
) -> Job:
    """Submit the pipeline job of one invocation of deployment SPEC."""
    doc = rules.invocation_job(spec, data_input, job_name)
    prepared = job_service.prepare(doc, job_name)
    job, _ = job_service.submit(session, ws, job_name, prepared, caller, data)
    return job


def is_invocation(job: Job, endpoint_name: str) -> bool:
    """JOB is a pipeline job an invocation of batch endpoint ENDPOINT_NAME made."""
    tags = job.spec.get("tags") or {}
    return (
        job.kind == "pipeline"
        and tags.get(rules.TAG_ENDPOINT) == endpoint_name
        and rules.TAG_DEPLOYMENT in tags
    )
