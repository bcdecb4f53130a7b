"""A parent job's children as the decisions read them (``domain.jobs.parent_jobs.ChildView``): where
each one's outputs are, its literal inputs, why it failed. Read-only: below submission and
dispatch, so a pipeline's resolution and the job views read children without reaching up."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session, object_session

from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.job_status import JobStatus
from cloudlet.domain.jobs.parent_jobs import ChildView
from cloudlet.domain.jobs.pipeline_bindings import ARTIFACTS_OUTPUT, default_artifacts_path
from cloudlet.domain.jobs.pipeline_dag import parent_outputs
from cloudlet.store.schema import Job

DEFAULT_OUTPUT = "azureml://datastores/workspaceblobstore/paths/azureml/{job}/{output}/"


_CHILDREN = select(Job).where(Job.parent_job_id == bindparam("parent")).order_by(Job.id)


def children(session: Session, parent: Job) -> list[Job]:
    return list(session.scalars(_CHILDREN, {"parent": parent.id}))


def output_uris(job_name: str, doc: Mapping[str, Any], attempt: int = 0) -> dict[str, str]:
    """Where each of a job's outputs is: the path it was given, else cloudlet's default; and,
    once attempt ATTEMPT has run, ``artifacts``: its default artifacts (unless it has an output
    of that name), which a pipeline step may bind (``pipeline_bindings.ARTIFACTS_OUTPUT``)."""
    uris = {}
    for output, value in (doc.get("outputs") or {}).items():
        path = value.get("path") if isinstance(value, dict) else None
        uris[output] = str(path) if path else DEFAULT_OUTPUT.format(job=job_name, output=output)
    if attempt > 0:
        uris.setdefault(ARTIFACTS_OUTPUT, default_artifacts_path(job_name, attempt))
    return uris


def literal_inputs(doc: Mapping[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for name, value in (doc.get("inputs") or {}).items():
        if isinstance(value, str | int | float | bool):
            found[name] = value
        elif isinstance(value, dict) and "value" in value:
            found[name] = value["value"]
    return found


def error_text(job: Job) -> str | None:
    if job.status != JobStatus.FAILED.value:
        return None
    error = job.error or {}
    message = error.get("message") if isinstance(error, dict) else None
    return str(message or job.status_message or f"exit code {job.exit_code}")


def view_of(child: Job, metrics: Mapping[str, Sequence[tuple[int, float]]] | None = None) -> ChildView:
    # A reused step's outputs (its default artifacts too) are in its spec: the earlier job's.
    outputs = output_uris(child.reused_from or child.name, child.spec, child.attempt)
    if child.kind == JobKind.PIPELINE.value and child.status == JobStatus.COMPLETED.value:
        outputs = {**outputs, **_pipeline_outputs(child)}
    return ChildView(
        key=child.child_key or child.name,
        name=child.name,
        status=JobStatus(child.status),
        outputs=outputs,
        inputs=literal_inputs(child.spec),
        error=error_text(child),
        reused_from=child.reused_from,
        started_at=child.started_at,
        ended_at=child.ended_at,
        metrics=metrics or {},
        exit_code=child.exit_code,
    )


def _pipeline_outputs(pipeline: Job) -> dict[str, str]:
    """Where a completed child pipeline's outputs are: its steps' (a reused step's are the earlier
    job's paths, not the ones the pipeline gave it), so the steps after it read what was written."""
    session = object_session(pipeline)
    if session is None:
        return {}
    return parent_outputs(pipeline.spec, [view_of(kid) for kid in children(session, pipeline)])
