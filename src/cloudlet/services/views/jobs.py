"""The native JSON view of a job (``/api/v1/…/jobs``): its Azure ML CLI v2 document as submitted,
with what the server knows of it (status, attempts, times, output URIs, its studio page's link). The job's
kind is on the wire as Azure's own ``type`` field, carried in the stored document."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy.orm import Session

from cloudlet.domain import studio_paths
from cloudlet.domain.jobs import queue_settings
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.queue_places import steps_waiting
from cloudlet.services.core.clock import iso
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_children, job_wait, pipelines, sweeps
from cloudlet.services.jobs.jobs import JobFields
from cloudlet.services.tracking import tracking
from cloudlet.services.views import job_details
from cloudlet.store.schema import Job


def view(session: Session, ref: WorkspaceRef, job: Job, base_url: str, endpoint: str) -> dict[str, Any]:
    """The job as every front door shows it: ``render`` with the asset versions resolved at
    submission, its MLflow metrics and params, and a parent's children (a pipeline's graph and
    outputs; a sweep's trials and best trial); a queued job's ``waiting`` (``services.jobs.job_wait``). The
    ARM facade translates this same view."""
    details = job_details.of_job(session, job.id)  # one statement for runs, assets, metrics, params
    body = render(job, ref, details.runs, base_url, endpoint)
    body["assets"] = details.assets
    body["metrics"], body["params"] = details.metrics, details.params
    waiting = job_wait.why_waiting(session, job)
    if waiting is not None:  # a queued or preparing job: why, and its place in its compute's queue
        body["waiting"] = waiting
    if job.kind != JobKind.COMMAND.value:
        kids = job_children.children(session, job)
        body["children"] = render_children(kids)
        if job.kind == JobKind.PIPELINE.value:
            body["dag"] = pipelines.dag(job, kids)
            waits = steps_waiting(pipelines.graph(job, kids))
            if waits:  # steps not started: the upstream steps each waits for (code "dependency")
                body["waiting_steps"] = {
                    k: {"code": w.code.value, "message": w.message} for k, w in waits.items()
                }
            for output, path in pipelines.outputs(job, kids).items():
                body["outputs"].setdefault(output, {})["uri"] = path
        if job.kind == JobKind.SWEEP.value:
            body["sweep"] = sweeps.view(session, job, kids, tracking.metric_history)
    return body


def render_page(
    session: Session,
    ref: WorkspaceRef,
    workspace_id: int,
    jobs: Sequence[JobFields],
    base_url: str,
    endpoint: str,
) -> list[dict[str, Any]]:
    """A page of a job list: ``render`` each, with a queued job's ``waiting`` (reason, position,
    estimated start) from its compute's queue as last read (``job_wait.waiting_of_rows``: one read
    per compute every few seconds, not one per job)."""
    waiting = job_wait.waiting_of_rows(session, workspace_id, jobs)
    out = []
    for job in jobs:
        body = render(job, ref, [], base_url, endpoint)
        if job.id in waiting:
            body["waiting"] = waiting[job.id]
        out.append(body)
    return out


class RunFields(Protocol):
    """What a job's view shows of a run: a ``JobRun`` or a ``job_details.RunRow``."""

    @property
    def attempt(self) -> int: ...
    @property
    def node_id(self) -> str: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def ended_at(self) -> float | None: ...


def render(
    job: JobFields, ref: WorkspaceRef, runs: Sequence[RunFields], base_url: str, endpoint: str
) -> dict[str, Any]:
    """The job's document and status. ``base_url`` is where the caller reached this server (its
    attempts' log URLs); ``endpoint`` is the server's public URL (``AppState.endpoint``), where the
    browser opens the job's studio page, as an instance's apps (``instances.services``)."""
    attempts: dict[int, dict[str, Any]] = {}
    for run in runs:
        entry = attempts.setdefault(
            run.attempt,
            {
                "attempt": run.attempt,
                "nodes": [],
                "exit_codes": [],
                "reasons": [],
                "started_on": None,
                "ended_on": None,
            },
        )
        entry["nodes"].append(run.node_id)
        entry["exit_codes"].append(run.exit_code)
        if run.reason:
            entry["reasons"].append(run.reason)
        entry["started_on"] = _min(entry["started_on"], run.started_at)
        entry["ended_on"] = _max(entry["ended_on"], run.ended_at)
    outputs = {
        name: {
            **(value or {}),
            "uri": (value or {}).get("path")
            or f"azureml://datastores/workspaceblobstore/paths/azureml/{job.name}/{name}/",
        }
        for name, value in (job.spec.get("outputs") or {}).items()
    }
    return {
        **job.spec,
        "name": job.name,
        "id": f"{ref.arm_id}/jobs/{job.name}",
        "compute": job.compute_name,
        "outputs": outputs,
        "status": job.status,
        "status_message": job.status_message,
        # The SDK entity's shape (priority low/medium/high, job_tier when set), as submitted.
        "queue_settings": queue_settings.shown(job.spec.get("queue_settings")),
        "attempt": job.attempt,
        "attempts": [
            _iso_attempt(a, f"{base_url}/api/v1{_ws_path(ref)}/jobs/{job.name}") for a in attempts.values()
        ],
        "exit_code": job.exit_code,
        "error": job.error,
        "warnings": list(job.warnings or []),
        "creation_context": {"created_by": job.created_by, "created_at": _iso_ts(job.submitted_at)},
        "start_time": _iso_ts(job.started_at),
        "end_time": _iso_ts(job.ended_at),
        "services": services(ref, job.name, endpoint),
    }


def services(ref: WorkspaceRef, name: str, endpoint: str) -> dict[str, dict[str, str]]:
    """Azure's ``services`` of a job: "Studio", the job's studio page (what the SDK's
    ``Job.studio_url`` reads, and ``job show --web`` opens) as an absolute URL on the server's public
    address; none without one (a view made outside a serving process)."""
    if not endpoint:
        return {}
    link = _studio_link(endpoint, ref.subscription_id, ref.resource_group, ref.workspace, name)
    return {"Studio": {"endpoint": link, "job_service_type": "Studio"}}


@functools.lru_cache(maxsize=8192)
def _studio_link(endpoint: str, subscription: str, resource_group: str, workspace: str, name: str) -> str:
    """A job list polled again links the same jobs: each link is built once (building it took
    nearly a third of ``render``'s time per job, docs/studio.md)."""
    return endpoint.rstrip("/") + studio_paths.job_link(subscription, resource_group, workspace, name)


def render_children(kids: Sequence[Job]) -> list[dict[str, Any]]:
    """A pipeline's steps / a sweep's trials, for ``job show`` of their parent."""
    return [
        {
            "key": kid.child_key,
            "name": kid.name,
            "status": kid.status,
            "status_message": kid.status_message,
            "compute": kid.compute_name,
            "reused_from": kid.reused_from,
            "start_time": _iso_ts(kid.started_at),
            "end_time": _iso_ts(kid.ended_at),
        }
        for kid in kids
    ]


def _ws_path(ref: WorkspaceRef) -> str:
    return (
        f"/subscriptions/{ref.subscription_id}/resourceGroups/{ref.resource_group}/workspaces/{ref.workspace}"
    )


def _iso_ts(value: float | None) -> str | None:
    return _iso_of(value) if value is not None else None


@functools.lru_cache(maxsize=8192)
def _iso_of(value: float) -> str | None:
    """A stored time as ISO 8601: a job list renders the same few times over and over (5 % of
    its CPU under the mixed load went to formatting them)."""
    return iso(datetime.fromtimestamp(value, UTC))


def _iso_attempt(entry: dict[str, Any], job_url: str) -> dict[str, Any]:
    """One attempt, with where its log and its default artifacts are read (every attempt's, not
    only the latest's: ``job stream --attempt N``)."""
    number = entry["attempt"]
    return {
        **entry,
        "started_on": _iso_ts(entry["started_on"]),
        "ended_on": _iso_ts(entry["ended_on"]),
        "log": f"{job_url}/logs?attempt={number}",
        "artifacts": f"{job_url}/artifacts?attempt={number}",
    }


def _min(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else min(a, b))


def _max(a: float | None, b: float | None) -> float | None:
    return b if a is None else (a if b is None else max(a, b))
