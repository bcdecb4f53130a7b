"""The studio's one REST route: a one-time sign-in link (``cloudlet studio open``, ``job show
--web``). The studio itself is served by ``cloudlet.studio`` under ``/studio``; its sessions live in
``services/access/studio_sessions.py``."""

from __future__ import annotations

import urllib.parse
from typing import Annotated

from fastapi import APIRouter, Body, Depends, Response
from pydantic import BaseModel, ConfigDict

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.routing import UserRoute
from cloudlet.domain import studio_paths
from cloudlet.domain.errors import validation_error
from cloudlet.services.access import studio_sessions

router = APIRouter(prefix="/api/v1", tags=["studio"], route_class=UserRoute)
LINK_PATH = "/studio/link/"  # the studio route that redeems a link (cloudlet.studio.app)


class SigninLinkCreate(BaseModel):
    """No body, or no ``next``: the link lands on the studio's Home."""

    model_config = ConfigDict(extra="forbid")
    next: str | None = None  # a studio page's path on this server: /studio/…


@router.post("/studio/signin-links", status_code=201)
def create_signin_link(
    body: Annotated[SigninLinkCreate, Body(default_factory=SigninLinkCreate)],
    ctx: Context = Depends(context),
) -> Response:
    """A link that signs its first follower into the studio as the caller (single use, valid
    ``LINK_LIFETIME_S``); it carries the caller's key, so revoking that key ends what it opened.
    ``{"next": "/studio/…"}`` makes it land on that studio page (a job's, for ``job show --web``)
    instead of Home: only ever a studio path (``studio_paths.target``), else a 400."""
    next_path = None
    if body.next is not None:
        next_path = studio_paths.target(body.next)
        if next_path is None:
            raise validation_error("next", "next must be a path of a studio page on this server (/studio/…)")
    issued = studio_sessions.create_link(ctx.session, ctx.caller)
    base = ctx.state.link_base(str(ctx.request.base_url))
    url = f"{base}{LINK_PATH}{issued.value}"
    if next_path is not None:
        url += "?" + urllib.parse.urlencode({"next": next_path})
    return json_response({"url": url, "expires_at": issued.expires_at}, 201)
