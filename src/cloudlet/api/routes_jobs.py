"""Native REST routes for jobs, code snapshots, datastores and cluster nodes."""

from __future__ import annotations

import hashlib
import time
from typing import Any

from fastapi import APIRouter, Body, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select

from cloudlet.api.deps import AppState, Context, app_state, bearer_token, context, json_response
from cloudlet.control.dispatch_batcher import Answer, Round
from cloudlet.domain.errors import CloudletError, not_found
from cloudlet.domain.nodes import NodeEvent
from cloudlet.domain.roles import Access
from cloudlet.services import computes, dispatch, identity, workspaces
from cloudlet.services import jobs as job_service
from cloudlet.services import nodes as node_service
from cloudlet.services.clock import utcnow
from cloudlet.services.context import WorkspaceRef
from cloudlet.services.storage import folder_size, pack_path, unpack_tar
from cloudlet.store.schema import CodeAsset, Node, Workspace

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["jobs"])
MAX_UPLOAD = 2 << 30


def _workspace(ctx: Context, sub: str, rg: str, ws: str, needed: Access) -> tuple[WorkspaceRef, Workspace]:
    ref = WorkspaceRef(sub, rg, ws)
    return ref, workspaces.resolve(ctx.session, ref, ctx.caller, needed)


def _base_url(ctx: Context) -> str:
    return str(ctx.request.base_url).rstrip("/")


# -- code snapshots ---------------------------------------------------------------------------
@router.api_route(WS + "/codes/{digest}", methods=["GET", "HEAD"])
def show_code(sub: str, rg: str, ws: str, digest: str, ctx: Context = Depends(context)) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    row = ctx.session.scalar(
        select(CodeAsset).where(CodeAsset.workspace_id == workspace.id, CodeAsset.hash == digest)
    )
    if row is None or not ctx.state.data.code(workspace.id, digest).exists():
        raise not_found("Code", digest)
    return json_response({"hash": row.hash, "size": row.size, "created_on": row.created_on.isoformat()})


@router.put(WS + "/codes/{digest}")
async def upload_code(
    sub: str, rg: str, ws: str, digest: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    body = await _read_body(request)
    return await _run(_store_code, ctx, sub, rg, ws, digest, body)


def _store_code(ctx: Context, sub: str, rg: str, ws: str, digest: str, body: bytes) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    if hashlib.sha256(body).hexdigest() != digest:
        raise CloudletError(
            "HashMismatch",
            "the uploaded bytes do not hash to the snapshot name; the name must "
            "be the SHA-256 of the tar.gz body",
            "digest",
        )
    path = ctx.state.data.code(workspace.id, digest)
    existing = ctx.session.scalar(
        select(CodeAsset).where(CodeAsset.workspace_id == workspace.id, CodeAsset.hash == digest)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".part")
    tmp.write_bytes(body)
    tmp.replace(path)
    if existing is None:
        ctx.session.add(
            CodeAsset(workspace_id=workspace.id, hash=digest, size=len(body), created_on=utcnow())
        )
    ctx.commit()
    return json_response({"hash": digest, "size": len(body)}, 200 if existing else 201)


# -- datastores -------------------------------------------------------------------------------
@router.api_route(WS + "/datastores/{datastore}/paths/{path:path}", methods=["GET", "HEAD"])
def show_path(
    sub: str, rg: str, ws: str, datastore: str, path: str, ctx: Context = Depends(context)
) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    target = ctx.state.data.datastore_path(workspace.id, datastore, path)
    if not target.exists():
        raise not_found("Path", f"azureml://datastores/{datastore}/paths/{path}")
    kind = "folder" if target.is_dir() else "file"
    return json_response({"path": path, "kind": kind, "size": folder_size(target)})


@router.put(WS + "/datastores/{datastore}/paths/{path:path}")
async def upload_path(
    sub: str, rg: str, ws: str, datastore: str, path: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    body = await _read_body(request)
    return await _run(_store_path, ctx, sub, rg, ws, datastore, path, body)


def _store_path(ctx: Context, sub: str, rg: str, ws: str, datastore: str, path: str, body: bytes) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    target = ctx.state.data.datastore_path(workspace.id, datastore, path)
    try:
        unpack_tar(body, target)
    except Exception as exc:
        raise CloudletError("InvalidArchive", f"the body must be a tar.gz archive ({exc})", "body") from None
    uri = f"azureml://datastores/{datastore}/paths/{path.strip('/')}"
    return json_response({"path": path, "uri": uri}, 201)


@router.get(WS + "/datastores/{datastore}/download/{path:path}")
def download_path(
    sub: str, rg: str, ws: str, datastore: str, path: str, ctx: Context = Depends(context)
) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    target = ctx.state.data.datastore_path(workspace.id, datastore, path)
    if not target.exists():
        raise not_found("Path", path)
    return Response(pack_path(target), media_type="application/gzip")


# -- jobs -------------------------------------------------------------------------------------
@router.put(WS + "/jobs/{name}", status_code=201)
async def create_job(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    request: Request,
    body: Any = Body(default=None),
    state: AppState = Depends(app_state),
) -> Response:
    token = bearer_token(request)
    prepared = job_service.prepare(body, name)  # pure: validated before the store is touched
    ref, base_url = WorkspaceRef(sub, rg, ws), str(request.base_url).rstrip("/")

    def work(round_: Round) -> Answer:
        session = round_.session
        caller = identity.authenticate(session, token, state.token_secret)
        workspace = workspaces.resolve(session, ref, caller, Access.WRITE, round_.memo)
        job, target = job_service.submit(
            session, workspace, name, prepared, caller, state.data, round_.memo, check_name=round_.alone
        )
        if target is not None:  # a cluster with an idle node starts the job now, not at the next pass
            round_.fed[target.id] = target
        # A job still queued wakes the autoscaler, unless its target already was the cluster's
        # maximum (it cannot raise it: at a busy cluster's top this saves a pass per submission).
        at_max = target is not None and (target.target_node_count or 0) >= target.spec.get("max_instances", 1)
        round_.rescale_if.append(lambda: job.status == job_service.QUEUED and not at_max)
        return lambda _placed: job_service.render(job, ref, [], base_url)  # after commit: agent starts

    return json_response(await state.dispatch_batcher().apply(work), 201)


@router.get(WS + "/jobs/{name}")
def show_job(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    return json_response(job_service.render(job, ref, job_service.runs_of(ctx.session, job), _base_url(ctx)))


@router.get(WS + "/jobs")
def list_jobs(
    sub: str,
    rg: str,
    ws: str,
    status: str | None = None,
    compute: str | None = None,
    ctx: Context = Depends(context),
) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    rows = job_service.list_jobs(ctx.session, workspace, status, compute)
    return json_response({"value": [job_service.render(j, ref, [], _base_url(ctx)) for j in rows]})


@router.post(WS + "/jobs/{name}/cancel", status_code=202)
def cancel_job(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    ref, workspace = _workspace(ctx, sub, rg, ws, Access.WRITE)
    job = job_service.get(ctx.session, workspace, name)
    wake = dispatch.cancel_job(ctx.session, job)
    rendered = job_service.render(job, ref, job_service.runs_of(ctx.session, job), _base_url(ctx))
    ctx.commit(wake, rescale=True)
    return json_response(rendered, 202)


@router.get(WS + "/jobs/{name}/logs")
def job_logs(
    sub: str,
    rg: str,
    ws: str,
    name: str,
    file: str = "user_logs/std_log.txt",
    offset: int = 0,
    attempt: int | None = None,
    ctx: Context = Depends(context),
) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    return json_response(job_service.read_log(ctx.state.data, job, attempt, file, offset))


@router.get(WS + "/jobs/{name}/outputs/{output}")
def job_output(
    sub: str, rg: str, ws: str, name: str, output: str, ctx: Context = Depends(context)
) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    job = job_service.get(ctx.session, workspace, name)
    if output not in (job.spec.get("outputs") or {}):
        raise not_found("Output", output)
    path = ctx.state.data.job_output(workspace.id, job.name, output)
    path.mkdir(parents=True, exist_ok=True)
    return Response(pack_path(path), media_type="application/gzip")


# -- nodes ------------------------------------------------------------------------------------
@router.get(WS + "/computes/{name}/nodes")
def list_nodes(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    _, workspace = _workspace(ctx, sub, rg, ws, Access.READ)
    compute = computes.get(ctx.session, workspace, name)
    return json_response(
        {"nodes": [node_service.render(n) for n in node_service.live_nodes(ctx.session, compute.id)]}
    )


@router.post(WS + "/computes/{name}/evict")
def evict_node(
    sub: str, rg: str, ws: str, name: str, body: Any = Body(default=None), ctx: Context = Depends(context)
) -> Response:
    """Evict a low-priority node (operators and tests, C12): its jobs are requeued."""
    _, workspace = _workspace(ctx, sub, rg, ws, Access.MANAGE)
    compute = computes.get(ctx.session, workspace, name)
    node_id = (body or {}).get("node_id")
    node = ctx.session.get(Node, node_id) if node_id else None
    if node is None or node.compute_id != compute.id:
        raise CloudletError(
            "NodeNotFound",
            f"'{name}' has no node '{node_id}'; see `cloudlet compute list-nodes`",
            "node_id",
            404,
        )
    if node.tier != "low_priority":
        raise CloudletError(
            "NotLowPriority",
            f"node {node_id} is dedicated; only low-priority nodes are evicted",
            "node_id",
            409,
        )
    now = time.time()
    node.error = {"code": "Preempted", "message": "evicted by an operator"}
    node_service.advance(node, NodeEvent.PREEMPT, now)
    wake = dispatch.fail_runs_on_node(ctx.session, node, "preempted", now)
    ctx.commit([*wake, node.id], rescale=True)
    return json_response(node_service.render(node))


async def _read_body(request: Request) -> bytes:
    body = await request.body()
    if len(body) > MAX_UPLOAD:
        raise CloudletError("PayloadTooLarge", "uploads are limited to 2 GiB", status=413)
    return body


async def _run(fn: Any, *args: Any) -> Response:
    result: Response = await run_in_threadpool(fn, *args)
    return result
