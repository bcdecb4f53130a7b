"""A model version's own use cases beyond ``assets`` (the studio's Models page): its files, its
MLmodel, what uses it, and registering a version from a job's output as Azure names one
(``azureml://jobs/<job>/outputs/<output>/paths/<path>``).

"Used by" reads what is stored: the jobs whose inputs resolved to this version at submission
(``asset_uses``) and the online and batch deployments whose ``model`` names it
(``azureml:<name>:<version>``, its ARM id, or ``@latest`` while it is the latest).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.assets.assets import parse_reference
from cloudlet.domain.endpoints import mlflow_models as mlflow_rules
from cloudlet.domain.errors import CloudletError, not_found, validation_error
from cloudlet.services.assets import assets as asset_service
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot, read_beneath, relative_parts
from cloudlet.services.jobs import job_outputs
from cloudlet.services.jobs.jobs import parse_datastore_uri
from cloudlet.store.schema import (
    Asset,
    AssetUse,
    BatchDeployment,
    BatchEndpoint,
    Job,
    OnlineDeployment,
    OnlineEndpoint,
    Workspace,
)

MAX_FILES = 2000  # a model's tree as the page lists it (a bigger one says it was cut)
MAX_DOWNLOAD = 256 << 20  # one file through the studio; the CLI downloads bigger ones
_JOB_URI = re.compile(r"^azureml://jobs/(?P<job>[^/]+)/outputs/(?P<output>[^/]+)(?:/paths/(?P<path>.*))?$")


# -- files -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelFile:
    path: str  # relative to the model's folder, '/'-separated
    size: int


def _where(data: DataRoot, ws: Workspace, asset: Asset) -> tuple[Any, tuple[str, ...]] | None:
    """(datastore folder, parts) of the version's path; None for an https:// model."""
    parsed = parse_datastore_uri(str(asset.spec.get("path") or ""))
    if parsed is None:
        return None
    parts = tuple(p for p in parsed[1].split("/") if p)
    return data.datastore(ws.id, parsed[0]), relative_parts("/".join(parts), "path") if parts else ()


def files(data: DataRoot, ws: Workspace, asset: Asset) -> tuple[list[ModelFile], bool]:
    """The version's files (a folder's, or its one file), sorted, at most MAX_FILES; and whether
    the list was cut. Links are listed by nothing and followed never (a job wrote the folder)."""
    found = _where(data, ws, asset)
    if found is None:
        return [], False
    base, parts = found
    top = os.path.join(base, *parts)
    try:
        info = os.lstat(top)
    except OSError:
        return [], False
    if stat.S_ISREG(info.st_mode):
        return [ModelFile(parts[-1] if parts else "", info.st_size)], False
    # a link on the way (a job can plant one) must not take the listing out of the datastore
    if not stat.S_ISDIR(info.st_mode) or not os.path.realpath(top).startswith(
        os.path.realpath(base) + os.sep
    ):
        return [], False
    out: list[ModelFile] = []
    for folder, dirs, names in os.walk(top, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(folder, name)
            entry = os.lstat(full)
            if stat.S_ISREG(entry.st_mode):
                out.append(ModelFile(os.path.relpath(full, top).replace(os.sep, "/"), entry.st_size))
            if len(out) >= MAX_FILES:
                return sorted(out, key=lambda f: f.path), True
    return sorted(out, key=lambda f: f.path), False


def read_file(data: DataRoot, ws: Workspace, asset: Asset, relative: str) -> bytes:
    """One of the version's files (its path relative to the model's folder), at most MAX_DOWNLOAD
    bytes; 404 when it is not a regular file there."""
    found = _where(data, ws, asset)
    wanted = relative_parts(relative, "file") if relative else ()
    if found is None:
        raise not_found("File", relative)
    base, parts = found
    body = read_beneath(base, parts + wanted, limit=MAX_DOWNLOAD) if (parts + wanted) else None
    if body is None:
        raise not_found("File", relative)
    return body


def mlmodel(data: DataRoot, ws: Workspace, asset: Asset) -> tuple[str, dict[str, Any]] | None:
    """An MLflow model's MLmodel text and its flavors (name → settings); None without one."""
    found = _where(data, ws, asset)
    if found is None:
        return None
    text = read_beneath(found[0], found[1] + (mlflow_rules.MLMODEL,), limit=1 << 20)
    if text is None:
        return None
    decoded = text.decode("utf-8", "replace")
    try:
        doc = yaml.safe_load(decoded)
    except yaml.YAMLError:
        return decoded, {}
    flavors = doc.get("flavors") if isinstance(doc, dict) else None
    return decoded, flavors if isinstance(flavors, dict) else {}


# -- used by -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Use:
    kind: str  # job | online | batch
    name: str  # the job, or the deployment
    endpoint: str = ""  # a deployment's endpoint
    how: str = ""  # the job's field, or what the deployment's model says
    status: str = ""  # a job's


def names_version(model: Any, asset: Asset, latest_id: int | None) -> bool:
    """Whether a deployment's MODEL value names version ASSET (``latest_id``: the id of its
    name's latest version, which ``@latest`` or a container's id names)."""
    if not isinstance(model, str):
        return False
    try:
        reference = parse_reference(model)
    except CloudletError:
        return False
    if reference is None or reference.name != asset.name or reference.kind not in (None, "model"):
        return False
    return reference.version == asset.version or (reference.version is None and latest_id == asset.id)


def used_by(session: Session, ws: Workspace, asset: Asset) -> list[Use]:
    """The jobs whose inputs resolved to ASSET, then the online and batch deployments whose
    model names it."""
    jobs = session.execute(
        select(Job.name, Job.status, AssetUse.field)
        .join(AssetUse, AssetUse.job_id == Job.id)
        .where(AssetUse.asset_id == asset.id, AssetUse.role != "output")
        .order_by(Job.submitted_at.desc())
        .limit(500)
    )
    out = [Use("job", name, how=field, status=status) for name, status, field in jobs]
    latest = asset_service.list_assets(session, ws, "model")
    latest_id = next((a.id for a in latest if a.name == asset.name), None)
    online = session.execute(
        select(OnlineEndpoint.name, OnlineDeployment.name, OnlineDeployment.spec)
        .join(OnlineDeployment, OnlineDeployment.endpoint_id == OnlineEndpoint.id)
        .where(OnlineEndpoint.workspace_id == ws.id)
        .order_by(OnlineEndpoint.name, OnlineDeployment.name)
    )
    for endpoint, name, spec in online:
        if names_version(spec.get("model"), asset, latest_id):
            out.append(Use("online", name, endpoint, str(spec["model"])))
    batch = session.execute(
        select(BatchEndpoint.name, BatchDeployment.name, BatchDeployment.spec)
        .join(BatchDeployment, BatchDeployment.endpoint_id == BatchEndpoint.id)
        .where(BatchEndpoint.workspace_id == ws.id)
        .order_by(BatchEndpoint.name, BatchDeployment.name)
    )
    for endpoint, name, spec in batch:
        if names_version(spec.get("model"), asset, latest_id):
            out.append(Use("batch", name, endpoint, str(spec["model"])))
    return out


# -- register from a job's output ----------------------------------------------------------------
def outputs_of(session: Session, ws: Workspace, job_name: str) -> dict[str, dict[str, Any]]:
    """The named outputs of job JOB_NAME (name → type and path), to pick one to register; empty
    when there is no such job."""
    job = session.scalar(select(Job).where(Job.workspace_id == ws.id, Job.name == job_name))
    return job_outputs.outputs(session, job) if job is not None else {}


def job_output_path(session: Session, ws: Workspace, uri: str) -> tuple[str, str]:
    """``azureml://jobs/<job>/outputs/<output>[/paths/<path>]`` as the datastore URI where that
    output is (``job_outputs.outputs``: its declared path, or the job's default folder), and the
    job's name. 400 naming ``path`` when the job or output does not exist."""
    match = _JOB_URI.fullmatch(uri.strip())
    if match is None:
        raise validation_error("path", f"{uri!r} is not azureml://jobs/<job>/outputs/<output>[/paths/<path>]")
    job = session.scalar(select(Job).where(Job.workspace_id == ws.id, Job.name == match["job"]))
    if job is None:
        raise validation_error("path", f"no job '{match['job']}' in this workspace")
    found = job_outputs.outputs(session, job).get(match["output"])
    if found is None:
        named = ", ".join(sorted(job_outputs.outputs(session, job))) or "none"
        raise validation_error(
            "path", f"job '{job.name}' has no output '{match['output']}' (its outputs: {named})"
        )
    base = str(found["path"]).rstrip("/")
    extra = (match["path"] or "").strip("/")
    if extra:
        relative_parts(extra, "path")  # no '..', no absolute path
    return (f"{base}/{extra}" if extra else f"{base}/"), job.name


def register(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    name: str,
    body: dict[str, Any],
    caller: Caller,
    data: DataRoot,
) -> Asset:
    """The next version of model NAME from BODY (``assets.write``), whose ``path`` may name a
    job's output as Azure does (``azureml://jobs/…``): it becomes that output's datastore path,
    and the job the version's ``job_name``. Committed."""
    doc = dict(body)
    path = str(doc.get("path") or "")
    if path.startswith("azureml://jobs/"):
        doc["path"], doc["job_name"] = job_output_path(session, ws, path)
    return asset_service.write(session, ref, ws, "model", name, None, doc, caller, data).asset
