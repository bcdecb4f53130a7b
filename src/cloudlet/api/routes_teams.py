"""Native REST routes for teams and their shares of pools (issue 31, weighted fair share). Thin:
parse, one service call, render; the rules are ``domain/access/teams.py``, the use cases (each
write committed with its audit entry) ``services/access/teams.py``. Reads are for any signed-in
user (a user asks "which team am I in, and what is its share?"); writes are for administrators.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response

from cloudlet.api.deps import Context, context
from cloudlet.api.openapi import success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.teams import TEAM_NAME, TeamDocument
from cloudlet.services.access import teams

router = APIRouter(prefix="/api/v1", tags=["access"], route_class=UserRoute)
TeamName = Annotated[
    str,
    Path(max_length=64, pattern=f"^{TEAM_NAME.pattern}$", description="letters, digits and . _ -"),
]


@router.get("/teams")
def list_teams(ctx: Context = Depends(context)) -> dict[str, Any]:
    return {"value": teams.list_teams(ctx.session)}


@router.get("/teams/{team}")
def get_team(team: TeamName, ctx: Context = Depends(context)) -> dict[str, Any]:
    return teams.get_team(ctx.session, team)


@router.put("/teams/{team}", responses=success(201, "Created"))
def put_team(
    team: TeamName, body: TeamDocument, response: Response, ctx: Context = Depends(context)
) -> dict[str, Any]:
    """Create the team or replace it: description, members (one team per user) and shares
    (admin). All or nothing: a refused document changes nothing."""
    shown, created = teams.put_team(ctx.session, ctx.caller, team, body)
    response.status_code = 201 if created else 200
    return shown


@router.delete("/teams/{team}", status_code=204)
def delete_team(team: TeamName, ctx: Context = Depends(context)) -> Response:
    """Remove the team (admin): its users fall to the default team of each pool."""
    teams.delete_team(ctx.session, ctx.caller, team)
    return Response(status_code=204)
