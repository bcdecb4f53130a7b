"""Native REST routes for code snapshots and datastore paths (the bytes jobs read and write).

Every path taken from a request is resolved beneath its own folder without following links
(``services/core/storage.py``): no absolute path, no ``..``, and a link planted by a user's job is
stored or refused, never followed out of the datastore."""

from __future__ import annotations

import tarfile
import zlib
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.concurrency import run_in_threadpool

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import binary_body, errors, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.assets.uploads import MAX_UPLOAD_BYTES
from cloudlet.domain.errors import CloudletError, not_found
from cloudlet.services.access import workspaces
from cloudlet.services.assets import codes
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.core.storage import pack_beneath, relative_parts, stat_beneath, unpack_beneath

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace


WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["data"], route_class=UserRoute)
MAX_UPLOAD = MAX_UPLOAD_BYTES
Digest = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the tar.gz, hex")]
Datastore = Annotated[str, Path(pattern=r"^[A-Za-z0-9._-]{1,255}$", max_length=255)]
TARBALL = binary_body("application/gzip", "a tar.gz archive")
GZIP: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/gzip": {}}, "description": "a tar.gz archive"}
}


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> Workspace:
    return workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, needed)


async def read_upload(request: Request) -> bytes:
    """The request's body, refused with 413 as soon as it passes MAX_UPLOAD (the caller was
    authenticated before any of it was read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_UPLOAD:
        raise CloudletError("PayloadTooLarge", "uploads are limited to 2 GiB", status=413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_UPLOAD:
            raise CloudletError("PayloadTooLarge", "uploads are limited to 2 GiB", status=413)
        chunks.append(chunk)
    return b"".join(chunks)


# -- code snapshots ---------------------------------------------------------------------------
@router.get(WS + "/codes/{digest}")
@router.head(WS + "/codes/{digest}")
def show_code(sub: str, rg: str, ws: str, digest: Digest, ctx: Context = Depends(context)) -> Response:
    workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    return json_response(codes.snapshot(ctx.session, ctx.state.data, workspace, digest))


@router.put(
    WS + "/codes/{digest}",
    status_code=200,
    responses={**success(201, "Stored"), **errors(413)},
    openapi_extra=TARBALL,
)
@body_limit(MAX_UPLOAD)
async def upload_code(
    sub: str, rg: str, ws: str, digest: Digest, request: Request, ctx: Context = Depends(context)
) -> Response:
    body = await read_upload(request)
    result: Response = await run_in_threadpool(_store_code, ctx, sub, rg, ws, digest, body)
    return result


def _store_code(ctx: Context, sub: str, rg: str, ws: str, digest: str, body: bytes) -> Response:
    workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    shown, created = codes.upload_snapshot(ctx.session, ctx.state.data, workspace, digest, body)
    return json_response(shown, 201 if created else 200)


# -- datastores -------------------------------------------------------------------------------
@router.get(WS + "/datastores/{datastore}/paths/{path:path}")
@router.head(WS + "/datastores/{datastore}/paths/{path:path}")
def show_path(
    sub: str, rg: str, ws: str, datastore: Datastore, path: str, ctx: Context = Depends(context)
) -> Response:
    workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    found = stat_beneath(ctx.state.data.datastore(workspace.id, datastore), relative_parts(path, "path"))
    if found is None:
        raise not_found("Path", f"azureml://datastores/{datastore}/paths/{path}")
    return json_response({"path": path, "kind": found[0], "size": found[1]})


@router.put(
    WS + "/datastores/{datastore}/paths/{path:path}",
    status_code=201,
    responses=errors(413),
    openapi_extra=TARBALL,
)
@body_limit(MAX_UPLOAD)
async def upload_path(
    sub: str,
    rg: str,
    ws: str,
    datastore: Datastore,
    path: str,
    request: Request,
    ctx: Context = Depends(context),
) -> Response:
    relative_parts(path, "path")
    body = await read_upload(request)
    result: Response = await run_in_threadpool(_store_path, ctx, sub, rg, ws, datastore, path, body)
    return result


def _store_path(ctx: Context, sub: str, rg: str, ws: str, datastore: str, path: str, body: bytes) -> Response:
    workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    parts = relative_parts(path, "path")
    budget = workspaces.storage_budget(ctx.session, ctx.state.data, workspace.id)
    try:
        unpack_beneath(body, ctx.state.data.datastore(workspace.id, datastore), parts, budget)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise CloudletError("InvalidArchive", f"the body must be a tar.gz archive ({exc})", "body") from None
    except OSError as exc:  # e.g. a link or a file where the path needs a folder
        raise CloudletError(
            "InvalidPath", f"cannot write beneath '{path}': {exc.strerror or exc}", "path", 409
        ) from None
    uri = f"azureml://datastores/{datastore}/paths/{path.strip('/')}"
    return json_response({"path": path, "uri": uri}, 201)


@router.get(WS + "/datastores/{datastore}/download/{path:path}", responses=GZIP)
def download_path(
    sub: str, rg: str, ws: str, datastore: Datastore, path: str, ctx: Context = Depends(context)
) -> Response:
    workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    packed = pack_beneath(ctx.state.data.datastore(workspace.id, datastore), relative_parts(path, "path"))
    if packed is None:
        raise not_found("Path", path)
    return Response(packed, media_type="application/gzip")
