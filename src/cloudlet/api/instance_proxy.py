"""Forwarding to an instance's app: HTTP (streamed) and WebSocket (both directions).

Authorisation happens before this (api/routes_instances.py); here a request is carried to its
target as is, minus what must not reach the app: the caller's own credentials (``Authorization``,
the sign-in cookie) and hop-by-hop headers. The app's token is added instead. The app serves the
same path it is proxied at (its base URL is ``/instances/<name>/<app>/``), so paths, redirects and
cookie paths pass unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

# httpx and the websockets client are imported by the first proxied request, not with the
# server: httpx alone (it loads its command line's rich, click and pygments) was ~0.1 s of every
# server's start (docs/performance.md, "Start-up"), and most servers proxy nothing.
if TYPE_CHECKING:
    import httpx
    from websockets.asyncio.client import ClientConnection

# One line per proxied request would drown the server's log (a JupyterLab page makes hundreds).
logging.getLogger("httpx").setLevel(logging.WARNING)

SIGNIN_COOKIE = "cloudlet_signin"  # services.access.instance_signin.COOKIE (the proxy loads no service)
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Not forwarded: the caller's credentials, and headers the proxy sets itself. Origin and Referer
# were checked by the proxy (same origin only); the app would compare them with its own address.
DROPPED_REQUEST = HOP_BY_HOP | {"host", "authorization", "cookie", "content-length", "origin", "referer"}
WS_HANDSHAKE = frozenset(
    {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions", "sec-websocket-protocol"}
)


class AppGone(Exception):
    """Nothing listens at the target any more (the instance stopped or restarted since)."""


@dataclass(frozen=True)
class Target:
    """Where an app listens and the token it accepts."""

    address: str
    port: int
    token: str


def app_cookies(header: str | None) -> str | None:
    """The request's cookies minus cloudlet's sign-in cookie (the app never sees it)."""
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a cookie header the stdlib parser rejects: pass nothing rather than ours
        return None
    kept = [f"{key}={morsel.coded_value}" for key, morsel in jar.items() if key != SIGNIN_COOKIE]
    return "; ".join(kept) or None


def upstream_headers(headers: list[tuple[str, str]], target: Target, client_host: str) -> dict[str, str]:
    out: dict[str, str] = {}
    cookie = None
    for key, value in headers:
        lower = key.lower()
        if lower == "cookie":
            cookie = app_cookies(value)
        elif lower not in DROPPED_REQUEST and lower not in WS_HANDSHAKE:
            out[key] = value
    if cookie:
        out["Cookie"] = cookie
    out["Authorization"] = f"token {target.token}"
    out["X-Forwarded-For"] = client_host
    return out


class Forwarder:
    """One pooled HTTP client for every proxied request of this process."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(connect=10, read=None, write=60, pool=30),
                limits=httpx.Limits(max_connections=200, max_keepalive_connections=50),
                trust_env=False,  # apps are on this host or the node's network, never behind a proxy
                follow_redirects=False,
            )
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def http(self, request: Request, target: Target) -> Response:
        import httpx

        url = httpx.URL(
            scheme="http",
            host=target.address,
            port=target.port,
            path=request.url.path,
            query=request.url.query.encode() or None,
        )
        host = request.client.host if request.client else ""
        headers = upstream_headers(request.headers.items(), target, host)
        body = await request.body()
        upstream_request = self.client().build_request(request.method, url, headers=headers, content=body)
        try:
            upstream = await self.client().send(upstream_request, stream=True)
        except httpx.ConnectError as exc:
            raise AppGone(str(exc)) from exc
        except httpx.HTTPError as exc:
            return Response(f"the instance's app did not answer: {exc}", 502, media_type="text/plain")
        response = StreamingResponse(
            upstream.aiter_raw(), status_code=upstream.status_code, background=BackgroundTask(upstream.aclose)
        )
        response.raw_headers = [
            (k.encode("latin-1"), v.encode("latin-1"))
            for k, v in upstream.headers.multi_items()
            if k.lower() not in HOP_BY_HOP
        ]
        return response

    async def websocket(self, websocket: WebSocket, target: Target) -> None:
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidHandshake, InvalidStatus
        from websockets.typing import Subprotocol

        query = websocket.url.query
        url = f"ws://{target.address}:{target.port}{websocket.url.path}" + (f"?{query}" if query else "")
        host = websocket.client.host if websocket.client else ""
        headers = upstream_headers(websocket.headers.items(), target, host)
        offered = [Subprotocol(p) for p in websocket.scope.get("subprotocols") or []]
        try:
            upstream = await connect(
                url,
                additional_headers=headers,
                subprotocols=offered or None,
                max_size=None,
                compression=None,
                proxy=None,
                ping_interval=None,  # the browser and the app keep their own connection alive
                open_timeout=10,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            status = exc.response.status_code if isinstance(exc, InvalidStatus) else 502
            await websocket.send_denial_response(
                Response(f"the instance's app refused the WebSocket: {exc}", status, media_type="text/plain")
            )
            return
        async with upstream:
            await websocket.accept(subprotocol=upstream.subprotocol)
            await _pump(websocket, upstream)


async def _pump(websocket: WebSocket, upstream: ClientConnection) -> None:
    """Carry frames both ways until either side closes; then close the other."""
    from websockets.exceptions import ConnectionClosed

    async def browser_to_app() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            await upstream.send(data if data is not None else message.get("text") or "")

    async def app_to_browser() -> None:
        async for data in upstream:
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)

    tasks = [asyncio.create_task(browser_to_app()), asyncio.create_task(app_to_browser())]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, WebSocketDisconnect, RuntimeError):
            await task
    with contextlib.suppress(RuntimeError, ConnectionClosed):
        await websocket.close(code=upstream.close_code or 1000)
