"""Batch endpoints and deployments: create, read, update, delete, and invoke (a scoring job).

The documents are validated by ``domain.endpoints.batch_endpoints``; an invocation becomes a ``batch_scoring``
parent job submitted through the jobs service (``services.jobs.jobs.submit``), which the parent-job
loop runs: its one child runs cloudlet's driver (``nodekit/batch_driver.py``) beside the
deployment's scoring script, on the deployment's cluster, like any job there.
"""

from __future__ import annotations

import gzip
import io
import secrets
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.assets import environments
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.endpoints import batch_endpoints as rules
from cloudlet.domain.endpoints import batch_pipelines, mlflow_models
from cloudlet.domain.errors import CloudletError, conflict, not_found, validation_error
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_spec import CODE_SNAPSHOT_PATTERN, JOB_NAME_PATTERN
from cloudlet.domain.paths import parse_datastore_uri
from cloudlet.services.access import audit
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.assets import codes
from cloudlet.services.compute import computes
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.endpoints import batch_pipelines as pipeline_deployments
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.services.endpoints.batch_code import with_driver
from cloudlet.services.endpoints.mlflow_models import environment as mlflow_environment
from cloudlet.services.endpoints.mlflow_models import registered_model
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store.schema import BatchDeployment, BatchEndpoint, Job, Workspace


# -- endpoints -------------------------------------------------------------------------------
def find_endpoint(session: Session, ws: Workspace, name: str) -> BatchEndpoint | None:
    query = select(BatchEndpoint).where(BatchEndpoint.workspace_id == ws.id, BatchEndpoint.name == name)
    return session.scalar(query)


def get_endpoint(session: Session, ws: Workspace, name: str) -> BatchEndpoint:
    row = find_endpoint(session, ws, name)
    if row is None:
        raise not_found("batch endpoint", name)
    return row


def list_endpoints(session: Session, ws: Workspace) -> list[BatchEndpoint]:
    query = select(BatchEndpoint).where(BatchEndpoint.workspace_id == ws.id).order_by(BatchEndpoint.name)
    return list(session.scalars(query))


def create_or_update_endpoint(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, body: Any, caller: Caller
) -> tuple[BatchEndpoint, bool]:
    """Create or replace an endpoint's document (a default deployment must be one of its own);
    committed."""
    spec = rules.parse_endpoint(body, name)
    row = find_endpoint(session, ws, name)
    default = (spec.get("defaults") or {}).get("deployment_name")
    if default and (row is None or default not in [d.name for d in deployments(session, row)]):
        raise validation_error(
            "defaults.deployment_name",
            f"batch endpoint '{name}' has no deployment '{default}'; create it first "
            "(cloudlet batch-deployment create --set-default)",
        )
    now = time.time()
    created = row is None
    if row is None:
        row = BatchEndpoint(
            workspace_id=ws.id, name=name, spec=spec, created_by=caller.name, created_at=now, modified_at=now
        )
        session.add(row)
    else:
        row.spec, row.modified_at = spec, now
    session.flush()
    audit.record(session, caller.name, "batchEndpoint.write", f"{ref.arm_id}/batchEndpoints/{name}")
    session.commit()
    return row, created


def delete_endpoint(
    session: Session, ref: WorkspaceRef, ws: Workspace, name: str, caller: Caller, missing_ok: bool = False
) -> bool:
    """Delete the endpoint and its deployments, committed; False (nothing done) when there is no
    such endpoint and MISSING_OK (ARM's delete), else 404."""
    row = find_endpoint(session, ws, name) if missing_ok else get_endpoint(session, ws, name)
    if row is None:
        return False
    for deployment in deployments(session, row):
        session.delete(deployment)
    session.delete(row)
    audit.record(session, caller.name, "batchEndpoint.delete", f"{ref.arm_id}/batchEndpoints/{name}")
    session.commit()
    return True


# -- views ---------------------------------------------------------------------------------------
# One view of a batch endpoint and of a deployment, which every door renders: the native API as it
# is, the ARM facade translated (``api/arm/wire/arm_batch``).
def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, UTC).isoformat()


def render_endpoint(row: BatchEndpoint, ref: WorkspaceRef, invoke_base: str) -> dict[str, Any]:
    """INVOKE_BASE: where the caller's door serves ``{workspace id}/batchEndpoints/{name}/invoke``
    (the native API under ``/api/v1``, the ARM facade at its root), so each door's scoring URI is
    its own invoke route."""
    path = f"{ref.arm_id}/batchEndpoints/{row.name}"
    return {
        **row.spec,
        "id": path,
        "name": row.name,
        "scoring_uri": f"{invoke_base}{path}/invoke",
        "provisioning_state": "Succeeded",
        "creation_context": {"created_by": row.created_by, "created_at": _when(row.created_at)},
    }


def render_deployment(row: BatchDeployment, endpoint: str, ref: WorkspaceRef) -> dict[str, Any]:
    return {
        **row.spec,
        "id": f"{ref.arm_id}/batchEndpoints/{endpoint}/deployments/{row.name}",
        "name": row.name,
        "endpoint_name": endpoint,
        "provisioning_state": "Succeeded",
        "creation_context": {"created_by": row.created_by, "created_at": _when(row.created_at)},
    }


# -- deployments -----------------------------------------------------------------------------
def deployments(session: Session, endpoint: BatchEndpoint) -> list[BatchDeployment]:
    query = (
        select(BatchDeployment)
        .where(BatchDeployment.endpoint_id == endpoint.id)
        .order_by(BatchDeployment.name)
    )
    return list(session.scalars(query))


def get_deployment(session: Session, endpoint: BatchEndpoint, name: str) -> BatchDeployment:
    for row in deployments(session, endpoint):
        if row.name == name:
            return row
    raise not_found(f"deployment of batch endpoint '{endpoint.name}'", name)


def create_or_update_deployment(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    endpoint_name: str,
    name: str,
    body: Any,
    caller: Caller,
    data: DataRoot,
    set_default: bool = False,
) -> tuple[BatchDeployment, BatchEndpoint, bool]:
    """Create or replace a deployment; the endpoint's first deployment (or SET_DEFAULT) becomes
    its default. The cluster must exist and the code must be an uploaded snapshot. Committed;
    the deployment, its endpoint and whether it was made."""
    endpoint = get_endpoint(session, ws, endpoint_name)
    if batch_pipelines.is_pipeline(body):  # type: pipeline, a pipeline component (its own module)
        spec = pipeline_deployments.checked_deployment(session, ws, endpoint_name, name, body)
    else:
        spec = _model_deployment(session, ws, endpoint_name, name, body, data)
    existing = {d.name: d for d in deployments(session, endpoint)}
    now = time.time()
    row = existing.get(name)
    created = row is None
    if row is None:
        row = BatchDeployment(
            endpoint_id=endpoint.id,
            name=name,
            spec=spec,
            created_by=caller.name,
            created_at=now,
            modified_at=now,
        )
        session.add(row)
    else:
        row.spec, row.modified_at = spec, now
    if set_default or not (endpoint.spec.get("defaults") or {}).get("deployment_name"):
        endpoint.spec = {**endpoint.spec, "defaults": {"deployment_name": name}}
        endpoint.modified_at = now
    session.flush()
    target = f"{ref.arm_id}/batchEndpoints/{endpoint_name}/deployments/{name}"
    audit.record(session, caller.name, "batchDeployment.write", target)
    session.commit()
    return row, endpoint, created


def _model_deployment(
    session: Session, ws: Workspace, endpoint_name: str, name: str, body: Any, data: DataRoot
) -> dict[str, Any]:
    """The stored form of a model deployment: its cluster exists, its code is an uploaded snapshot."""
    spec = rules.parse_deployment(body, endpoint_name, name)
    compute = computes.find(session, ws, spec["compute"])
    if compute is None or compute.type != ComputeType.AMLCOMPUTE:
        raise validation_error(
            "compute",
            f"batch deployments run on a cluster; '{spec['compute']}' is not a cluster in this workspace "
            "(cloudlet compute create --type amlcompute)",
        )
    if spec.get("code_configuration"):
        _snapshot(ws, data, spec["code_configuration"]["code"])
    return _with_environment(session, ws, _no_code(session, ws, spec, data))


def _no_code(session: Session, ws: Workspace, spec: dict[str, Any], data: DataRoot) -> dict[str, Any]:
    """SPEC with its model's type known (a registered model's is its asset's). Without
    code_configuration the model must be an MLflow model, scored by cloudlet's MLflow scorer;
    without an environment it gets one from the model's own dependencies, as Azure builds it."""
    model = spec.get("model")
    asset = registered_model(session, ws, str(model)) if model else None
    kind = str(asset.spec.get("type") or "custom_model") if asset is not None else spec.get("model_type")
    if kind:
        spec = {**spec, "model_type": kind}
    mlflow_models.check_scoring(bool(spec.get("code_configuration")), kind, "a batch deployment")
    if spec.get("code_configuration") or spec.get("environment"):
        return spec
    source = str(asset.spec.get("path") or "") if asset is not None else str(model)
    return {**spec, "environment": mlflow_environment(*online.model_path(data, ws.id, source))}


def _with_environment(session: Session, ws: Workspace, spec: dict[str, Any]) -> dict[str, Any]:
    """SPEC with its ``environment`` resolved as a job's (the scoring child is one): a registered
    ``azureml:<name>:<version>`` / ``@latest`` becomes that version's definition inline (pinned
    now; the child's node builds it), and whatever is left must resolve for a job (a curated name,
    an inline environment), so a bad one is refused here, not at invoke."""
    env = spec.get("environment")
    if env is None:
        return spec
    inline, _ = asset_service.resolve_environment(session, ws, env)
    environments.resolve_environment(inline)  # errors name environment.*
    return {**spec, "environment": inline}


def delete_deployment(
    session: Session, ref: WorkspaceRef, ws: Workspace, endpoint_name: str, name: str, caller: Caller
) -> None:
    endpoint = get_endpoint(session, ws, endpoint_name)
    row = get_deployment(session, endpoint, name)
    if (endpoint.spec.get("defaults") or {}).get("deployment_name") == name:
        raise conflict(
            "DefaultDeployment",
            f"'{name}' is the default deployment of batch endpoint '{endpoint_name}'; make another the "
            "default first (cloudlet batch-deployment update --set-default) or delete the endpoint",
            "name",
        )
    session.delete(row)
    target = f"{ref.arm_id}/batchEndpoints/{endpoint_name}/deployments/{name}"
    audit.record(session, caller.name, "batchDeployment.delete", target)
    session.commit()


def _snapshot(ws: Workspace, data: DataRoot, code: str) -> Path:
    if not CODE_SNAPSHOT_PATTERN.fullmatch(code):
        raise validation_error(
            "code_configuration.code",
            f"code {code!r} is not an uploaded snapshot (codes/<sha256>); the CLI and client upload a "
            "local folder for you",
        )
    path = data.code(ws.id, code.removeprefix("codes/"))
    if not path.is_file():
        raise validation_error(
            "code_configuration.code", f"code snapshot {code!r} was not uploaded to this workspace"
        )
    return path


# -- invoke ----------------------------------------------------------------------------------
def invoke(
    session: Session,
    ws: Workspace,
    endpoint_name: str,
    request: rules.InvokeRequest,
    caller: Caller,
    data: DataRoot,
) -> Job:
    """Submit the ``batch_scoring`` job of one invocation (the parent-job loop starts its child);
    committed."""
    job = _submit_invocation(session, ws, endpoint_name, request, caller, data)
    session.commit()
    return job


def _submit_invocation(
    session: Session,
    ws: Workspace,
    endpoint_name: str,
    request: rules.InvokeRequest,
    caller: Caller,
    data: DataRoot,
) -> Job:
    job_name = request.job_name or f"batchjob-{secrets.token_hex(6)}"
    if not JOB_NAME_PATTERN.fullmatch(job_name):
        raise validation_error("job_name", "job_name: letters, digits, '_' and '-', a letter or digit first")
    endpoint = get_endpoint(session, ws, endpoint_name)
    rows = {d.name: d for d in deployments(session, endpoint)}
    chosen = rows[rules.deployment_for(endpoint.spec, request.deployment_name, sorted(rows))]
    data_input = rules.input_of(request)
    if chosen.spec.get("type") == "pipeline":  # its component as a pipeline job
        return pipeline_deployments.invoke(session, ws, chosen.spec, data_input, job_name, caller, data)
    config = chosen.spec.get("code_configuration")
    archive = _snapshot(ws, data, config["code"]).read_bytes() if config else _EMPTY_ARCHIVE
    digest = codes.store_snapshot(session, data, ws.id, with_driver(archive, with_scorer=not config))
    settings = rules.with_overrides(chosen.spec, request)
    if request.output_path:
        _writable(ws, data, request.output_path)
    code_id = f"codes/{digest}"
    doc = rules.scoring_job(endpoint_name, settings, data_input, code_id, job_name, request.output_path)
    prepared = job_service.prepare(doc, job_name)
    job, _ = job_service.submit(session, ws, job_name, prepared, caller, data)
    return job


def _writable(ws: Workspace, data: DataRoot, output_path: str) -> None:
    """OUTPUT_PATH names a folder inside its datastore, and not a file already there."""
    parsed = parse_datastore_uri(output_path)
    assert parsed is not None  # InvokeRequest checked its shape
    try:
        target = data.datastore_path(ws.id, *parsed)
    except CloudletError as exc:
        raise validation_error("output_path", f"output_path: {exc.message}") from None
    if target.is_file():
        raise validation_error(
            "output_path", f"output_path {output_path} is a file; give a folder for the predictions"
        )


def _empty_archive() -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as zipped, tarfile.open(fileobj=zipped, mode="w"):
        pass
    return out.getvalue()


_EMPTY_ARCHIVE = _empty_archive()  # a no-code deployment's "code": the driver and scorer only


def invocations(session: Session, ws: Workspace, endpoint_name: str) -> list[Job]:
    """The endpoint's batch jobs, newest first (the last 1,000 of the workspace)."""
    get_endpoint(session, ws, endpoint_name)
    query = (
        select(Job)
        .where(
            Job.workspace_id == ws.id, Job.kind == JobKind.BATCH_SCORING.value, Job.parent_job_id.is_(None)
        )
        .order_by(Job.submitted_at.desc())
        .limit(1000)
    )
    found = [job for job in session.scalars(query) if job.spec.get("endpoint") == endpoint_name]
    pipelines = (
        select(Job)
        .where(Job.workspace_id == ws.id, Job.kind == JobKind.PIPELINE.value, Job.parent_job_id.is_(None))
        .order_by(Job.submitted_at.desc())
        .limit(1000)
    )
    found += [
        job for job in session.scalars(pipelines) if pipeline_deployments.is_invocation(job, endpoint_name)
    ]
    return sorted(found, key=lambda job: job.submitted_at, reverse=True)
