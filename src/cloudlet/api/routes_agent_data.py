"""A run's data over HTTP (docs/agent-protocol.md, "Job data over HTTP"): what a node that does
not share the server's disk downloads before a run starts and uploads after it. Node-token auth
(``NodeRoute``) and the run's own node checked before any of the body is read."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from typing import IO, Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.openapi import errors
from cloudlet.api.routing import NodeCaller, NodeRoute
from cloudlet.domain.assets.uploads import UnpackBudget
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.paths import MAX_PATH_CHARS
from cloudlet.services.jobs import run_data

router = APIRouter(prefix="/agent/v1", tags=["agent"], route_class=NodeRoute)
RunId = Annotated[str, Path(max_length=40)]
DataPath = Annotated[
    str,
    Query(
        max_length=MAX_PATH_CHARS,
        description="the index of one of the run spec's mounts, then a path inside it: 0, 2/sub/file.txt",
    ),
]
MAX_UPLOAD = 32 << 30
# A job's outputs are packed by its agent from real files, so they may unpack larger than a
# user's upload; still bounded, so that one archive cannot fill the disk.
AGENT_UNPACKED_BYTES = 2 * MAX_UPLOAD
AGENT_UNPACKED_FILES = 1_000_000
SPOOL_IN_MEMORY = 8 << 20
TARBALL, OCTETS = "application/gzip", "application/octet-stream"
DATA_KIND = "X-Cloudlet-Data"  # the answer's header: "file" (the bytes) or "folder" (a tar.gz)
BODY = {
    "requestBody": {
        "required": True,
        "description": "a tar.gz unpacked into the folder PATH names, or one file's bytes written at PATH",
        "content": {m: {"schema": {"type": "string", "format": "binary"}} for m in (TARBALL, OCTETS)},
    }
}
FILE_OR_TARBALL: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {OCTETS: {}, TARBALL: {}},
        "description": f"a file's bytes, or a folder as a tar.gz (the {DATA_KIND} header says which)",
    }
}


def _node(request: Request) -> NodeCaller:
    node: NodeCaller = request.state.node  # authenticated by NodeRoute before the body was read
    return node


@router.get("/runs/{run_id}/data", responses=FILE_OR_TARBALL)
def download_run_data(
    run_id: RunId, path: DataPath, request: Request, state: AppState = Depends(app_state)
) -> Response:
    """Download a file, or a folder as a tar.gz, of one of the run's mounts (its inputs, outputs,
    checkpoint dir: all readable by the run)."""
    found = run_data.target(state.read_sessions, run_id, _node(request).token, path, write=False)
    got = run_data.download(found)
    headers = {DATA_KIND: got.kind}
    if got.size is not None:
        headers["Content-Length"] = str(got.size)
    media = TARBALL if got.kind == run_data.FOLDER else OCTETS
    return StreamingResponse(got.body, media_type=media, headers=headers)


def _kind(request: Request) -> str:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media in (TARBALL, "application/x-gzip", "application/x-tar+gzip"):
        return run_data.FOLDER
    if media == OCTETS:
        return run_data.FILE
    raise CloudletError(
        "ValidationError",
        f"Content-Type must be {TARBALL} (a tar.gz to unpack into the folder) or {OCTETS} (one file); "
        f"got '{media or 'none'}'",
        "Content-Type",
    )


async def _spool(request: Request) -> IO[bytes]:
    """The body in a temporary file (kept in memory while small), written off the event loop and
    refused with 413 once it passes MAX_UPLOAD."""
    declared = request.headers.get("content-length", "")
    too_large = CloudletError("PayloadTooLarge", f"uploads are limited to {MAX_UPLOAD >> 30} GiB", status=413)
    if declared.isdigit() and int(declared) > MAX_UPLOAD:
        raise too_large
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_UPLOAD:
                raise too_large
            await run_in_threadpool(spool.write, chunk)
        spool.seek(0)
    except BaseException:
        spool.close()
        raise
    return spool


@router.put("/runs/{run_id}/data", status_code=201, responses=errors(413), openapi_extra=BODY)
@body_limit(MAX_UPLOAD)
async def upload_run_data(
    run_id: RunId, path: DataPath, request: Request, state: AppState = Depends(app_state)
) -> Response:
    """Upload into one of the run's writable mounts (outputs, checkpoint dir, default artifacts):
    a tar.gz is unpacked into the folder PATH names (files added or replaced, none removed), an
    octet stream is written as the file PATH names."""
    kind = _kind(request)
    token = _node(request).token
    found = await run_in_threadpool(
        lambda: run_data.target(state.read_sessions, run_id, token, path, write=True)
    )
    spool = await _spool(request)
    try:
        if kind == run_data.FOLDER:
            limits = replace(
                state.data.limits,
                max_unpacked_bytes=max(state.data.limits.max_unpacked_bytes, AGENT_UNPACKED_BYTES),
                max_unpacked_files=max(state.data.limits.max_unpacked_files, AGENT_UNPACKED_FILES),
            )
            await run_in_threadpool(run_data.upload_folder, found, spool, UnpackBudget(limits))
        else:
            await run_in_threadpool(run_data.upload_file, found, spool)
    finally:
        spool.close()
    return json_response({"run": run_id, "path": path, "kind": kind}, 201)
