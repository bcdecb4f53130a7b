"""ARM code assets, as azure-ai-ml uses them to ship a job's local code:

1. ``GET {ws}/codes/{any}/versions?hash=…&hashVersion=202208``: a version with that content?
   (then the SDK skips the upload);
2. ``POST {ws}/codes/{name}/versions/{v}/startPendingUpload``: a signed URL into the Blob service;
3. the SDK uploads the folder there (``api/blob.py``);
4. ``PUT {ws}/codes/{name}/versions/{v}``: register it (``services/assets/codes.register`` packs it into
   a native snapshot and checks its content hash);
5. ``GET {ws}/codes/{name}/versions/{v}``.

Thin: the rules are in ``services/assets/codes.py``; the caller is authenticated by ``UserRoute``.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.bounds import MAX_TAGS, MAX_TEXT
from cloudlet.domain.errors import not_found
from cloudlet.domain.validation import WHOLE_FLOAT
from cloudlet.services.access import workspaces
from cloudlet.services.assets import blob_sas, codes
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import DEFAULT_DATASTORE

if TYPE_CHECKING:
    from cloudlet.store.schema import CodeVersion, Workspace


WS = "/subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.MachineLearningServices/workspaces/{ws}"
router = APIRouter(tags=["arm"], route_class=UserRoute)
Name = Annotated[str, Path(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
Version = Annotated[str, Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


Tags = Annotated[dict[str, Annotated[str, Field(max_length=256)]], Field(max_length=MAX_TAGS)]


class _Loose(BaseModel):
    # ARM bodies carry more than cloudlet reads (provisioningState, systemData, …): ignored.
    model_config = ConfigDict(extra="ignore")


class HashProperties(_Loose):
    hash_sha256: Sha256 | None = None
    # azure-ai-ml sends the number (202208); its REST model says string.
    hash_version: (
        Annotated[str, Field(max_length=16)]
        | Annotated[StrictInt, Field(ge=0, le=99_999_999), WHOLE_FLOAT]
        | None
    ) = None


class CodeVersionProperties(_Loose):
    codeUri: Annotated[str, Field(min_length=1, max_length=2048)]
    isAnonymous: StrictBool = False
    description: Annotated[str, Field(max_length=MAX_TEXT)] | None = None
    tags: Annotated[dict[str, Annotated[str, Field(max_length=256)]], Field(max_length=MAX_TAGS)] | None = (
        None
    )
    properties: HashProperties = HashProperties()


class CodeVersionBody(_Loose):
    properties: CodeVersionProperties


class PendingUploadBody(_Loose):
    pendingUploadType: Annotated[str, Field(max_length=64)] = "TemporaryBlobReference"
    pendingUploadId: Annotated[str, Field(max_length=64, pattern=r"^[A-Za-z0-9-]+$")] | None = None


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def blob_base(request: Request) -> str:
    """The Blob service's address as this caller reached the server (its TLS listener for the SDK)."""
    return f"{request.url.scheme}://{request.url.netloc}/blob"


def version_view(ref: WorkspaceRef, row: CodeVersion) -> dict[str, Any]:
    created = row.created_on.isoformat()
    return {
        "id": f"{ref.arm_id}/codes/{row.name}/versions/{row.version}",
        "name": row.version,
        "type": "Microsoft.MachineLearningServices/workspaces/codes/versions",
        "properties": {
            "codeUri": row.code_uri,
            "isAnonymous": row.is_anonymous,
            "isArchived": False,
            "description": row.description,
            "tags": row.tags or {},
            "properties": {"hash_sha256": row.hash_sha256, "hash_version": row.hash_version},
            "provisioningState": "Succeeded",
        },
        "systemData": {
            "createdAt": created,
            "createdBy": row.created_by,
            "createdByType": "User",
            "lastModifiedAt": created,
        },
    }


@router.get(WS + "/codes/{name}/versions")
def list_versions(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    hash: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}$")] = None,
    hashVersion: Annotated[str | None, Query(max_length=16)] = None,
    ctx: Context = Depends(context),
) -> Response:
    """With ``hash``: the versions of any code whose content has it (the SDK's look-up before an
    upload); without: the versions of ``name``."""
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    if hash is not None and hashVersion not in (None, codes.HASH_VERSION):
        rows = []  # another hash algorithm cannot match ours
    elif hash is not None:
        rows = codes.by_hash(ctx.session, workspace, hash)
    else:
        rows = codes.versions(ctx.session, workspace, name)
    return json_response({"value": [version_view(ref, row) for row in rows]})


@router.get(WS + "/codes/{name}")
def show_code(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    rows = codes.versions(ctx.session, workspace, name)
    if not rows:
        raise not_found("Code", name)
    numeric = [int(r.version) for r in rows if r.version.isdigit()]
    return json_response(
        {
            "id": f"{ref.arm_id}/codes/{name}",
            "name": name,
            "type": "Microsoft.MachineLearningServices/workspaces/codes",
            "properties": {
                "latestVersion": rows[-1].version,
                "nextVersion": str(max(numeric, default=0) + 1),
                "isArchived": False,
            },
        }
    )


@router.get(WS + "/codes/{name}/versions/{version}")
def show_version(
    sub: str, rg: str, ws: str, name: str, version: str, ctx: Context = Depends(context)
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    return json_response(version_view(ref, codes.get(ctx.session, workspace, name, version)))


@router.put(WS + "/codes/{name}/versions/{version}", status_code=201)
def put_version(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    version: Version,
    body: CodeVersionBody,
    ctx: Context = Depends(context),
) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    props = body.properties
    spec = codes.Registration(
        code_uri=props.codeUri,
        hash_sha256=props.properties.hash_sha256,
        hash_version=None if props.properties.hash_version is None else str(props.properties.hash_version),
        is_anonymous=props.isAnonymous,
        description=props.description,
        tags=dict(props.tags or {}),
    )
    row, created = codes.put_version(ctx.session, ctx.state.data, ref, ctx.caller, name, version, spec)
    return json_response(version_view(ref, row), 201 if created else 200)


@router.post(WS + "/codes/{name}/versions/{version}/startPendingUpload")
def start_pending_upload(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    version: Version,
    request: Request,
    body: Annotated[PendingUploadBody, Body()] = PendingUploadBody(),
    ctx: Context = Depends(context),
) -> Response:
    """A folder of the workspace's blob store to upload the code to, and a signed URL for it
    (for that folder only, for ``blob_sas.DEFAULT_TTL`` and while the caller's credential and
    role last)."""
    _, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    pending = body.pendingUploadId or str(uuid.uuid4())
    folder = f"{codes.PENDING_UPLOAD_FOLDER}/{pending}"
    account = blob_sas.account_name(workspace.id)
    blob_uri = f"{blob_base(request)}/{account}/{DEFAULT_DATASTORE}/{folder}"
    issuer = blob_sas.Issuer.of(ctx.caller)
    sas = blob_sas.mint(ctx.state.token_secret, workspace.id, DEFAULT_DATASTORE, issuer, folder, "racwl")
    return json_response(
        {
            "blobReferenceForConsumption": {
                "blobUri": blob_uri,
                "storageAccountArmId": None,
                "credential": {"credentialType": "SAS", "sasUri": f"{blob_uri}?{sas}"},
            },
            "pendingUploadId": pending,
            "pendingUploadType": body.pendingUploadType,
        }
    )
