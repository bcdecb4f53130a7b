"""Writing an asset version as every front door does: ``assets.create_or_update`` after resolving
a path that names a job's output. Above both ``assets`` and the jobs' services (a job's inputs
resolve assets; an asset registered from a job's output reads the job), so neither imports the other
back."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from cloudlet.domain.assets.assets import AssetKind
from cloudlet.services.assets import asset_files, assets
from cloudlet.services.assets.assets import Created
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.core.use_case import use_case
from cloudlet.store.schema import Workspace


@use_case
def write(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    kind: AssetKind,
    name: str,
    version: str | None,
    body: Any,
    caller: Caller,
    data: DataRoot,
    archived: bool | None = None,
) -> Created:
    """The use case behind a version's POST or PUT (REST, ARM, the studio): a data or model path that
    names a job's output resolved, ``assets.create_or_update``, then archive or restore it when
    ARCHIVED (the ARM facade's isArchived) differs; committed."""
    body = _job_output_resolved(session, ws, kind, body)
    result = assets.create_or_update(session, ref, ws, kind, name, version, body, caller, data)
    if archived is not None and archived != result.asset.archived:
        assets.set_archived(session, ref, ws, kind, name, result.asset.version, archived, caller)
    session.commit()
    return result


def _job_output_resolved(session: Session, ws: Workspace, kind: AssetKind, body: Any) -> Any:
    """A data or model ``path: azureml://jobs/<job>/outputs/<name>[/paths/<path>]`` as the datastore
    URI of that output (``asset_files.job_output_path``); the job's output is kept in
    ``properties``, and a model's job in its ``job_name`` (as Azure ML's model keeps it)."""
    path = body.get("path") if isinstance(body, dict) and kind in ("data", "model") else None
    if not isinstance(path, str):
        return body
    resolved = asset_files.job_output_path(session, ws, path)
    if resolved is None:
        return body
    properties = {**(body.get("properties") or {}), "job_output": path.strip()}
    found = {**body, "path": resolved[0], "properties": properties}
    if kind == "model":
        found["job_name"] = resolved[1]
    return found
