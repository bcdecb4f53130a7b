"""An invocation of a batch endpoint as a browser reads it beyond ``batch_endpoints``: one of the
endpoint's jobs, and its predictions file (its ``score`` output's ``output_file_name``) to
download. (A folder it uploads to score is stored by ``assets.folder_uploads``.)"""

from __future__ import annotations

from sqlalchemy.orm import Session

from cloudlet.domain.endpoints.batch_endpoints import OUTPUT_NAME
from cloudlet.domain.errors import not_found
from cloudlet.domain.jobs.job_kind import JobKind
from cloudlet.domain.paths import parse_datastore_uri
from cloudlet.services.core.storage import DataRoot, read_beneath
from cloudlet.services.endpoints import batch_endpoints
from cloudlet.store.schema import Job, Workspace

MAX_PREDICTIONS = 512 << 20  # one file through the browser


def invocation(session: Session, ws: Workspace, endpoint_name: str, job_name: str) -> Job:
    """One of the endpoint's invocations (404 when the job is not one)."""
    found = batch_endpoints.invocations(session, ws, endpoint_name)
    job = next((j for j in found if j.name == job_name), None)
    if job is None:
        raise not_found(f"invocation of batch endpoint '{endpoint_name}'", job_name)
    return job


def predictions_name(job: Job) -> str | None:
    """The predictions file an invocation writes in its ``score`` output (a model deployment's;
    None for a pipeline deployment's job, whose outputs are its component's)."""
    if job.kind != JobKind.BATCH_SCORING.value:
        return None
    return str((job.spec.get("settings") or {}).get("output_file_name") or "predictions.csv")


def predictions(session: Session, data: DataRoot, ws: Workspace, job: Job) -> tuple[str, bytes]:
    """The invocation's predictions file: (its name, its bytes); 404 until it is written."""
    name = predictions_name(job)
    score = ((job.spec.get("outputs") or {}).get(OUTPUT_NAME) or {}).get("path")
    parsed = parse_datastore_uri(score) if isinstance(score, str) else None
    if name is None or parsed is None:
        raise not_found("Predictions of job", job.name)
    folder = tuple(p for p in parsed[1].split("/") if p)
    body = read_beneath(data.datastore(ws.id, parsed[0]), (*folder, name), limit=MAX_PREDICTIONS)
    if body is None:
        raise not_found("Predictions of job", f"{job.name} ({name} is not written yet)")
    return name, body
