"""``GET /metrics`` (Prometheus's text format, issue 29) and the middleware that counts every HTTP
request by route template and status (``services/core/metrics.py`` holds the instruments)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cloudlet.api.deps import AppState, app_state
from cloudlet.services.core import metrics
from cloudlet.services.jobs import resource_monitoring

router = APIRouter(tags=["metrics"])
# Other services' store-derived families, read on each scrape beside the store's own.
EXTRAS = (resource_monitoring.job_resource_metrics,)


@router.get("/metrics", include_in_schema=False)
def scrape(request: Request, state: AppState = Depends(app_state)) -> Response:
    """Every worker's counters and the store's gauges, for the scrape token (or from loopback where
    allowed): a sync handler, so the store's queries run in the threadpool."""
    refusal = metrics.scrape_refusal(
        request.headers.get("authorization", ""), request.client.host if request.client else None
    )
    if refusal is not None:
        status, message = refusal
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return Response(message + "\n", status_code=status, media_type="text/plain", headers=headers)
    return Response(metrics.exposition(state.read_sessions, EXTRAS), media_type=metrics.CONTENT_TYPE)


def _route_template(scope: Scope) -> str:
    """The matched route's path template (``/api/v1/…/jobs/{name}``), never the raw path: the label's
    values stay as few as the routes."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else metrics.UNMATCHED_ROUTE


class HttpMetrics:
    """Pure ASGI middleware (no per-request task or body copy, as BaseHTTPMiddleware would add):
    counts each HTTP request by method, route template and status, and times it to its last byte."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # The labelled children, kept: ``labels()`` takes a lock and builds its key on every call
        # (about half of the ~20 µs a request the counting cost before).
        self.counted: dict[tuple[str, str, int], Any] = {}
        self.timed: dict[tuple[str, str], Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception before the answer began is answered 500 by the server

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            method, route = scope["method"], _route_template(scope)
            counter = self.counted.get((method, route, status))
            if counter is None:
                counter = metrics.HTTP_REQUESTS.labels(method, route, str(status))
                self.counted[(method, route, status)] = counter
            counter.inc()
            timer = self.timed.get((method, route))
            if timer is None:
                timer = self.timed[(method, route)] = metrics.HTTP_DURATION.labels(method, route)
            timer.observe(time.perf_counter() - started)


def install(app: FastAPI) -> None:
    app.router.routes.extend(router.routes)
    app.add_middleware(HttpMetrics)
