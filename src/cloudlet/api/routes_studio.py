"""The studio's one REST route: a one-time sign-in link (``cloudlet studio open``). The studio
itself is served by ``cloudlet.studio`` under ``/studio``; its sessions live in
``services/access/studio_sessions.py``."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.services.access import studio_sessions

router = APIRouter(prefix="/api/v1", tags=["studio"], route_class=UserRoute)
LINK_PATH = "/studio/link/"  # the studio route that redeems a link (cloudlet.studio.app)


@router.post("/studio/signin-links", status_code=201)
def create_signin_link(ctx: Context = Depends(context)) -> Response:
    """A link that signs its first follower into the studio as the caller (single use, valid
    ``LINK_LIFETIME_S``); it carries the caller's key, so revoking that key ends what it opened."""
    issued = studio_sessions.create_link(ctx.session, ctx.caller)
    base = str(ctx.request.base_url).rstrip("/")
    body = {"url": f"{base}{LINK_PATH}{issued.value}", "expires_at": issued.expires_at}
    return json_response(body, 201)
