"""Native REST routes for the events feed: pages after a sequence number, or a server-sent stream.

``GET {ws}/events?since=SEQ`` pages (``lastSeq`` is the next page's ``since``; ``nextLink`` while
a page came back full). ``?watch=true`` streams: ``id:`` is the seq, so a browser's EventSource
(or ``cloudlet events --watch``) reconnects with ``Last-Event-ID`` and misses nothing. The stream
polls the store in a worker thread (never on the event loop); polling, not an in-process signal,
is what makes it see the events other servers and workers commit. ``GET /api/v1/events``: every
workspace's, for an administrator.
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
POLL_S = float(os.environ.get("CLOUDLET_EVENTS_POLL_S") or 0.5)
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
    quiet_since = asyncio.get_running_loop().time()
    yield "retry: 1000\n\n"
    while True:
        for event in page.events:
            yield sse_message(event)
        now = asyncio.get_running_loop().time()
        if page.events:
            quiet_since = now
        elif now - quiet_since >= HEARTBEAT_S:
            quiet_since = now
            yield HEARTBEAT
        if len(page.events) < wanted.limit:  # caught up: wait before asking again
            await asyncio.sleep(POLL_S)
        if await request.is_disconnected():
            return
        wanted = feed.EventFilter(page.last_seq, wanted.type, wanted.compute, wanted.limit)
        try:
            page = await run_in_threadpool(_next_page, state, ws_id, wanted)
        except CloudletError as exc:  # pruned past the reader while it watched (410)
            yield f"event: error\ndata: {json.dumps(exc.to_body())}\n\n"
            return
