"""MLflow's artifact proxy (``mlflow-artifacts``): upload, download and list a run's artifacts.

A run's ``artifact_uri`` is ``mlflow-artifacts:/<run id>``; the client resolves it against the
tracking URI to ``…/api/2.0/mlflow-artifacts/artifacts/<run id>/<path>``. The bytes live in the
workspace's default datastore at ``ExperimentRun/dcid.<run id>/<path>``: for a job, the same
folder as its attempts' ``outputs`` and ``logs`` (``attempt-N/``), which ``jobs.download`` and
``cloudlet job download --all`` read. Paths from a request are opened beneath that folder without
following links (the blob store's helpers, services/assets/blob_store.py).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from starlette.requests import ClientDisconnect

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.mlflow import ARTIFACTS, MlflowRoute, may_read_run, run_writer, workspace
from cloudlet.api.openapi import binary_body
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.tracking.tracking import invalid
from cloudlet.services.assets.blob_store import BlobError, BlobStore, Upload, read_range
from cloudlet.services.core.storage import DEFAULT_DATASTORE, relative_parts
from cloudlet.services.tracking import tracking

router = APIRouter(tags=["mlflow"], route_class=MlflowRoute)
MAX_ARTIFACT_BYTES = 5000 << 20
BYTES: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"*/*": {}},
        "description": "The artifact's bytes, as the type they were uploaded with (else octet-stream)",
    }
}


def _split(path: str) -> tuple[str, tuple[str, ...]]:
    """(run id, the path's segments within the run's artifacts), confined: no '..', no absolute."""
    parts = relative_parts(path.strip("/") if path.startswith("/") else path, "path", "an artifact path")
    if not parts:
        raise invalid("name an artifact as <run id>/<path>", "path")
    return parts[0], parts[1:]


def _place(run: str, rest: tuple[str, ...]) -> tuple[str, ...]:
    return ("ExperimentRun", f"dcid.{run}", *rest)


def _store(ctx: Context, workspace_id: int) -> BlobStore:
    return BlobStore(ctx.state.data, workspace_id, DEFAULT_DATASTORE)


def _blob_error(exc: BlobError) -> CloudletError:
    return CloudletError(
        "INVALID_PARAMETER_VALUE", str(exc), "path", 400 if exc.status >= 400 else exc.status
    )


def _readable(ctx: Context, sub: str, rg: str, ws: str, path: str) -> tuple[int, str, tuple[str, ...]]:
    """The workspace's id and the run and path a read names (the caller checked before the path)."""
    found = workspace(ctx, sub, rg, ws, Access.READ)
    run, rest = _split(path)
    may_read_run(ctx, run)
    tracking.find_run(ctx.session, found, run)
    return found.id, run, rest


def _writable(ctx: Context, sub: str, rg: str, ws: str, path: str) -> tuple[int, str, tuple[str, ...]]:
    found = run_writer(ctx, sub, rg, ws, path.lstrip("/").split("/", 1)[0])
    run, rest = _split(path)
    if not rest:
        raise invalid("name the artifact's file: <run id>/<path>", "path")
    tracking.find_run(ctx.session, found, run)
    return found.id, run, rest


@router.put(
    ARTIFACTS + "/{path:path}",
    openapi_extra=binary_body("application/octet-stream", "The artifact's bytes (none: empty)", False),
)
@body_limit(MAX_ARTIFACT_BYTES)
async def upload_artifact(
    sub: str, rg: str, ws: str, path: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    workspace_id, run, rest = await run_in_threadpool(_writable, ctx, sub, rg, ws, path)
    store = _store(ctx, workspace_id)
    upload: Upload = await run_in_threadpool(store.begin)
    try:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_ARTIFACT_BYTES:
                raise CloudletError(
                    "INVALID_PARAMETER_VALUE",
                    f"an artifact may be at most {MAX_ARTIFACT_BYTES >> 20} MiB",
                    "body",
                    413,
                )
            if chunk:
                await run_in_threadpool(upload.write, chunk)
        md5 = await run_in_threadpool(upload.finish, None, None)
        content_type = request.headers.get("content-type")
        await run_in_threadpool(store.put, _place(run, rest), upload, md5, content_type, {}, False)
    except BlobError as exc:
        await run_in_threadpool(upload.discard)
        raise _blob_error(exc) from None
    except (CloudletError, ClientDisconnect, OSError):
        await run_in_threadpool(upload.discard)
        raise
    return json_response({})


@router.get(ARTIFACTS + "/{path:path}", responses=BYTES)
async def download_artifact(
    sub: str, rg: str, ws: str, path: str, ctx: Context = Depends(context)
) -> Response:
    workspace_id, run, rest = await run_in_threadpool(_readable, ctx, sub, rg, ws, path)
    opened = await run_in_threadpool(_store(ctx, workspace_id).open, _place(run, rest)) if rest else None
    if opened is None:
        raise CloudletError(
            "RESOURCE_DOES_NOT_EXIST", f"no artifact '{'/'.join(rest)}' in run '{run}'", "path", 404
        )
    fd, info = opened
    headers = {"Content-Length": str(info.size)}
    return StreamingResponse(
        read_range(fd, 0, info.size),
        200,
        headers=headers,
        media_type=info.content_type or "application/octet-stream",
    )


def _children(store: BlobStore, run: str, rest: tuple[str, ...]) -> list[dict[str, Any]]:
    prefix = "/".join(_place(run, rest)) + "/"
    files: dict[str, dict[str, Any]] = {}
    try:
        listed = store.list(prefix)
    except BlobError as exc:
        raise _blob_error(exc) from None
    for info in listed:
        child, _, deeper = info.name[len(prefix) :].partition("/")
        if deeper:
            files.setdefault(child, {"path": child, "is_dir": True})
        else:
            files[child] = {"path": child, "is_dir": False, "file_size": info.size}
    return [files[name] for name in sorted(files)]


@router.get(ARTIFACTS)
def list_artifacts(
    sub: str,
    rg: str,
    ws: str,
    ctx: Context = Depends(context),
    path: Annotated[str, Query(max_length=1024)] = "",
) -> Response:
    """The files and folders directly in PATH (``<run id>[/<folder>]``), by name."""
    if not path.strip("/"):
        workspace(ctx, sub, rg, ws, Access.READ)
        return json_response({})
    workspace_id, run, rest = _readable(ctx, sub, rg, ws, path)
    files = _children(_store(ctx, workspace_id), run, rest)
    return json_response({"files": files} if files else {})
