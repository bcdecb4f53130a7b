"""A bound on every request body, in size and in time (issue 24: the resource-abuse battery).

An ASGI middleware wraps each request's ``receive``: nothing is checked until the route reads
the body, which it does after authenticating the caller (``api/routing.py``), so an anonymous
request still gets its 401 whatever it sends. Then:

- size: ``Content-Length`` over the route's limit is a 413 before any byte is read, and the
  bytes are counted as they arrive (a chunked body too). The limit is ``DEFAULT_MAX_BODY``
  (4 MiB, the size Azure Resource Manager takes) unless the route's endpoint carries a larger
  one (``@body_limit(n)``: the upload routes, which bound and stream their bodies themselves);
- time: a body must arrive within ``CLOUDLET_BODY_TIMEOUT_S`` (60 s) in all, or, on an upload
  route, with no pause longer than that and, past that time, at ``MIN_UPLOAD_RATE`` (16 KiB/s)
  on average at least; else 408. A client that trickles bytes holds one coroutine, never a
  thread, and only for that long.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BODY = 4 << 20
BODY_TIMEOUT_S = 60.0
MIN_UPLOAD_RATE = 16 << 10  # bytes/s: a slow link passes, a client trickling bytes does not
UNBOUNDED_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
F = TypeVar("F", bound=Callable[..., Any])


def body_limit(max_bytes: int) -> Callable[[F], F]:
    """Give a route (its endpoint function) a body limit other than DEFAULT_MAX_BODY; put it
    below the router's decorator."""

    def mark(endpoint: F) -> F:
        endpoint.max_body = max_bytes  # type: ignore[attr-defined]
        return endpoint

    return mark


def _limit_of(scope: Scope) -> int:
    route = scope.get("route")
    endpoint = getattr(route, "endpoint", None)
    return int(getattr(endpoint, "max_body", DEFAULT_MAX_BODY))


class BodyLimits:
    def __init__(self, app: ASGIApp, timeout_s: float | None = None) -> None:
        self.app = app
        self.timeout_s = timeout_s or float(os.environ.get("CLOUDLET_BODY_TIMEOUT_S") or BODY_TIMEOUT_S)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in UNBOUNDED_METHODS:
            await self.app(scope, receive, send)
            return
        await self.app(scope, _Bounded(scope, receive, self.timeout_s), send)


class _Bounded:
    """``receive`` for one request: counts and times the body until its last chunk, then passes
    messages (the disconnect a streaming answer waits for) through untouched."""

    def __init__(self, scope: Scope, receive: Receive, timeout_s: float) -> None:
        self.scope, self.receive, self.timeout_s = scope, receive, timeout_s
        self.limit = -1  # known at the first read: the route is matched by then
        self.size = 0
        self.deadline = 0.0
        self.done = False

    def _start(self) -> None:
        self.limit = _limit_of(self.scope)
        for name, value in self.scope.get("headers") or ():
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                raise _too_large(self.limit)
        self.deadline = time.monotonic() + self.timeout_s

    async def __call__(self) -> Message:
        if self.done:
            return await self.receive()
        if self.limit < 0:
            self._start()
        upload = self.limit > DEFAULT_MAX_BODY
        wait = self.timeout_s if upload else self.deadline - time.monotonic()
        try:
            message = await asyncio.wait_for(self.receive(), max(wait, 0.001))
        except TimeoutError:
            self.done = True
            what = "paused longer than" if upload else "took longer than"
            raise HTTPException(
                408, f"the request body {what} {self.timeout_s:g} s; send it at once", {"Connection": "close"}
            ) from None
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.limit:
                self.done = True
                raise _too_large(self.limit)
            self.done = not message.get("more_body", False)
            elapsed = time.monotonic() - self.deadline + self.timeout_s
            if (
                upload
                and not self.done
                and elapsed > self.timeout_s
                and self.size < MIN_UPLOAD_RATE * elapsed
            ):
                self.done = True
                raise HTTPException(
                    408,
                    f"the upload arrives at {self.size / elapsed / 1024:.1f} KiB/s, under the "
                    f"{MIN_UPLOAD_RATE >> 10} KiB/s this server waits for",
                    {"Connection": "close"},
                )
        else:
            self.done = True
        return message


def _too_large(limit: int) -> HTTPException:
    size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
    return HTTPException(
        413,
        f"the request body is larger than {size}, the most this route takes",
        {"Connection": "close"},
    )
