"""An online endpoint's writes from its page: show the keys (as the REST ``listKeys``/``token``,
which need write access), regenerate one, send a test request through the gateway, save the
traffic and mirror weights, delete a deployment or the endpoint.

Each is one service call; the services decide who may (a Reader's hand-posted form is a 403) and
what is valid (the traffic rule is the domain's ``check_traffic``: a refusal comes back at the
form, status 400).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.services.endpoints import online_endpoints as online
from cloudlet.services.endpoints import online_invoke
from cloudlet.services.endpoints import online_writes as writes
from cloudlet.studio import shell
from cloudlet.studio.pages.endpoint_view import render_page
from cloudlet.studio.session import StudioRoute, form_of, posted

router = APIRouter(route_class=StudioRoute, include_in_schema=False)  # under endpoints.py's prefix
WS = "/ws/{sub}/{rg}/{ws}/endpoints"
MAX_TEST_BODY = 1_572_864  # the gateway's own limit (1.5 MiB, as Azure's)


def _writable(ctx: Context, sub: str, rg: str, ws: str, name: str) -> tuple[Any, Any, Any]:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    return workspace, ref, online.get_endpoint(ctx.session, workspace, name)


def _tab_url(ref: Any, name: str, tab: str) -> str:
    return shell.ws_url(ref, "endpoints", name) + f"?tab={tab}"


# -- keys -------------------------------------------------------------------------------------
def _keys(ctx: Context, sub: str, rg: str, ws: str, name: str) -> Response:
    workspace, ref, row = _writable(ctx, sub, rg, ws, name)
    if row.spec.get("auth_mode") == "aml_token":
        shown = {"token": online.token(ctx.state.token_secret, row)}
    else:
        shown = {"keys": online.keys(row)}
    return render_page(ctx, ref, workspace, row, "consume", shown=shown)


@router.post(WS + "/{name}/keys")
def show_keys(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    """The Consume tab with the endpoint's keys (or a fresh token) shown: asked for, never by default."""
    return _keys(ctx, sub, rg, ws, name)


def _regenerate(ctx: Context, sub: str, rg: str, ws: str, name: str, key_type: str) -> Response:
    _, ref, row = _writable(ctx, sub, rg, ws, name)
    writes.regenerate(ctx.session, ref, row, key_type, ctx.caller.name)
    return RedirectResponse(_tab_url(ref, name, "consume") + "&regenerated=" + key_type.capitalize(), 303)


@router.post(WS + "/{name}/regenerate")
async def regenerate_key(
    request: Request, sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)
) -> Response:
    form = await form_of(request)
    response: Response = await run_in_threadpool(
        _regenerate, ctx, sub, rg, ws, name, form.get("key_type", "")
    )
    return response


# -- test -------------------------------------------------------------------------------------
def _test(ctx: Context, sub: str, rg: str, ws: str, name: str, form: dict[str, str]) -> Response:
    workspace, ref, row = _writable(ctx, sub, rg, ws, name)
    body = form.get("body", "")
    pinned = form.get("deployment", "").strip() or None
    if len(body.encode()) > MAX_TEST_BODY:
        raise validation_error("body", f"the request is over {MAX_TEST_BODY} bytes")
    # Sent by the server to itself: at the address it is bound at, not the public one (a proxy in
    # front of it may not be reachable from its own host).
    own = ctx.state.url.value
    result = online_invoke.invoke(own, ref, row, ctx.state.token_secret, body.encode(), pinned)
    return render_page(
        ctx, ref, workspace, row, "test", result=result, test_body=body, test_deployment=pinned or ""
    )


@router.post(WS + "/{name}/test")
async def send_test(
    request: Request, sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)
) -> Response:
    """The Test tab's request: sent through the gateway with the endpoint's credential, as a
    client's; its status, latency and body (escaped) come back in the tab."""
    return await posted(request, _test, ctx, sub, rg, ws, name)


# -- traffic ----------------------------------------------------------------------------------
def _weights(form: dict[str, str], prefix: str) -> dict[str, int]:
    weights: dict[str, int] = {}
    for key, raw in form.items():
        if not key.startswith(prefix):
            continue
        deployment = key.removeprefix(prefix)
        try:
            weights[deployment] = int(raw.strip() or "0")
        except ValueError:
            raise validation_error(
                f"{prefix.rstrip(':')}.{deployment}", "a weight is a whole number from 0 to 100"
            ) from None
    return weights


def _traffic(ctx: Context, sub: str, rg: str, ws: str, name: str, form: dict[str, str]) -> Response:
    workspace, ref, row = _writable(ctx, sub, rg, ws, name)
    try:
        traffic, mirror = _weights(form, "traffic:"), _weights(form, "mirror:")
        mirror = {k: v for k, v in mirror.items() if v > 0}  # 0: not mirrored
        writes.update_traffic(ctx.session, ref, row, ctx.caller.name, traffic, mirror)
    except CloudletError as exc:
        if exc.status != 400:
            raise
        return render_page(ctx, ref, workspace, row, "traffic", 400, traffic_error=exc, traffic_form=form)
    return RedirectResponse(_tab_url(ref, name, "traffic") + "&saved=1", 303)


@router.post(WS + "/{name}/traffic")
async def save_traffic(
    request: Request, sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)
) -> Response:
    """The Traffic tab's weights (``traffic:<deployment>``, ``mirror:<deployment>``): the service
    checks them by the endpoint's rule and refuses a bad split whatever the page allowed."""
    return await posted(request, _traffic, ctx, sub, rg, ws, name)


# -- delete -----------------------------------------------------------------------------------
@router.post(WS + "/{name}/delete")
def delete_endpoint(sub: str, rg: str, ws: str, name: str, ctx: Context = Depends(context)) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    writes.delete_endpoint(ctx.session, ref, workspace, name, ctx.caller.name)
    return RedirectResponse(shell.ws_url(ref, "endpoints"), 303)


@router.post(WS + "/{name}/deployments/{deployment}/delete")
def delete_deployment(
    sub: str, rg: str, ws: str, name: str, deployment: str, ctx: Context = Depends(context)
) -> Response:
    """A deployment's delete; one that takes live traffic is refused (set its weight to 0 first)."""
    _, ref, row = _writable(ctx, sub, rg, ws, name)
    writes.delete_deployment(ctx.session, ref, row, deployment, ctx.caller.name)
    return RedirectResponse(shell.ws_url(ref, "endpoints", name), 303)
