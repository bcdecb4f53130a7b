"""The studio: a web UI served by the server under ``/studio``, a front door over the services
like the REST API (``docs/studio.md``).

URLs: ``/studio/`` goes to the caller's first workspace; a workspace's pages are under
``/studio/ws/{subscription}/{resource group}/{workspace}/`` (its Home; pages add ``jobs``,
``compute``, ``quota``…); ``/studio/signin``, ``/studio/signout``, ``/studio/link/{value}`` (a
one-time link from ``cloudlet studio open``) and ``/studio/static/…`` are the shell's own.
"""

from __future__ import annotations

import gzip
import hashlib
import mimetypes
import urllib.parse
from dataclasses import dataclass
from functools import cache

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse

from cloudlet.api.deps import AppState, Context, context, json_response
from cloudlet.domain import studio_paths
from cloudlet.domain.errors import CloudletError, not_found
from cloudlet.services.access import studio_sessions
from cloudlet.services.access.studio_sessions import Issued
from cloudlet.services.core.context import Caller
from cloudlet.studio import shell
from cloudlet.studio.pages import (
    admin,
    admin_more,
    admin_teams,
    batch_endpoints,
    components,
    compute,
    data,
    endpoints,
    environments,
    home,
    job_graphs,
    job_live,
    job_page,
    job_streams,
    jobs,
    models,
    quota,
    usage,
)
from cloudlet.studio.session import (
    PREFIX,
    StudioPublicRoute,
    StudioRoute,
    app_state,
    clear_cookie,
    form_of,
    limits,
    secure,
    set_cookie,
    signed,
)

# Their order is the navigation's.
PAGES = (home, jobs, components, environments, models, data, endpoints, compute, quota, usage, admin)
# Pages reached from a page, not from the navigation.
SUBPAGES = (job_page, job_live, job_streams, job_graphs, batch_endpoints, admin_more, admin_teams)
shell.NAV[:] = [page.NAV for page in PAGES]

public = APIRouter(prefix=PREFIX, route_class=StudioPublicRoute, include_in_schema=False)
router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)


# -- sign-in and out ----------------------------------------------------------------------------
def safe_next(target: str | None) -> str:
    """Only ever back into the studio (never to another site: ``studio_paths.target``); else Home."""
    return studio_paths.target(target) or f"{PREFIX}/"


def signin_form(request: Request, next_url: str, message: str = "", status: int = 200) -> HTMLResponse:
    return shell.render_html(request, "signin.html", None, status=status, next_url=next_url, message=message)


@public.get("/signin")
def signin_page(request: Request, next: str | None = None) -> HTMLResponse:
    return signin_form(request, safe_next(next))


def _sign_in(state: AppState, key: str) -> tuple[Caller, Issued]:
    with state.sessions() as session:
        return studio_sessions.sign_in(session, key, state.token_secret, limits())


@public.post("/signin")
async def signin(request: Request) -> Response:
    form = await form_of(request)
    next_url = safe_next(form.get("next"))
    try:
        _, issued = await run_in_threadpool(_sign_in, app_state(request), form.get("api_key", "").strip())
    except CloudletError as exc:
        if exc.status != 401:
            raise
        return await run_in_threadpool(signin_form, request, next_url, exc.message, 401)
    response = RedirectResponse(next_url, status_code=303)
    set_cookie(response, request, issued.value, limits().absolute_s)
    return response


def _redeem(state: AppState, value: str) -> tuple[Caller, Issued]:
    with state.sessions() as session:
        return studio_sessions.redeem_link(session, value, limits())


@public.get("/link/{value}")
async def follow_link(request: Request, value: str, next: str | None = None) -> Response:
    """Redeem a one-time link, then go on to NEXT (a studio page: ``signin-links`` made the link
    for it, e.g. ``job show --web``) or Home. NEXT is not part of the secret, so it is checked
    again here: only ever a studio path."""
    next_url = safe_next(next)
    try:
        _, issued = await run_in_threadpool(_redeem, app_state(request), value)
    except CloudletError as exc:
        if exc.status != 401:
            raise
        return await run_in_threadpool(signin_form, request, next_url, exc.message, 401)
    # Not a redirect: see signed_in.html (a link is often followed from another site).
    response = shell.render_html(request, "signed_in.html", None, next_url=next_url)
    set_cookie(response, request, issued.value, limits().absolute_s)
    return response


def _sign_out(state: AppState, id_hash: str) -> None:
    with state.sessions() as session:
        studio_sessions.sign_out(session, id_hash)


@router.post("/signout")
async def signout(request: Request) -> Response:
    await run_in_threadpool(_sign_out, app_state(request), signed(request).id_hash)
    response = RedirectResponse(f"{PREFIX}/signin", status_code=303)
    clear_cookie(response, request)
    return response


# -- where to start ----------------------------------------------------------------------------
@router.get("/")
def start(ctx: Context = Depends(context)) -> Response:
    """The caller's first workspace (``default`` first), or a page saying there is none."""
    choices = shell.visible_workspaces(ctx)
    if choices:
        return RedirectResponse(choices[0].url, status_code=303)
    return shell.render(ctx, "no_workspace.html")


@public.get("")
def bare_prefix() -> Response:
    return RedirectResponse(f"{PREFIX}/", status_code=307)


# -- static files -------------------------------------------------------------------------------
@dataclass(frozen=True)
class StaticFile:
    body: bytes
    gzipped: bytes
    media_type: str
    etag: str


@cache
def _static(name: str) -> StaticFile | None:
    path = (shell.STATIC / name).resolve()
    if not path.is_relative_to(shell.STATIC.resolve()) or not path.is_file():
        return None
    body = path.read_bytes()
    media_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if media_type in ("text/javascript", "application/javascript"):
        media_type = "text/javascript; charset=utf-8"
    elif media_type.startswith("text/") or media_type == "image/svg+xml":
        media_type += "; charset=utf-8"
    etag = f'"{hashlib.sha256(body).hexdigest()[:16]}"'
    return StaticFile(body, gzip.compress(body, 9, mtime=0), media_type, etag)


LONG_CACHE = "public, max-age=31536000, immutable"


@public.get("/static/{name:path}")
def static(name: str, request: Request) -> Response:
    """The studio's own files and its vendored bundles, gzip-compressed once; a URL with its
    content hash (``shell.static_url``) is cached for a year."""
    found = _static(name)
    if found is None:
        raise not_found("File", name)
    # A content-hashed URL (``?v=``) never changes; a plain one (a module's own import) is revalidated.
    cache_control = LONG_CACHE if "v" in request.query_params else "no-cache"
    headers = {"Cache-Control": cache_control, "ETag": found.etag, "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") == found.etag:
        return Response(status_code=304, headers=headers)
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(found.gzipped, media_type=found.media_type, headers=headers)
    return Response(found.body, media_type=found.media_type, headers=headers)


# -- everything else under /studio --------------------------------------------------------------
@router.api_route("/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def unknown(rest: str) -> Response:
    raise not_found("Page", f"{PREFIX}/{urllib.parse.quote(rest)}")


async def browser_root(request: Request) -> Response:
    """``/``: a browser goes to the studio; an API client gets the usual 404."""
    if "text/html" in request.headers.get("accept", ""):
        return secure(RedirectResponse(f"{PREFIX}/", status_code=303))
    return json_response(not_found("Resource", "/").to_body(), 404)


def install(app: FastAPI) -> None:
    """Mount the studio on APP: its routes after the API's (no path of theirs overlaps), the
    catch-all last."""
    routes = [*public.routes]
    for page in (*PAGES, *SUBPAGES):
        routes.extend(page.router.routes)
    routes.extend(router.routes)  # holds the catch-all: last
    app.router.routes.extend(routes)
    app.add_api_route("/", browser_root, methods=["GET"], include_in_schema=False)
