"""Data, model and environment assets, versioned per workspace: the use cases.

Shaped so a router (native or ARM) is a thin translation: ``list_assets`` (each name's latest),
``list_versions``, ``get_version`` (an explicit version or ``latest``), ``create_or_update``
(``version=None``: the next one), ``set_archived`` (a version or every version of a name),
``delete_version`` (refused while a job that has not ended uses it). Jobs reach assets through
``resolve_job`` (at submission: references become the version's path, and the use is recorded)
and ``register_outputs`` (when a job completes: its named outputs become versions).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy import ColumnElement, bindparam, exists, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import InstrumentedAttribute, Session

from cloudlet.domain.assets import assets as rules
from cloudlet.domain.assets.assets import AssetKind, AssetRef
from cloudlet.domain.assets.environments import curated_environment
from cloudlet.domain.errors import CloudletError, conflict, not_found, validation_error
from cloudlet.domain.jobs import pipeline_jobs as pipeline_rules
from cloudlet.domain.jobs.job_spec import MODEL_TYPES, PATH_TYPES
from cloudlet.services.access import audit
from cloudlet.services.assets.component_code import checked_code
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DEFAULT_DATASTORE, DataRoot
from cloudlet.services.jobs import job_status as job_status_service
from cloudlet.store.schema import Asset, AssetUse, Job, Workspace

KIND_TITLE = {"data": "Data asset", "model": "Model", "environment": "Environment", "component": "Component"}


def _versions(session: Session, ws: Workspace | int, kind: AssetKind, name: str) -> list[Asset]:
    ws_id = ws if isinstance(ws, int) else ws.id
    query = select(Asset).where(Asset.workspace_id == ws_id, Asset.kind == kind, Asset.name == name)
    return list(session.scalars(query.order_by(Asset.id)))


def _missing(kind: AssetKind, name: str, version: str | None = None) -> CloudletError:
    what = f"{name}:{version}" if version else name
    error = not_found(KIND_TITLE[kind], what)
    return error


def list_assets(
    session: Session, ws: Workspace, kind: AssetKind, include_archived: bool = False
) -> list[Asset]:
    """Each name's latest version (names whose every version is archived only when asked)."""
    rows = session.scalars(
        select(Asset).where(Asset.workspace_id == ws.id, Asset.kind == kind).order_by(Asset.name, Asset.id)
    )
    by_name: dict[str, list[Asset]] = {}
    for row in rows:
        by_name.setdefault(row.name, []).append(row)
    out: list[Asset] = []
    for versions in by_name.values():
        latest = _latest(versions)
        if latest is not None:
            out.append(latest)
        elif include_archived:
            out.append(versions[-1])
    return out


def _latest(versions: Sequence[Asset]) -> Asset | None:
    picked = rules.pick_latest([rules.VersionRow(v.version, v.archived, v.id) for v in versions])
    return next((v for v in versions if picked is not None and v.id == picked.order), None)


def list_versions(
    session: Session, ws: Workspace, kind: AssetKind, name: str, view: str = "active_only"
) -> list[Asset]:
    """Versions newest first: ``active_only`` (default), ``archived_only`` or ``all``. A name with
    no version at all is a 404."""
    versions = _versions(session, ws, kind, name)
    if not versions:
        raise _missing(kind, name)
    wanted = {"active_only": (False,), "archived_only": (True,), "all": (False, True)}[view]
    return [v for v in reversed(versions) if v.archived in wanted]


def get_version(session: Session, ws: Workspace, kind: AssetKind, name: str, version: str | None) -> Asset:
    """VERSION, or the latest (not archived) when None or ``latest``. Archived versions resolve by
    explicit version (as Azure ML)."""
    if version is None or version == rules.LATEST:
        latest = _latest(_versions(session, ws, kind, name))
        if latest is None:
            if _versions(session, ws, kind, name):
                raise CloudletError(
                    "ResourceNotFound",
                    f"every version of {kind} '{name}' is archived; name a version ({name}:<version>) "
                    f"or restore one (cloudlet {_cli(kind)} restore -n {name} -v <version>)",
                    name,
                    404,
                )
            raise _missing(kind, name)
        return latest
    row = session.scalar(
        select(Asset).where(
            Asset.workspace_id == ws.id, Asset.kind == kind, Asset.name == name, Asset.version == version
        )
    )
    if row is None:
        raise _missing(kind, name, version)
    return row


def _cli(kind: AssetKind) -> str:
    return kind


@dataclass
class Created:
    asset: Asset
    created: bool


def create_or_update(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    kind: AssetKind,
    name: str,
    version: str | None,
    body: Any,
    caller: Caller,
    data: DataRoot,
) -> Created:
    """Create NAME:VERSION (the next version when None), or update an existing version's
    description, tags, properties and stage (anything else of a version is immutable: 409)."""
    spec = pipeline_rules.parse_asset(kind, body, name, version)
    _check_path_exists(ws, kind, spec.doc, data)
    if kind == "component":  # its code: the uploaded snapshot it runs
        spec = replace(spec, doc=checked_code(session, ws, spec.doc))
    versions = _versions(session, ws, kind, name)
    wanted = spec.version or rules.next_version(v.version for v in versions)
    existing = next((v for v in versions if v.version == wanted), None)
    now = time.time()
    if existing is not None:
        if spec.version is None:  # cannot happen under the writer lock; say so if it does
            raise conflict("AssetVersionExists", f"{kind} {name}:{wanted} was just created; try again")
        existing.spec = rules.updated_doc(kind, existing.spec, spec.doc)
        existing.modified_at = now
        audit.record(session, caller.name, f"{kind}.update", _target(ref, kind, name, wanted), spec.doc)
        session.flush()
        return Created(existing, False)
    row = Asset(
        workspace_id=ws.id,
        kind=kind,
        name=name,
        version=wanted,
        spec=spec.doc,
        archived=False,
        created_by=caller.name,
        created_at=now,
        modified_at=now,
    )
    session.add(row)
    audit.record(session, caller.name, f"{kind}.create", _target(ref, kind, name, wanted), spec.doc)
    try:
        session.flush()
    except IntegrityError:  # another replica made the same version meanwhile (PostgreSQL)
        raise conflict(
            "AssetVersionExists", f"{kind} {name}:{wanted} was created meanwhile; try again", "version"
        ) from None
    return Created(row, True)


def latest_version(session: Session, ws: Workspace | int, kind: AssetKind, name: str) -> Asset | None:
    """NAME's latest version (what ``@latest`` names: the newest not archived); None when none."""
    return _latest(_versions(session, ws, kind, name))


def _target(ref: WorkspaceRef, kind: AssetKind, name: str, version: str | None = None) -> str:
    base = f"{ref.arm_id}/{rules.COLLECTIONS[kind]}/{name}"
    return f"{base}/versions/{version}" if version else base


def _check_path_exists(ws: Workspace, kind: AssetKind, doc: dict[str, Any], data: DataRoot) -> None:
    path = doc.get("path")
    if not isinstance(path, str) or not path.startswith("azureml://datastores/"):
        return
    datastore, _, relative = path.removeprefix("azureml://datastores/").partition("/paths/")
    if not data.datastore_path(ws.id, datastore, relative).exists():
        raise CloudletError(
            "PathNotFound",
            f"nothing at {path}; upload it first (cloudlet {kind} create with a local path uploads it)",
            "path",
        )


def set_archived(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    kind: AssetKind,
    name: str,
    version: str | None,
    archived: bool,
    caller: Caller,
) -> list[Asset]:
    """Archive (or restore) one version, or every version of NAME when VERSION is None."""
    rows = [get_version(session, ws, kind, name, version)] if version else _versions(session, ws, kind, name)
    if not rows:
        raise _missing(kind, name)
    for row in rows:
        row.archived = archived
        row.modified_at = time.time()
    verb = "archive" if archived else "restore"
    audit.record(session, caller.name, f"{kind}.{verb}", _target(ref, kind, name, version))
    session.flush()
    return rows


def archive(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    kind: AssetKind,
    name: str,
    version: str | None,
    archived: bool,
    caller: Caller,
) -> list[Asset]:
    """The use case: ``set_archived``, committed."""
    rows = set_archived(session, ref, ws, kind, name, version, archived, caller)
    session.commit()
    return rows


def archive_container(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    kind: AssetKind,
    name: str,
    archived: bool,
    caller: Caller,
) -> Container:
    """The use case behind the ARM container PUT: archive or restore every version of NAME;
    committed. The container as it now is."""
    set_archived(session, ref, ws, kind, name, None, archived, caller)
    [found] = containers(session, ws, kind, "all", name)
    session.commit()
    return found


def jobs_using(session: Session, asset_ids: Sequence[int]) -> list[str]:
    """Names of the jobs that have not ended and use any of ASSET_IDS."""
    query = (
        select(Job.name)
        .join(AssetUse, AssetUse.job_id == Job.id)
        .where(AssetUse.asset_id.in_(list(asset_ids)), Job.status.not_in(job_status_service.FINAL_VALUES))
        .distinct()
        .order_by(Job.name)
    )
    return list(session.scalars(query))


def delete_version(
    session: Session,
    ref: WorkspaceRef,
    ws: Workspace,
    kind: AssetKind,
    name: str,
    version: str,
    caller: Caller,
) -> None:
    """Delete one version, committed; refused (409) while a queued or running job uses it, naming
    the jobs. Its bytes stay in the datastore (uploads are content-hashed and may be shared)."""
    row = get_version(session, ws, kind, name, version)
    users = jobs_using(session, [row.id])
    if users:
        shown = ", ".join(users[:20]) + (f" and {len(users) - 20} more" if len(users) > 20 else "")
        raise conflict(
            "AssetInUse",
            f"{kind} {name}:{row.version} is used by jobs that have not ended: {shown}; wait for them "
            f"or cancel them (cloudlet job cancel -n <job>), or archive the version instead",
            "version",
        )
    session.execute(update(AssetUse).where(AssetUse.asset_id == row.id).values(asset_id=None))
    session.delete(row)
    audit.record(session, caller.name, f"{kind}.delete", _target(ref, kind, name, row.version))
    session.commit()


# ----------------------------------------------------------------------------------------------
# Jobs.


@dataclass
class Resolved:
    doc: dict[str, Any]
    uses: list[AssetUse] = field(default_factory=list)


def resolve_job(session: Session, ws: Workspace, doc: dict[str, Any]) -> Resolved:
    """A job document with its asset references resolved: ``azureml:name:1`` / ``@latest`` inputs
    become the version's path (its type the data asset's), a workspace environment becomes its
    definition inline; named outputs are checked and recorded for registration. DOC is not
    changed (a batch replays it); the uses are returned unsaved, to add once the job has an id."""
    out = Resolved(doc)
    for key, value in (doc.get("inputs") or {}).items():
        if not isinstance(value, dict) or value.get("type") not in PATH_TYPES:
            continue
        path = value.get("path")
        reference = rules.parse_reference(path) if isinstance(path, str) else None
        if reference is None:
            continue
        kind = rules.input_kind(str(value["type"])) or "data"
        target = f"inputs.{key}.path"
        asset = _resolve(session, ws, reference, kind, target)
        resolved = {**value, "path": asset.spec["path"]}
        if kind == "data":
            resolved["type"] = asset.spec.get("type", value["type"])
        _replace(out, doc, ("inputs", key), resolved)
        out.uses.append(_use("input", f"inputs.{key}", asset))
    env = doc.get("environment")
    inline, found = resolve_environment(session, ws, env)
    if found is not None:
        _replace(out, doc, ("environment",), inline)
        out.uses.append(_use("environment", "environment", found))
    for key, value in (doc.get("outputs") or {}).items():
        registration = rules.output_registration(value) if isinstance(value, dict) else None
        if registration is None:
            continue
        kind, name, version = registration
        if version is not None and _exists(session, ws, kind, name, version):
            raise conflict(
                "AssetVersionExists",
                f"output '{key}' would register {kind} {name}:{version}, which exists; "
                "omit version to register the next one",
                f"outputs.{key}.version",
            )
        out.uses.append(
            AssetUse(role="output", field=f"outputs.{key}", kind=kind, name=name, version=version)
        )
    return out


def _replace(out: Resolved, original: dict[str, Any], where: tuple[str, ...], value: Any) -> None:
    if out.doc is original:
        out.doc = copy.deepcopy(original)
    holder = out.doc
    for part in where[:-1]:
        holder = holder[part]
    holder[where[-1]] = value


def _use(role: str, field_path: str, asset: Asset) -> AssetUse:
    return AssetUse(
        role=role,
        field=field_path,
        kind=asset.kind,
        name=asset.name,
        version=asset.version,
        asset_id=asset.id,
    )


def _exists(session: Session, ws: Workspace, kind: AssetKind, name: str, version: str) -> bool:
    query = select(Asset.id).where(
        Asset.workspace_id == ws.id, Asset.kind == kind, Asset.name == name, Asset.version == version
    )
    return session.scalar(query) is not None


def _resolve(session: Session, ws: Workspace, reference: AssetRef, kind: AssetKind, target: str) -> Asset:
    if reference.kind is not None and reference.kind != kind:
        raise validation_error(
            target, f"'{reference.text}' names a {reference.kind}; this input's type needs a {kind}"
        )
    try:
        return get_version(session, ws, kind, reference.name, reference.version)
    except CloudletError as exc:
        if exc.status != 404:
            raise
        raise CloudletError(
            "AssetNotFound",
            f"{exc.message.rstrip('.')}: {target} names {kind} '{reference.text}'; create it first "
            f"(cloudlet {kind} create --file F) or fix the name or version",
            target,
            400,
        ) from None


def resolve_environment(session: Session, ws: Workspace, env: Any) -> tuple[Any, Asset | None]:
    """An ``environment`` field with a workspace environment resolved: ``azureml:<name>:<version>``
    or ``azureml:<name>@latest`` (the newest version not archived), or the environment version's
    ARM id, becomes that version's definition inline (``name``, ``version`` and its ``image``,
    ``conda_file``, ``pip``), returned with the version. Anything else (an inline environment, a
    curated name, none) comes back unchanged, with None. An unknown name or version is a 400 naming
    ``environment`` and the fix. Jobs (``resolve_job``) and online and batch deployments use this
    one rule."""
    if not isinstance(env, str):
        return env, None
    try:
        reference = rules.parse_reference(env)
    except CloudletError as exc:  # an unknown label: the message names it, the field is ours
        raise validation_error("environment", exc.message) from None
    if reference is None:
        return env, None
    found = _environment(session, ws, reference, env)
    if found is None:
        return env, None
    inline: dict[str, Any] = {"name": found.name, "version": found.version}
    inline.update({k: found.spec[k] for k in ("image", "conda_file", "pip") if k in found.spec})
    return inline, found


def _environment(session: Session, ws: Workspace, reference: AssetRef, text: str) -> Asset | None:
    """The workspace's environment REFERENCE names; None for a curated one of that name."""
    if reference.kind not in (None, "environment"):
        raise validation_error("environment", f"'{text}' names a {reference.kind}, not an environment")
    if not _versions(session, ws, "environment", reference.name) and curated_environment(text) is not None:
        return None
    return _resolve(session, ws, reference, "environment", "environment")


def record_uses(session: Session, job: Job, uses: list[AssetUse]) -> None:
    for use in uses:
        use.job_id = job.id
        session.add(use)


_JOB_COLUMNS = select(Job.name, Job.workspace_id, Job.spec, Job.created_by).where(Job.id == bindparam("job"))
_PENDING = select(AssetUse).where(
    AssetUse.job_id == bindparam("job"), AssetUse.role == "output", AssetUse.asset_id.is_(None)
)


def pending_outputs(job_id: ColumnElement[int] | InstrumentedAttribute[int]) -> ColumnElement[bool]:
    """Whether the job JOB_ID (a column of a statement) has named outputs not yet registered, as
    a column: a reader of the job's row learns whether ``register_outputs`` has anything to do."""
    return exists().where(AssetUse.job_id == job_id, AssetUse.role == "output", AssetUse.asset_id.is_(None))


def _output_path(declared: dict[str, Any]) -> str | None:
    """An output's own datastore path (a pipeline step's outputs have one), else None."""
    path = declared.get("path")
    return path if isinstance(path, str) and path.startswith("azureml://datastores/") else None


def register_outputs(session: Session, job_id: int) -> None:
    """The job completed: each named output becomes a version of its model or data asset, whose
    path is the output's folder (``azureml://datastores/workspaceblobstore/paths/azureml/<job>/<output>``).
    A version taken meanwhile is skipped (the job's outcome does not depend on it)."""
    pending = list(session.scalars(_PENDING, {"job": job_id}))
    if not pending:
        return
    # The job's columns, not its object: the plain-SQL exit path must not come to hold the row.
    job = session.execute(_JOB_COLUMNS, {"job": job_id}).one()
    now = time.time()
    for use in pending:
        output = use.field.split(".", 1)[1]
        declared = (job.spec.get("outputs") or {}).get(output) or {}
        kind: AssetKind = "model" if use.kind == "model" else "data"
        versions = _versions(session, job.workspace_id, kind, use.name)
        version = use.version or rules.next_version(v.version for v in versions)
        if any(v.version == version for v in versions):
            continue
        output_type = str(declared.get("type") or ("custom_model" if kind == "model" else "uri_folder"))
        if kind == "model" and output_type not in MODEL_TYPES:
            output_type = "custom_model"
        spec: dict[str, Any] = {
            "type": output_type,
            "path": _output_path(declared)
            or f"azureml://datastores/{DEFAULT_DATASTORE}/paths/azureml/{job.name}/{output}",
            "tags": {},
            "properties": {},
        }
        if declared.get("description"):
            spec["description"] = declared["description"]
        if kind == "model":
            spec["job_name"] = job.name
        asset = Asset(
            workspace_id=job.workspace_id,
            kind=kind,
            name=use.name,
            version=version,
            spec=spec,
            archived=False,
            created_by=job.created_by,
            created_at=now,
            modified_at=now,
        )
        session.add(asset)
        session.flush()
        use.asset_id, use.version = asset.id, version
        audit.record(session, audit.system("jobs"), f"{kind}.create", f"job:{job.name}/{use.field}", spec)


@dataclass
class Container:
    """A name's versions in summary (ARM's asset container): ``latest`` is the newest version not
    archived (the newest when every one is), ``archived`` whether every one is."""

    name: str
    latest: Asset
    next_version: str
    archived: bool


def containers(
    session: Session, ws: Workspace, kind: AssetKind, view: str = "active_only", name: str | None = None
) -> list[Container]:
    """Each name's container (``view``: active_only, archived_only or all), or NAME's alone (404
    when it has no version)."""
    query = select(Asset).where(Asset.workspace_id == ws.id, Asset.kind == kind)
    if name is not None:
        query = query.where(Asset.name == name)
    by_name: dict[str, list[Asset]] = {}
    for row in session.scalars(query.order_by(Asset.name, Asset.id)):
        by_name.setdefault(row.name, []).append(row)
    if name is not None and not by_name:
        raise _missing(kind, name)
    out: list[Container] = []
    for each, versions in by_name.items():
        latest = _latest(versions)
        archived = latest is None
        hidden = {"active_only": archived, "archived_only": not archived}.get(view, False)
        if name is None and hidden:
            continue
        next_version = rules.next_version(v.version for v in versions)
        out.append(Container(each, latest or versions[-1], next_version, archived))
    return out
