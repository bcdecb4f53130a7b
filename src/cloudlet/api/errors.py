"""Every failure answers in one shape, ``{"error": {"code", "message", "target", "details"}}``:
cloudlet's own errors with their status, invalid input as 400 naming the field, 405 with the
``Allow`` header, an exhausted store as 503 with ``Retry-After``, and anything unexpected as a 500
that closes its connection (so a kept-alive client's next request starts clean)."""

from __future__ import annotations

import logging
from typing import Any

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cloudlet.api.body_limits import BodyLimits
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.validation import describe

log = logging.getLogger("cloudlet.api")
RETRY_AFTER_S = "1"


def _json(error: CloudletError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error.to_body(), status_code=error.status, headers=headers)


async def cloudlet_error(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, CloudletError)
    return _json(exc)


async def request_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
    if first.get("loc", ("",))[0] == "path":
        # POST …/computes/{name}/nodes is not an unknown {action}: that path is the nodes route's,
        # which does not serve POST (an unknown action, …/computes/{name}/explode, stays a 400).
        allowed = _allowed_methods(request, "")
        if allowed and request.method not in allowed:
            return await http_error(request, StarletteHTTPException(405))
    if first.get("type") == "json_invalid":
        # loc is ("body", <character offset>): the target is the whole body, not the offset.
        reason = (first.get("ctx") or {}).get("error") or first.get("msg", "JSON decode error")
        offset = first.get("loc", ("body", "?"))[-1]
        message = f"the request body is not valid JSON: {reason} (at character {offset})"
        return _json(CloudletError("InvalidRequest", message, "$"))
    location = [str(p) for p in first.get("loc", ())]
    where = location[0] if location else "body"
    target = ".".join(p for p in location[1:] if p) or ("$" if where == "body" else where)
    if first.get("type") == "missing" and where == "body" and target == "$":
        message = "a JSON body is required (Content-Type: application/json)"
    elif first.get("type") == "extra_forbidden":
        message = f"unknown field '{target.rsplit('.', 1)[-1]}'; remove it (check the spelling)"
    else:  # the same words the domain's own validation uses
        message = describe(first, target, target, BaseModel, "this request")
    kind = {"query": "query parameter", "path": "path segment", "header": "header"}.get(where, "field")
    return _json(CloudletError("InvalidRequest", f"{kind} '{target}': {message}", target))


def _allowed_methods(request: Request, named: str) -> list[str]:
    """Every method the routes that name this path most literally serve: Starlette's own 405
    names only the methods of the first route that matched the path (NAMED), and GET and PUT are
    often two routes."""
    methods = {m.strip() for m in named.split(",") if m.strip()}
    try:  # the routes of included routers, as FastAPI serves them (no public accessor yet)
        from fastapi.routing import _iter_included_route_candidates as candidates
    except ImportError:  # pragma: no cover - a FastAPI without it: the first route's methods
        return sorted(methods)
    scope = {**request.scope, "method": "__any__"}
    matched: dict[int, set[str]] = {}
    for route in candidates(request.app.router.routes):
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            # Fewest parameters first: a path some route names literally (``…/logged-models/search``)
            # is that route's resource, not a value of a parametrised sibling (``…/{model_id}``).
            params = getattr(route, "path_format", "").count("{")
            matched.setdefault(params, set()).update(getattr(route, "methods", None) or ())
    return sorted(matched[min(matched)] if matched else methods)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        allowed = _allowed_methods(request, headers.get("Allow", ""))
        headers["Allow"] = ", ".join(allowed)
        message = f"{request.method} is not allowed here; allowed: {', '.join(allowed)}"
        return _json(CloudletError("MethodNotAllowed", message, status=405), headers)
    codes = {404: "NotFound", 400: "InvalidRequest", 408: "RequestTimeout", 413: "PayloadTooLarge"}
    code = codes.get(exc.status_code, "HttpError")
    return _json(CloudletError(code, str(exc.detail), status=exc.status_code), headers or None)


async def store_busy(_request: Request, exc: Exception) -> JSONResponse:
    log.warning("answered 503: %s", exc)
    error = CloudletError(
        "ServerBusy", "the server is busy (no store connection free in time); retry shortly", status=503
    )
    return _json(error, {"Retry-After": RETRY_AFTER_S})


class InternalErrors:
    """The last wall: an exception no handler took becomes a 500 in the error shape, with
    ``Connection: close`` (the server drops the connection after an unhandled error, and a
    client that was not told would send its next request into the closed socket)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"), exc_info=exc)
            if started:
                raise  # half an answer is out: nothing to do but drop the connection
            error = CloudletError("InternalError", f"internal error: {type(exc).__name__}", status=500)
            await _json(error, {"Connection": "close"})(scope, receive, send)


def install(app: FastAPI) -> None:
    app.add_exception_handler(CloudletError, cloudlet_error)
    app.add_exception_handler(RequestValidationError, request_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(sqlalchemy.exc.TimeoutError, store_busy)
    app.add_middleware(BodyLimits)
    app.add_middleware(InternalErrors)
