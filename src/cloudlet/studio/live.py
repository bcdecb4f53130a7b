"""The studio's live parts as server-sent event streams, one loop for all of them: a job's status
and log (``pages.job_live``), its metric points and its children, a compute list's and a compute's
state (``pages.compute``), a pipeline's graph and a sweep's trials as data (``pages.job_graphs``),
a batch endpoint's invocations (``pages.batch_endpoints``), an online endpoint's counters and its
log tail (``pages.endpoints``).

A stream is a ``Feed``: its ``poll`` runs in a worker thread (every store or file call off the
event loop), reads through the services, and returns the events for what changed since its last
poll (nothing when nothing did). ``respond`` runs the loop: poll every ``poll_s``, send, end when
the feed says it is done, check the session again every ``RECHECK_S`` (a revoked key, a disabled
user or a removed role ends the stream within that time, by the same check as a page load), a
comment line every ``HEARTBEAT_S`` (a gone browser is noticed, proxies keep the stream), and at
most ``MAX_STREAMS`` open streams per session (a 429 past that).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from cloudlet.api.deps import Context, dump_json
from cloudlet.domain.errors import CloudletError
from cloudlet.services.core.context import Caller
from cloudlet.studio.session import resolve_session, signed

RECHECK_S = 5.0  # how often a stream checks that its session still stands
HEARTBEAT_S = 15.0
MAX_STREAMS = 8  # open streams per session: a page holds one to three
RETRY_MS = 1000  # what a reconnecting EventSource waits
ALLOWED_AGAIN = {"reason": "no longer allowed"}

_open: dict[str, int] = {}  # session id hash → its open streams (touched on the event loop only)


@dataclass
class Step:
    """What one poll found: the events to send; ``done``: the thing is final, the stream ends after
    them; ``again``: more is there already, poll again without waiting."""

    events: list[bytes] = field(default_factory=list)
    done: bool = False
    again: bool = False


class Feed(Protocol):
    def poll(self) -> Step:
        """One look through the services (in a worker thread); the events for what changed."""
        ...


def event(kind: str, data: Any, event_id: int | None = None) -> bytes:
    """One server-sent event; DATA as JSON on one line (a log's newlines stay inside the JSON)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return head.encode() + f"event: {kind}\ndata: ".encode() + dump_json(data) + b"\n\n"


def html_event(kind: str, markup: str) -> bytes:
    """A server-rendered fragment as one event (htmx's ``sse-swap`` puts it in the page): each line
    its own ``data:`` line, which the browser joins back with newlines."""
    lines = markup.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    body = "".join(f"data: {line}\n" for line in lines)
    return f"event: {kind}\n{body}\n".encode()


def last_event_id(request: Request, maximum: int) -> int | None:
    """A reconnecting EventSource's ``Last-Event-ID`` (or ``?last_event_id=``: a stream the page
    opens again itself, ``static/live.js``), when it is a number the stream can resume at."""
    sent = request.headers.get("last-event-id") or request.query_params.get("last_event_id", "")
    return int(sent) if sent.isdigit() and int(sent) <= maximum else None


def respond(
    request: Request,
    feed: Feed,
    allowed: Callable[[Caller], None],
    poll_s: float,
) -> StreamingResponse:
    """FEED as a ``text/event-stream``. ALLOWED raises the services' ``CloudletError`` when the
    caller, as their session now resolves, may no longer read the thing (in a worker thread)."""
    id_hash = signed(request).id_hash
    if _open.get(id_hash, 0) >= MAX_STREAMS:
        raise CloudletError(
            code="TooManyRequests",
            message=f"at most {MAX_STREAMS} live streams per session; close a studio tab",
            status=429,
        )
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    body = _run(request, id_hash, feed, allowed, poll_s)
    return StreamingResponse(body, media_type="text/event-stream", headers=headers)


async def _run(
    request: Request, id_hash: str, feed: Feed, allowed: Callable[[Caller], None], poll_s: float
) -> AsyncIterator[bytes]:
    _open[id_hash] = _open.get(id_hash, 0) + 1
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        checked = beat = time.monotonic()
        while True:
            try:
                step = await run_in_threadpool(feed.poll)
            except CloudletError as exc:  # refused or gone: said once, then the end
                yield event("failed", {"message": exc.message})
                return
            for chunk in step.events:
                yield chunk
            if step.done:
                return
            now = time.monotonic()
            if now - checked > RECHECK_S:
                checked = now
                try:  # the stream ends as a page load would be refused
                    found = await resolve_session(request)
                    await run_in_threadpool(allowed, found.caller)
                except CloudletError:
                    yield event("end", ALLOWED_AGAIN)
                    return
            if now - beat > HEARTBEAT_S:
                beat = now
                yield b": alive\n\n"
            if await request.is_disconnected():
                return
            if not step.again:
                await asyncio.sleep(poll_s)
    finally:
        left = _open.get(id_hash, 1) - 1
        if left > 0:
            _open[id_hash] = left
        else:
            _open.pop(id_hash, None)


@dataclass
class FragmentFeed:
    """A server-rendered fragment, sent as event KIND (for htmx's ``sse-swap``) whenever it differs
    from the last one sent. RENDER (in a worker thread) returns the markup and whether the thing
    is final; a ``CloudletError`` from it (the thing is gone, the caller may no longer read it)
    ends the stream."""

    kind: str
    render: Callable[[], tuple[str, bool]]
    shown: str | None = None

    def poll(self) -> Step:
        try:
            markup, final = self.render()
        except CloudletError as exc:
            return Step([event("end", {"reason": exc.message})], done=True)
        step = Step()
        if markup != self.shown:
            self.shown = markup
            step.events.append(html_event(self.kind, markup))
        if final:
            step.events.append(event("end", {"final": True}))
            step.done = True
        return step


@dataclass
class JsonFeed:
    """A document as data, sent as event KIND (a chart or a graph draws it) whenever it differs from
    the last one sent. READ (in a worker thread) returns the document and whether the thing is
    final; a ``CloudletError`` from it ends the stream, as ``FragmentFeed``'s."""

    kind: str
    read: Callable[[], tuple[Any, bool]]
    shown: bytes | None = None

    def poll(self) -> Step:
        try:
            document, final = self.read()
        except CloudletError as exc:
            return Step([event("end", {"reason": exc.message})], done=True)
        step = Step()
        encoded = event(self.kind, document)
        if encoded != self.shown:
            self.shown = encoded
            step.events.append(encoded)
        if final:
            step.events.append(event("end", {"final": True}))
            step.done = True
        return step


class PollContext(Context):
    """A stream's poll's own unit of work (in its worker thread), for the pages' ``Context``-taking
    helpers: the store session it opens is closed after the poll; the caller is the one the
    session last resolved."""

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
