"""Native REST routes for the events feed: pages after a sequence number, or a server-sent stream.

``GET {ws}/events?since=SEQ`` pages (``lastSeq`` is the next page's ``since``; ``nextLink`` while
a page came back full). ``?watch=true`` streams: ``id:`` is the seq, so a browser's EventSource
(or ``cloudlet events --watch``) reconnects with ``Last-Event-ID`` and misses nothing. The stream
reads the store in a worker thread (never on the event loop) when a commit that recorded events in
its workspace wakes it (in this worker or another of ``--workers N``: ``services/core/feed_wake.py``),
and every ``POLL_S`` for what no wake-up reaches (another server on a shared PostgreSQL store).
``GET /api/v1/events``: every workspace's, for an administrator.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from cloudlet.api.deps import AppState, app_state, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.domain.errors import CloudletError
from cloudlet.domain.events import HEARTBEAT, sse_message
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.views import events as feed

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["events"], route_class=UserRoute)
# The fallback poll: commits of this server wake its streams at once, so the poll only bounds how
# late an event committed by another server on a shared store (or a dropped wake-up) arrives.
# It was 0.5 s when polling was all there was; 2 s is the same order as the agents' long-poll
# recheck (1 s), and an idle stream reads the store 30 times a minute instead of 120.
POLL_S = float(os.environ.get("CLOUDLET_EVENTS_POLL_S") or 2.0)
# After a read, a wake-up waits this long before the next: a burst of commits (a scheduling
# round moving jobs one transaction each) is read in a few pages, not a read per commit.
WAKE_GAP_S = 0.05
HEARTBEAT_S = float(os.environ.get("CLOUDLET_EVENTS_HEARTBEAT_S") or 15.0)

Since = Annotated[
    int | None, Query(ge=0, description="the last sequence number seen (absent: from the oldest kept)")
]
TypeParam = Annotated[str | None, Query(pattern="^(job|compute|node|operation|deployment)$")]
ComputeParam = Annotated[str | None, Query(max_length=64)]
Limit = Annotated[int, Query(ge=1, le=feed.MAX_PAGE)]
Watch = Annotated[bool, Query(description="stream server-sent events instead of one page")]


@router.get(WS + "/events")
async def workspace_events(
    sub: str,
    rg: str,
    ws: str,
    request: Request,
    since: Since = None,
    type: TypeParam = None,
    compute: ComputeParam = None,
    limit: Limit = feed.DEFAULT_PAGE,
    watch: Watch = False,
    state: AppState = Depends(app_state),
) -> Response:
    """The workspace's lifecycle events after ``since``, oldest first (410 with the oldest kept
    seq when some after it were pruned)."""
    return await _answer(state, request, WorkspaceRef(sub, rg, ws), since, type, compute, limit, watch)


@router.get("/events")
async def all_events(
    request: Request,
    since: Since = None,
    type: TypeParam = None,
    compute: ComputeParam = None,
    limit: Limit = feed.DEFAULT_PAGE,
    watch: Watch = False,
    state: AppState = Depends(app_state),
) -> Response:
    """Every workspace's lifecycle events (administrators)."""
    return await _answer(state, request, None, since, type, compute, limit, watch)


async def _answer(
    state: AppState,
    request: Request,
    ref: WorkspaceRef | None,
    since: int | None,
    type: str | None,
    compute: str | None,
    limit: int,
    watch: bool,
) -> Response:
    caller: Caller = request.state.caller
    resume = request.headers.get("last-event-id", "").strip()
    if resume.isdigit():  # a reconnecting EventSource: where it left off
        since = int(resume)
    wanted = feed.EventFilter(since, type, compute, limit).checked()
    # The first page before answering: a 404, 403 or 410 is an HTTP status, not a broken stream.
    ws_id, first = await run_in_threadpool(_first_page, state, ref, caller, wanted)
    if not watch:
        body: dict[str, object] = {"value": [e.document() for e in first.events], "lastSeq": first.last_seq}
        if len(first.events) == wanted.limit:
            query = dict(request.query_params) | {"since": str(first.last_seq)}
            body["nextLink"] = f"{request.url.remove_query_params(list(query))}?{urlencode(query)}"
        return json_response(body)
    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(
        _stream(state, request, ws_id, wanted, first), media_type="text/event-stream", headers=headers
    )


def _first_page(
    state: AppState, ref: WorkspaceRef | None, caller: Caller, wanted: feed.EventFilter
) -> tuple[int | None, feed.EventPage]:
    with state.read_sessions() as session:
        ws_id = feed.scope(session, ref, caller)
        return ws_id, feed.page(session, ws_id, wanted)


def _next_page(state: AppState, ws_id: int | None, wanted: feed.EventFilter) -> feed.EventPage:
    with state.read_sessions() as session:
        return feed.page(session, ws_id, wanted)


async def _stream(
    state: AppState, request: Request, ws_id: int | None, wanted: feed.EventFilter, page: feed.EventPage
) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    quiet_since = last_read = loop.time()
    yield "retry: 1000\n\n"
    # Listening starts woken: what was committed since the first page is read at once.
    with state.feed.listen(ws_id) as woken:
        while True:
            for event in page.events:
                yield sse_message(event)
            if page.events:
                quiet_since = loop.time()
            if len(page.events) < wanted.limit:  # caught up: wait for a wake-up or the poll
                while True:
                    now = loop.time()
                    heartbeat_at = quiet_since + HEARTBEAT_S
                    if await woken.wait(min(last_read + POLL_S, heartbeat_at) - now):
                        await asyncio.sleep(max(0.0, last_read + WAKE_GAP_S - loop.time()))
                        break
                    now = loop.time()
                    if now >= heartbeat_at:
                        quiet_since = now
                        yield HEARTBEAT
                    if now >= last_read + POLL_S:
                        break
            if await request.is_disconnected():
                return
            wanted = feed.EventFilter(page.last_seq, wanted.type, wanted.compute, wanted.limit)
            woken.take()  # a commit from here on wakes the next read, not this one
            last_read = loop.time()
            try:
                page = await run_in_threadpool(_next_page, state, ws_id, wanted)
            except CloudletError as exc:  # pruned past the reader while it watched (410)
                yield f"event: error\ndata: {json.dumps(exc.to_body())}\n\n"
                return
