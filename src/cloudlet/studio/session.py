"""Who is using the studio, and the walls around every studio response.

``StudioRoute`` (signed in) and ``StudioPublicRoute`` (sign-in form, static files) are the studio's
route classes, as ``UserRoute`` is the API's (``api/routing.py``, whose plumbing they reuse: the
request's store session, closed in the endpoint's thread). A signed-in route resolves the
``cloudlet_studio`` cookie to the same ``Caller`` the REST API uses (``services/access/studio_sessions``,
revalidated as access tokens are), and refuses a state-changing request without the session's
CSRF token (form field ``csrf_token`` or header ``X-CSRF-Token``) or from another origin. Every
response gets the security headers; every failure becomes a studio page, never a stack trace.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse

from cloudlet.api.deps import AppState
from cloudlet.api.routing import _CloudletRoute
from cloudlet.domain import public_url
from cloudlet.domain.errors import CloudletError, forbidden
from cloudlet.services.access import audit, studio_sessions
from cloudlet.services.access.studio_sessions import Limits, Signed
from cloudlet.studio.shell import PREFIX, error_page

log = logging.getLogger("cloudlet.studio")

COOKIE = "cloudlet_studio"
CSRF_FIELD = "csrf_token"
CSRF_HEADER = "x-csrf-token"
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
_limits: Limits | None = None

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def limits() -> Limits:
    """The session limits, read from the environment once per process."""
    global _limits
    if _limits is None:
        _limits = Limits.from_env()
    return _limits


def app_state(request: Request) -> AppState:
    state: AppState = request.app.state.cloudlet
    return state


def signed(request: Request) -> Signed:
    """The request's session (set by ``StudioRoute`` before the endpoint runs)."""
    found: Signed = request.state.studio
    return found


async def form_of(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (first value each), parsed once per request."""
    cached: dict[str, str] | None = getattr(request.state, "studio_form", None)
    if cached is None:
        raw = (await request.body()).decode("utf-8", "replace")
        cached = {k: v[0] for k, v in urllib.parse.parse_qs(raw, keep_blank_values=True).items()}
        request.state.studio_form = cached
    return cached


async def posted(request: Request, handler: Callable[..., Response], *args: Any) -> Response:
    """HANDLER(*ARGS, form) run in the threadpool (its store and file calls stay off the event
    loop), the form being REQUEST's posted fields: the body of a studio form's POST route."""
    form = await form_of(request)
    response: Response = await run_in_threadpool(handler, *args, form)
    return response


async def form_lists_of(request: Request) -> dict[str, list[str]]:
    """An urlencoded form's fields with every value of each (ticked checkboxes of one name)."""
    raw = (await request.body()).decode("utf-8", "replace")  # Starlette keeps the body: read once
    return urllib.parse.parse_qs(raw, keep_blank_values=True)


def same_origin(request: Request) -> bool:
    """A browser says where a request comes from (Sec-Fetch-Site, Origin): another site's is
    refused whatever it carries."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    parts = urllib.parse.urlsplit(origin)
    if parts.scheme == request.url.scheme and parts.netloc == request.headers.get("host"):
        return True
    # Through a reverse proxy the page's origin is the public URL (docs/studio.md, "Behind a
    # reverse proxy"), which the Host the proxy passes on need not name.
    return public_url.is_its_origin(app_state(request).public.value, origin)


def set_cookie(response: Response, request: Request, value: str, max_age: float) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=int(max_age),
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(
        COOKIE, path=PREFIX, httponly=True, samesite="strict", secure=request.url.scheme == "https"
    )


def _check(state: AppState, value: str) -> Signed:
    with state.read_sessions() as session:
        return studio_sessions.check(session, value, limits())


def _touch(state: AppState, id_hash: str) -> None:
    with state.sessions() as session:
        studio_sessions.touch(session, id_hash)


async def resolve_session(request: Request) -> Signed:
    """The cookie's session as it stands now, or a 401 (``studio_sessions.signed_out``)."""
    value = request.cookies.get(COOKIE)
    if not value:
        raise studio_sessions.signed_out()
    state = app_state(request)
    found = await run_in_threadpool(_check, state, value)
    if found.touch_due:
        await run_in_threadpool(_touch, state, found.id_hash)
    request.state.studio = found
    request.state.caller = found.caller
    return found


async def check_csrf(request: Request, found: Signed) -> None:
    if request.method in SAFE_METHODS:
        return
    if not same_origin(request):
        raise forbidden("a studio form may only be sent from the studio's own pages")
    sent = request.headers.get(CSRF_HEADER)
    if sent is None and request.headers.get("content-type", "").startswith(
        "application/x-www-form-urlencoded"
    ):
        sent = (await form_of(request)).get(CSRF_FIELD)
    if not studio_sessions.csrf_matches(found.csrf_token, sent):
        raise forbidden("the form's CSRF token is missing or stale; reload the page and try again")


def signin_redirect(request: Request) -> Response:
    """Where a signed-out browser goes: the sign-in form, back here after (htmx: a full redirect).
    Here is the path as the browser sent it (``raw_path``: ``url.path`` is decoded, and a decoded
    space or ``%2F`` would not come back to the same page, or not pass ``studio_paths.target``)."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else urllib.parse.quote(request.url.path)
    here = path + (f"?{request.url.query}" if request.url.query else "")
    target = f"{PREFIX}/signin?{urllib.parse.urlencode({'next': here})}"
    response: Response
    if request.headers.get("hx-request"):
        response = Response(status_code=204, headers={"HX-Redirect": target})
    else:
        response = RedirectResponse(target, status_code=303)
    if request.cookies.get(COOKIE):
        clear_cookie(response, request)
    return response


def secure(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


class StudioPublicRoute(_CloudletRoute):
    """A studio route anyone may reach (the sign-in form, static files)."""

    async def authenticate(self, request: Request) -> None:
        if request.method not in SAFE_METHODS and not same_origin(request):
            raise forbidden("a studio form may only be sent from the studio's own pages")

    def get_route_handler(self) -> Handler:
        inner = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                response = await inner(request)
            except CloudletError as exc:
                response = await self.refusal(request, exc)
            except RequestValidationError:
                response = await self.refusal(
                    request, CloudletError("InvalidRequest", "that address or form is not valid here")
                )
            except Exception:
                log.exception("studio page %s failed", request.url.path)
                error = CloudletError("InternalError", "something went wrong on the server", status=500)
                response = await self.refusal(request, error)
            return secure(response)

        return handler

    async def refusal(self, request: Request, exc: CloudletError) -> Response:
        if exc.status == 401:
            return signin_redirect(request)
        return await run_in_threadpool(error_page, request, exc)


class StudioRoute(StudioPublicRoute):
    """A signed-in studio route: the session's caller is ``request.state.caller``."""

    async def authenticate(self, request: Request) -> None:
        found = await resolve_session(request)
        await check_csrf(request, found)
        # What the services audit from here on came through the studio (and carries no client
        # request id: a browser sends none).
        audit.bind_channel(audit.STUDIO)
