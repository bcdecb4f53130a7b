"""The authenticated reverse proxy to compute instances' apps, and the browser sign-in.

``/instances/<name>/<app>/…`` (HTTP and WebSocket) reaches app ``<app>`` of instance ``<name>``.
Instance names are unique across the installation, so the URL needs no workspace. Only the
instance's owner gets through: no credential → 401 (a browser gets the sign-in form), a caller
with a role on the workspace who is not the owner → 403, a caller without one → 404.

Credentials: ``Authorization: Bearer <API key or clt_ token>`` (as from ``cloudlet auth token``)
or the sign-in cookie. ``POST /signin`` with an API key sets ``cloudlet_signin``: an HMAC-signed
token (``services/access/identity.py``) under a key derived for cookies only, so it is no API
credential; HttpOnly, SameSite=Lax, Path=/instances/, short-lived. The app never sees either
credential; the proxy adds the app's own token, which only the control plane knows.
"""

from __future__ import annotations

import html
import time
import urllib.parse
from typing import Any

from fastapi import APIRouter, Depends, Request, WebSocket
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import Headers

from cloudlet.api.body_limits import body_limit
from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.instance_proxy import SIGNIN_COOKIE, AppGone, Forwarder, Target
from cloudlet.domain import public_url
from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.node_address import node_address
from cloudlet.domain.errors import CloudletError, forbidden, not_found
from cloudlet.domain.redirects import local_target
from cloudlet.services.access import identity, instance_signin
from cloudlet.services.compute import instance_activity
from cloudlet.services.compute import instances as instance_service
from cloudlet.services.core.context import Caller

router = APIRouter(tags=["instances"])
forwarder = Forwarder()
SIGNIN_LIFETIME_S = instance_signin.LIFETIME_S
COOKIE_PATH = instance_signin.COOKIE_PATH
RESOLVE_TTL_S = 2.0  # a page load makes hundreds of requests: resolve each caller+app once
_resolved: dict[tuple[str, str, str], tuple[float, Target]] = {}


cookie_secret = instance_signin.cookie_secret  # the studio mints the same cookie (one-click JupyterLab)


# -- sign-in ----------------------------------------------------------------------------------
def _safe_next(target: str | None) -> str:
    """Only redirect into the proxy (never to another site: ``redirects.local_target``)."""
    return local_target(target, COOKIE_PATH) or COOKIE_PATH


def signin_page(next_url: str, message: str = "", status: int = 200) -> HTMLResponse:
    note = f'<p class="error">{html.escape(message)}</p>' if message else ""
    body = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>Sign in to cloudlet</title>
<style>body{{font-family:sans-serif;max-width:28em;margin:4em auto}}input{{width:100%;padding:.4em}}
.error{{color:#b00}}</style></head>
<body><h1>Sign in to cloudlet</h1>{note}
<p>Paste your API key (<code>cloudlet user key-create</code>, or <code>$CLOUDLET_HOME/credentials</code>).
It is checked once; the browser then holds a sign-in cookie for {SIGNIN_LIFETIME_S // 3600} hours.</p>
<form method="post" action="/signin">
<input type="hidden" name="next" value="{html.escape(next_url)}">
<label>API key <input type="password" name="api_key" autocomplete="off" autofocus></label>
<p><button type="submit">Sign in</button></p>
</form></body></html>"""
    return HTMLResponse(body, status_code=status)


@router.get("/signin", include_in_schema=False)
async def signin_form(next: str | None = None) -> HTMLResponse:
    return signin_page(_safe_next(next))


@router.post("/signin", include_in_schema=False)
async def signin(request: Request, state: AppState = Depends(app_state)) -> Response:
    form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"))
    key = (form.get("api_key") or [""])[0].strip()
    next_url = _safe_next((form.get("next") or [""])[0])
    try:
        caller = await run_in_threadpool(_authenticate_key, state, key)
    except CloudletError as exc:
        return signin_page(next_url, exc.message, status=401)
    # Tied to the key it was made with: revoking that key (or disabling the user) ends the sign-in.
    value, _ = await run_in_threadpool(_mint_cookie, state, caller)
    response = RedirectResponse(next_url, status_code=303)
    response.set_cookie(
        SIGNIN_COOKIE,
        value,
        max_age=SIGNIN_LIFETIME_S,
        path=COOKIE_PATH,
        httponly=True,
        samesite="lax",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/signout", include_in_schema=False)
async def signout() -> Response:
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(SIGNIN_COOKIE, path=COOKIE_PATH)
    return response


def _mint_cookie(state: AppState, caller: Caller) -> tuple[str, int]:
    with state.read_sessions() as session:
        return instance_signin.mint(session, caller, state.token_secret)


def _authenticate_key(state: AppState, key: str) -> Caller:
    if not key.startswith(identity.KEY_PREFIX):
        raise CloudletError("AuthenticationFailed", "that is not a cloudlet API key (clk_…)", status=401)
    with state.read_sessions() as session:
        return identity.authenticate(session, key, state.token_secret)


# -- who is calling, and where to ---------------------------------------------------------------
def credential(headers: Headers, cookies: dict[str, str]) -> tuple[str, str] | None:
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return "bearer", token.strip()
    if cookies.get(SIGNIN_COOKIE):
        return "cookie", cookies[SIGNIN_COOKIE]
    return None


def _caller(session: Any, state: AppState, kind: str, value: str) -> Caller:
    if kind == "bearer":
        return identity.authenticate(session, value, state.token_secret)
    # A sign-in cookie is a token signed with the cookie key: checked like an access token (its
    # key still valid, its user enabled), and useless as an API credential.
    return identity.authenticate(session, value, cookie_secret(state.token_secret))


def _cached_target(value: str, name: str, app: str) -> Target | None:
    hit = _resolved.get((value, name, app))
    return hit[1] if hit is not None and hit[0] > time.monotonic() else None


async def resolve_soon(state: AppState, kind: str, value: str, name: str, app: str) -> Target:
    """``resolve``, answered on the event loop when the answer is cached (most of a page load's
    requests), else in the thread pool (it reads the store)."""
    cached = _cached_target(value, name, app)
    if cached is not None:
        return cached
    target: Target = await run_in_threadpool(resolve, state, kind, value, name, app)
    return target


def resolve(state: AppState, kind: str, value: str, name: str, app: str) -> Target:
    """The app's address for this caller, or the refusal (401/403/404/409) that says why not."""
    key, now = (value, name, app), time.monotonic()
    cached = _cached_target(value, name, app)
    if cached is not None:
        return cached
    with state.read_sessions() as session:
        caller = _caller(session, state, kind, value)
        compute = instance_service.find_by_name(session, name)
        if compute is None or not caller.can(compute.workspace_id, Access.READ):
            raise not_found("ComputeInstance", name)
        if compute.owner != caller.name:
            raise forbidden(f"only the owner '{compute.owner}' of instance '{name}' may open its apps", name)
        node = instance_activity.current_node(session, compute)
        info = (node.apps or {}).get(app) if node is not None else None
        if node is None or info is None or info.get("state") != "ready":
            if node is not None and info is None:
                raise not_found("App", app)
            raise CloudletError(
                "InstanceNotRunning",
                f"instance '{name}' is {compute.state}; its apps are reachable once it is Running "
                f"(cloudlet compute start --name {name})",
                name,
                409,
            )
        target = Target(
            # Where the proxy reaches the node (its agent said), not where the app binds on it.
            str(node_address(node.resources) or info.get("address") or ""),
            int(info["port"]),
            instance_service.app_token(state.token_secret, node.id),
        )
    if len(_resolved) > 10_000:
        _resolved.clear()
    _resolved[key] = (now + RESOLVE_TTL_S, target)
    return target


def same_origin(headers: Headers, scheme: str, public: str = "") -> bool:
    """A browser's cross-site request carries another Origin: refuse it (the cookie is Lax, this
    is the second wall). PUBLIC: the public URL, the origin of pages served through a reverse
    proxy whatever Host it passes on."""
    origin = headers.get("origin")
    if not origin:
        return True
    parsed = urllib.parse.urlsplit(origin)
    if parsed.netloc == headers.get("host") and parsed.scheme in (scheme, scheme.replace("ws", "http")):
        return True
    return public_url.is_its_origin(public, origin)


def refusal(exc: CloudletError, path: str, accept: str) -> Response:
    if exc.status == 401 and "text/html" in accept:
        return signin_page(path, "Sign in to open this instance.", status=401)
    return json_response(exc.to_body(), exc.status)


# -- the proxy --------------------------------------------------------------------------------
PROXY_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
# What one request to an instance's app may carry (read whole before it is forwarded):
# JupyterLab sends a large file in 1 MiB pieces, a notebook saves as one JSON document.
PROXY_MAX_BODY = 100 << 20


@router.api_route("/instances/{name}/{app}/{path:path}", methods=PROXY_METHODS, include_in_schema=False)
@body_limit(PROXY_MAX_BODY)
async def proxy_http(name: str, app: str, path: str, request: Request) -> Response:
    state: AppState = request.app.state.cloudlet
    accept = request.headers.get("accept", "")
    if not same_origin(request.headers, request.url.scheme, state.public.value):
        return json_response(forbidden("cross-origin requests to instance apps are refused").to_body(), 403)
    found = credential(request.headers, request.cookies)
    try:
        if found is None:
            raise CloudletError(
                "AuthenticationFailed",
                "sign in at /signin or send 'Authorization: Bearer <key or token>'",
                status=401,
            )
        target = await resolve_soon(state, found[0], found[1], name, app)
        instance_activity.note_request(name, request.method, accept)  # idle shutdown counts it
        try:
            return await forwarder.http(request, target)
        except AppGone:  # a cached address of a node that is gone: look again, once
            _resolved.pop((found[1], name, app), None)
            target = await run_in_threadpool(resolve, state, found[0], found[1], name, app)
            try:
                return await forwarder.http(request, target)
            except AppGone as exc:
                return Response(f"the instance's app did not answer: {exc}", 502, media_type="text/plain")
    except CloudletError as exc:
        return refusal(exc, request.url.path, accept)


@router.get("/instances/{name}", include_in_schema=False)
@router.get("/instances/{name}/", include_in_schema=False)
async def instance_home(name: str) -> Response:
    """The instance's front door: JupyterLab."""
    return RedirectResponse(instance_service.app_base_url(name) + "lab", status_code=302)


@router.get("/instances/{name}/{app}", include_in_schema=False)
async def app_home(name: str, app: str) -> Response:
    return RedirectResponse(instance_service.app_base_url(name, app), status_code=302)


@router.websocket("/instances/{name}/{app}/{path:path}")
async def proxy_websocket(websocket: WebSocket, name: str, app: str, path: str) -> None:
    state: AppState = websocket.app.state.cloudlet
    if not same_origin(websocket.headers, websocket.url.scheme, state.public.value):
        await websocket.send_denial_response(
            json_response(forbidden("cross-origin WebSocket").to_body(), 403)
        )
        return
    found = credential(websocket.headers, websocket.cookies)
    try:
        if found is None:
            raise CloudletError("AuthenticationFailed", "no credential", status=401)
        target = await resolve_soon(state, found[0], found[1], name, app)
    except CloudletError as exc:
        await websocket.send_denial_response(json_response(exc.to_body(), exc.status))
        return
    instance_activity.note_request(name, websocket=True)
    await forwarder.websocket(websocket, target)
