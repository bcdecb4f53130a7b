"""The FastAPI application: routers, error rendering, and start-up (migrate, bootstrap, reconcile)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import TimeoutError as StoreTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from cloudlet import __version__
from cloudlet.api import (
    routes_admin,
    routes_agent,
    routes_agent_apps,
    routes_compute,
    routes_instance_setup,
    routes_instances,
    routes_jobs,
)
from cloudlet.api.deps import AppState
from cloudlet.domain.errors import CloudletError

log = logging.getLogger("cloudlet.api")


def create_app(state: AppState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state.notifier.bind(asyncio.get_running_loop())
        if state.batcher is not None:
            state.batcher.start(asyncio.get_running_loop())
        for loop in (state.reconciler, state.clusters, state.instance_watch):
            if loop is not None:
                loop.start()
        yield
        for loop in (state.reconciler, state.clusters, state.instance_watch):
            if loop is not None:
                loop.stop()
        if state.batcher is not None:
            state.batcher.stop()
        await routes_instances.forwarder.close()

    app = FastAPI(
        title="cloudlet",
        version=__version__,
        description="Self-hosted compute for ML teams: workspaces, sizes, quotas, locks, computes.",
        lifespan=lifespan,
    )
    app.state.cloudlet = state
    # The agents' routes first: routes are matched in order, and run reports are the most
    # frequent requests (none of these paths overlaps another router's).
    app.include_router(routes_agent.router)
    # routes_jobs before routes_compute: its POST {ws}/computes/{name}/evict would otherwise be
    # shadowed by routes_compute's catch-all POST {ws}/computes/{name}/{action} (404 "Action 'evict'").
    app.include_router(routes_jobs.router)
    app.include_router(routes_compute.router)
    app.include_router(routes_admin.router)
    app.include_router(routes_agent_apps.router)
    app.include_router(routes_instance_setup.router)
    app.include_router(routes_instances.router)  # /instances/{name}/{app}/… and /signin

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "installation": state.installation_id}

    @app.exception_handler(CloudletError)
    async def cloudlet_error(_request: Request, exc: CloudletError) -> JSONResponse:
        return JSONResponse(exc.to_body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def request_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            # loc is ("body", <character offset>): the target is the whole body, not the offset.
            reason = (first.get("ctx") or {}).get("error") or first.get("msg", "JSON decode error")
            offset = first.get("loc", ("body", "?"))[-1]
            message = f"the request body is not valid JSON: {reason} (at character {offset})"
            return JSONResponse(CloudletError("InvalidRequest", message, "$").to_body(), status_code=400)
        target = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or None
        error = CloudletError("InvalidRequest", f"{first.get('msg', 'invalid request')} ({target})", target)
        return JSONResponse(error.to_body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "NotFound", 405: "MethodNotAllowed"}.get(exc.status_code, "HttpError")
        return JSONResponse(CloudletError(code, str(exc.detail)).to_body(), status_code=exc.status_code)

    @app.exception_handler(StoreTimeout)
    async def store_busy(_request: Request, exc: StoreTimeout) -> JSONResponse:
        # No pooled connection, or the store's write lock, came free in time: busy, not broken.
        message = "the server is busy (the store did not answer in time); retry after 1 s"
        body = CloudletError("ServerBusy", message, status=503).to_body()
        return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(Exception)
    async def internal_error(_request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        body = CloudletError("InternalError", f"internal error: {type(exc).__name__}", status=500).to_body()
        return JSONResponse(body, status_code=500)

    return app
