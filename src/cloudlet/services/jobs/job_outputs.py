"""Where a job's outputs are (for run history's ``rundata`` and the data plane's
``batchGetResolvedUris``, which azure-ai-ml's ``jobs.download`` reads): each declared output's path,
or cloudlet's default ``azureml/{job}/{output}/`` of ``workspaceblobstore``; a pipeline's output is
where the step output bound to it wrote."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.errors import not_found
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.jobs.pipeline_bindings import DEFAULT_DATASTORE, default_output_path
from cloudlet.domain.paths import parse_datastore_uri
from cloudlet.services.core.storage import DataRoot, pack_beneath, relative_parts
from cloudlet.services.jobs import job_children, pipelines
from cloudlet.store.schema import Job, Workspace


def pack(session: Session, data: DataRoot, ws: Workspace, job: Job, output: str) -> bytes | None:
    """Job output OUTPUT as a tar.gz (None when nothing was written). It is read where it was
    written: its datastore path when it names one (a pipeline step's, a reused step's), for a
    pipeline's own output where the step bound to it wrote, else the job's default folder. The
    folder is the job's to write (links included): it is packed without following any."""
    if output not in (job.spec.get("outputs") or {}):
        raise not_found("Output", output)
    declared = job.spec["outputs"][output]
    given = declared.get("path") if isinstance(declared, dict) else None
    if given is None and job.kind == JobKind.PIPELINE.value:
        given = pipelines.outputs(job, job_children.children(session, job)).get(output)
    at = parse_datastore_uri(given) if isinstance(given, str) else None
    if at is None:
        default = data.job_output(ws.id, job.name, output)
        at = (DEFAULT_DATASTORE, str(default.relative_to(data.datastore(ws.id))))
    return pack_beneath(data.datastore(ws.id, at[0]), relative_parts(at[1], "output"))


def outputs(session: Session, job: Job) -> dict[str, dict[str, Any]]:
    """The job's outputs: name → ``{type, path, …}`` (the path filled in)."""
    declared = (job.spec or {}).get("outputs") or {}
    out: dict[str, dict[str, Any]] = {}
    for name, value in declared.items():
        item = dict(value) if isinstance(value, dict) else {}
        item.setdefault("type", "uri_folder")
        item["path"] = item.get("path") or default_output_path(DEFAULT_DATASTORE, job.name, name)
        out[name] = item
    if job.kind == JobKind.PIPELINE.value:
        for name, path in pipelines.outputs(job, job_children.children(session, job)).items():
            out.setdefault(name, {"type": "uri_folder"})["path"] = path
    return out


def first_found(
    session: Session, ws: Workspace, wanted: dict[str, list[tuple[str, str]]]
) -> dict[str, dict[str, Any]]:
    """For each key of WANTED, the first of its (job, output) candidates that exists: that output
    (``path``, ``type``). A key none of whose candidates is (or still is) there is left out."""
    answer: dict[str, dict[str, Any]] = {}
    for key, candidates in wanted.items():
        for job_name, output in candidates:
            job = session.scalar(select(Job).where(Job.workspace_id == ws.id, Job.name == job_name))
            found = outputs(session, job).get(output) if job is not None else None
            if found is not None:
                answer[key] = found
                break
    return answer
