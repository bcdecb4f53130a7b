"""Code versions as Azure ML has them, bridged to cloudlet's native code snapshots.

The SDK uploads a folder through the Blob service (``api/blob.py``) to the URL a pending upload
gave it, then registers ``codes/{name}/versions/{v}`` with that folder's URL and its content hash.
Registering packs the folder into a native snapshot (``codes/<sha256 of the tar.gz>``, the
``code_assets`` row and file the agents download), and checks the SDK's content hash against
what was packed: an upload with a file missing, cut short or changed is refused, not run. A job's
``codeId`` naming the version resolves to that snapshot (``snapshot_for``).
"""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlparse

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.assets.uploads import MAX_UPLOAD_BYTES
from cloudlet.domain.errors import CloudletError, not_found
from cloudlet.services.access import workspaces
from cloudlet.services.assets import blob_sas
from cloudlet.services.core.clock import utcnow
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot, pack_beneath, relative_parts, stat_beneath
from cloudlet.store.schema import CodeAsset, CodeVersion, Workspace

HASH_VERSION = "202208"  # azure-ai-ml's content hash (azure.ai.ml._utils._asset_utils.get_content_hash)
PENDING_UPLOAD_FOLDER = "LocalUpload"
_CODE_ID = re.compile(r"/codes/([^/]+)/versions/([^/]+)/?$")
# The version of a code id that names a bare snapshot by its digest (``code_id_for``).
SNAPSHOT_VERSION = "snapshot"
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_DATASTORE_URI = re.compile(r"^azureml://datastores/([^/]+)/paths/(.*)$")
URI_FIELD = "properties.codeUri"
HASH_FIELD = "properties.properties.hash_sha256"


@dataclass(frozen=True)
class Registration:
    code_uri: str
    hash_sha256: str | None
    hash_version: str | None
    is_anonymous: bool
    description: str | None
    tags: dict[str, Any]


def by_hash(session: Session, workspace: Workspace, hash_sha256: str) -> list[CodeVersion]:
    """Every version of any code in the workspace whose content has this hash, oldest first."""
    return list(
        session.scalars(
            select(CodeVersion)
            .where(CodeVersion.workspace_id == workspace.id, CodeVersion.hash_sha256 == hash_sha256)
            .order_by(CodeVersion.id)
        )
    )


def code_id_for(session: Session, workspace: Workspace, arm_workspace_id: str, code: str) -> str | None:
    """The ARM ``codeId`` of a job document's ``code`` (``codes/<digest>``), the reverse of
    ``snapshot_for``: its code version's (``…/codes/{name}/versions/{v}``), or for a snapshot no
    version holds (code the CLI uploaded) ``…/codes/{digest}/versions/snapshot``, so what the SDK
    reads it can send back (a schedule's job, ``api/arm/schedules.py``). None when it names none."""
    if not code.startswith("codes/"):
        return None
    digest = code.removeprefix("codes/")
    query = (
        select(CodeVersion)
        .where(CodeVersion.workspace_id == workspace.id, CodeVersion.snapshot == digest)
        .order_by(CodeVersion.id)
    )
    row = session.scalars(query.limit(1)).first()
    if row is not None:
        return f"{arm_workspace_id}/codes/{quote(row.name, safe='')}/versions/{quote(row.version, safe='')}"
    if _snapshot_row(session, workspace, digest) is None:
        return None
    return f"{arm_workspace_id}/codes/{digest}/versions/{SNAPSHOT_VERSION}"


def _snapshot_row(session: Session, workspace: Workspace, digest: str) -> CodeAsset | None:
    return session.scalar(
        select(CodeAsset).where(CodeAsset.workspace_id == workspace.id, CodeAsset.hash == digest)
    )


def versions(session: Session, workspace: Workspace, name: str) -> list[CodeVersion]:
    return list(
        session.scalars(
            select(CodeVersion)
            .where(CodeVersion.workspace_id == workspace.id, CodeVersion.name == name)
            .order_by(CodeVersion.id)
        )
    )


def get(session: Session, workspace: Workspace, name: str, version: str) -> CodeVersion:
    row = _find(session, workspace, name, version)
    if row is None:
        raise not_found("Code", f"{name}:{version}")
    return row


def _find(session: Session, workspace: Workspace, name: str, version: str) -> CodeVersion | None:
    return session.scalar(
        select(CodeVersion).where(
            CodeVersion.workspace_id == workspace.id, CodeVersion.name == name, CodeVersion.version == version
        )
    )


def datastore_path(workspace_id: int, code_uri: str) -> tuple[str, tuple[str, ...]]:
    """The (datastore, path) a code URI names in this workspace: a Blob service URL of cloudlet's
    (``…/blob/ws<id>/<datastore>/<path>``) or ``azureml://datastores/<datastore>/paths/<path>``."""
    found = _DATASTORE_URI.match(code_uri)
    if found:
        return found.group(1), relative_parts(unquote(found.group(2)), URI_FIELD)
    segments = [unquote(s) for s in urlparse(code_uri).path.split("/")]
    try:
        at = segments.index("blob")
        account, datastore, rest = segments[at + 1], segments[at + 2], segments[at + 3 :]
    except (ValueError, IndexError):
        raise CloudletError(
            "ValidationError",
            f"codeUri '{code_uri}' is not a folder of this workspace's storage; upload the code to "
            "the URL startPendingUpload gives, or name azureml://datastores/<datastore>/paths/<path>",
            URI_FIELD,
        ) from None
    if blob_sas.workspace_of(account) != workspace_id:
        raise CloudletError(
            "ValidationError", f"codeUri '{code_uri}' is another workspace's storage", URI_FIELD
        )
    return datastore, relative_parts("/".join(rest), URI_FIELD)


def content_hash(archive: bytes) -> str:
    """azure-ai-ml's content hash (version 202208) of the regular files in a tar.gz: the file
    count, then '#name#' and the size of each file in lower-cased name order, then their bytes."""
    files: list[tuple[str, bytes]] = []
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        for member in tar:
            if member.isfile():
                source = tar.extractfile(member)
                assert source is not None
                files.append((member.name, source.read()))
    files.sort(key=lambda item: item[0].lower())
    digest = hashlib.sha256(str(len(files)).encode())
    for name, data in files:
        digest.update(f"#{name}#".encode())
        digest.update(str(len(data)).encode())
    for _, data in files:
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class Packed:
    """An uploaded folder packed into a native snapshot's bytes, and its content hash."""

    archive: bytes
    content_hash: str


def pack_upload(data: DataRoot, workspace: Workspace | int, spec: Registration) -> Packed:
    """Pack the folder ``spec.code_uri`` names and check the SDK's hash of it. Reads no store: the
    caller holds no transaction while a large folder is packed (a write would wait on it)."""
    workspace_id = workspace if isinstance(workspace, int) else workspace.id
    if spec.hash_version not in (None, HASH_VERSION):
        raise CloudletError(
            "ValidationError",
            f"hash_version '{spec.hash_version}' is not known; send {HASH_VERSION} (azure-ai-ml's)",
            "properties.properties.hash_version",
        )
    datastore, parts = datastore_path(workspace_id, spec.code_uri)
    base = data.datastore(workspace_id, datastore)
    found = stat_beneath(base, parts)
    if found is not None and found[1] > MAX_UPLOAD_BYTES:  # packed and hashed in memory below
        raise CloudletError(
            "CodeTooLarge",
            f"the folder at codeUri '{spec.code_uri}' holds {found[1] >> 20} MiB; code is limited to "
            f"{MAX_UPLOAD_BYTES >> 30} GiB, as a code snapshot: register large files as data instead",
            URI_FIELD,
            413,
        )
    archive = pack_beneath(base, parts) if found is not None else None
    if archive is None:
        raise CloudletError(
            "ValidationError",
            f"nothing was uploaded at codeUri '{spec.code_uri}'; upload the folder there first",
            URI_FIELD,
        )
    actual = content_hash(archive)
    if spec.hash_sha256 is not None and spec.hash_sha256 != actual:
        raise CloudletError(
            "ValidationError",
            f"the uploaded folder hashes to {actual}, not {spec.hash_sha256}: some of it is missing "
            "or changed; upload it again",
            HASH_FIELD,
        )
    return Packed(archive, actual)


def existing(
    session: Session, workspace: Workspace, name: str, version: str, spec: Registration
) -> CodeVersion | None:
    """The version, when it exists and names the same folder; refused when it names another
    (versions are immutable, as in Azure ML)."""
    row = _find(session, workspace, name, version)
    if row is not None and row.code_uri != spec.code_uri:
        # The SDK recognises this exact message (ASSET_PATH_ERROR) and explains it.
        raise CloudletError("UserError", "Asset paths cannot be updated.", URI_FIELD, 409)
    return row


def register(
    session: Session,
    data: DataRoot,
    workspace: Workspace,
    caller: Caller,
    name: str,
    version: str,
    spec: Registration,
    packed: Packed,
) -> tuple[CodeVersion, bool]:
    """Create ``name:version`` from the packed folder (its snapshot stored once per content), or
    return it unchanged when it already names the same folder; True when created."""
    row = existing(session, workspace, name, version, spec)
    if row is not None:
        return row, False
    # The same files (by content hash) reuse their snapshot: a packed tar.gz carries its packing
    # time, so packing the same folder twice gives other bytes.
    same = next(
        (
            r.snapshot
            for r in by_hash(session, workspace, packed.content_hash)
            if data.code(workspace.id, r.snapshot).exists()
        ),
        None,
    )
    row = CodeVersion(
        workspace_id=workspace.id,
        name=name,
        version=version,
        code_uri=spec.code_uri,
        hash_sha256=packed.content_hash,
        hash_version=HASH_VERSION,
        snapshot=same or store_snapshot(session, data, workspace.id, packed.archive),
        is_anonymous=spec.is_anonymous,
        description=spec.description,
        tags=spec.tags,
        created_by=caller.name,
        created_on=utcnow(),
    )
    session.add(row)
    return row, True


def put_version(
    session: Session,
    data: DataRoot,
    ref: WorkspaceRef,
    caller: Caller,
    name: str,
    version: str,
    spec: Registration,
) -> tuple[CodeVersion, bool]:
    """The use case behind ``PUT …/codes/{name}/versions/{v}``: register the folder, committed;
    True when created. An existing version naming the same folder is returned as it is. The folder
    is packed outside any transaction (no store write lock while it is read), so the workspace is
    looked up again after it."""
    workspace = workspaces.resolve(session, ref, caller, Access.WRITE)
    row = existing(session, workspace, name, version, spec)
    if row is not None:
        return row, False
    workspace_id = workspace.id
    session.rollback()  # no transaction (and no store write lock) while the folder is packed
    packed = pack_upload(data, workspace_id, spec)
    workspace = workspaces.resolve(session, ref, caller, Access.WRITE)
    row, created = register(session, data, workspace, caller, name, version, spec, packed)
    try:
        session.commit()
    except IntegrityError:  # the same version registered meanwhile by another request (PostgreSQL)
        session.rollback()
        workspace = workspaces.resolve(session, ref, caller, Access.WRITE)
        row, created = get(session, workspace, name, version), False
        existing(session, workspace, name, version, spec)  # refused if another folder
    return row, created


def snapshot(session: Session, data: DataRoot, workspace: Workspace, digest: str) -> dict[str, Any]:
    """The native snapshot named by its DIGEST (``GET …/codes/{digest}``)."""
    row = session.scalar(
        select(CodeAsset).where(CodeAsset.workspace_id == workspace.id, CodeAsset.hash == digest)
    )
    if row is None or not data.code(workspace.id, digest).exists():
        raise not_found("Code", digest)
    return {"hash": row.hash, "size": row.size, "created_on": row.created_on.isoformat()}


def upload_snapshot(
    session: Session, data: DataRoot, workspace: Workspace, digest: str, archive: bytes
) -> tuple[dict[str, Any], bool]:
    """Store a snapshot uploaded under its name (``PUT …/codes/{digest}``), committed; True when
    it is new. The name must be the archive's SHA-256; a new one must fit the storage quota."""
    if hashlib.sha256(archive).hexdigest() != digest:
        raise CloudletError(
            "HashMismatch",
            "the uploaded bytes do not hash to the snapshot name; the name must "
            "be the SHA-256 of the tar.gz body",
            "digest",
        )
    if not data.code(workspace.id, digest).exists():
        workspaces.storage_budget(session, data, workspace.id).check_room(len(archive))
    created = _keep_snapshot(session, data, workspace.id, digest, archive)
    session.commit()
    return {"hash": digest, "size": len(archive)}, created


def store_snapshot(session: Session, data: DataRoot, workspace_id: int, archive: bytes) -> str:
    """The native snapshot of ``archive`` (written once per content); its digest."""
    digest = hashlib.sha256(archive).hexdigest()
    _keep_snapshot(session, data, workspace_id, digest, archive)
    return digest


def _keep_snapshot(session: Session, data: DataRoot, workspace_id: int, digest: str, archive: bytes) -> bool:
    """Write ARCHIVE (of DIGEST) once per content and record it; True when it was not recorded."""
    path = data.code(workspace_id, digest)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{uuid.uuid4().hex}.part")
        tmp.write_bytes(archive)
        tmp.replace(path)
    known = session.scalar(
        select(CodeAsset.id).where(CodeAsset.workspace_id == workspace_id, CodeAsset.hash == digest)
    )
    if known is None:
        session.add(CodeAsset(workspace_id=workspace_id, hash=digest, size=len(archive), created_on=utcnow()))
    return known is None


def snapshot_for(session: Session, workspace: Workspace, code_id: str) -> str:
    """The job document's ``code`` (``codes/<digest>``) for an ARM ``codeId``
    (``…/codes/{name}/versions/{v}``): the bridge the ARM jobs routes use."""
    found = _CODE_ID.search(code_id)
    name, version = (unquote(found.group(1)), unquote(found.group(2))) if found else ("", "")
    row = _find(session, workspace, name, version) if found else None
    bare = row is None and version == SNAPSHOT_VERSION and _DIGEST.fullmatch(name)
    if bare and _snapshot_row(session, workspace, name) is not None:  # a bare snapshot (code_id_for)
        return f"codes/{name}"
    if row is None:
        raise CloudletError(
            "ValidationError",
            f"code {code_id!r} was not found in this workspace; register it first "
            "(PUT …/codes/<name>/versions/<v>)",
            "properties.codeId",
        )
    return f"codes/{row.snapshot}"
