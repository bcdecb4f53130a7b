"""Teams and their shares of pools (issue 31): the administrator's use cases behind
``/api/v1/teams``. A put replaces the whole team (members and shares) in one transaction with its
audit entry, so a refused document leaves nothing behind; the pure rules are
``domain/access/teams.py``, the scheduler's reading of the same rows ``services/jobs/fair_config.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from cloudlet.domain.access.teams import COMPUTE, LOCATION, PoolShare, TeamDocument, TeamSpec, check_team
from cloudlet.domain.errors import conflict, not_found, validation_error
from cloudlet.services.access import audit, identity
from cloudlet.services.core.context import Caller
from cloudlet.services.core.use_case import use_case
from cloudlet.store.schema import (
    Compute,
    Location,
    Principal,
    ResourceGroup,
    Team,
    TeamMember,
    TeamShare,
    Workspace,
)


def team_target(name: str) -> str:
    return f"/teams/{name}"


# -- reads ------------------------------------------------------------------------------------
def list_teams(session: Session) -> list[dict[str, Any]]:
    """Every team as rendered, by name (a handful: three queries for all of them)."""
    teams = list(session.scalars(select(Team).order_by(Team.name)))
    return _render(session, teams)


def get_team(session: Session, name: str) -> dict[str, Any]:
    return _render(session, [_require(session, name)])[0]


def _require(session: Session, name: str) -> Team:
    team = session.scalar(select(Team).where(Team.name == name))
    if team is None:
        raise not_found("Team", name)
    return team


def _render(session: Session, teams: Sequence[Team]) -> list[dict[str, Any]]:
    ids = [team.id for team in teams]
    members: dict[int, list[str]] = {i: [] for i in ids}
    for principal, team_id in session.execute(
        select(TeamMember.principal_name, TeamMember.team_id)
        .where(TeamMember.team_id.in_(ids))
        .order_by(TeamMember.principal_name)
    ):
        members[team_id].append(principal)
    shares: dict[int, list[dict[str, Any]]] = {i: [] for i in ids}
    rows = session.execute(
        select(TeamShare, Workspace.name, ResourceGroup.name)
        .outerjoin(Workspace, Workspace.id == TeamShare.workspace_id)
        .outerjoin(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
        .where(TeamShare.team_id.in_(ids))
        .order_by(TeamShare.pool_kind.desc(), Workspace.name, TeamShare.pool_name)  # locations first
    )
    for share, ws_name, rg_name in rows:
        pool: dict[str, Any] = (
            {"location": share.pool_name}
            if share.pool_kind == LOCATION
            else {"workspace": ws_name, "resource_group": rg_name, "compute": share.pool_name}
        )
        shares[share.team_id].append(pool | {"share": share.share, "borrow_limit": share.borrow_limit})
    return [
        {
            "name": team.name,
            "description": team.description,
            "members": members[team.id],
            "shares": shares[team.id],
            "created_at": team.created_at,
        }
        for team in teams
    ]


# -- writes -----------------------------------------------------------------------------------
@use_case
def put_team(session: Session, caller: Caller, name: str, doc: TeamDocument) -> tuple[dict[str, Any], bool]:
    """Create team ``name`` or replace it (description, members and shares) with ``doc``;
    committed with its audit entry. (The team as rendered, whether it was created.)"""
    identity.require_admin(caller, "changing teams")
    spec = check_team(name, doc, identity.PRINCIPAL_NAME)
    team = session.scalar(select(Team).where(Team.name == name))
    created = team is None
    _check_members(session, spec)
    pools = [_pool_row(session, share, f"shares[{i}]") for i, share in enumerate(spec.shares)]
    if team is None:
        team = Team(name=name, description=spec.description, created_at=time.time())
        session.add(team)
        session.flush()
    else:
        team.description = spec.description
        session.execute(delete(TeamMember).where(TeamMember.team_id == team.id))
        session.execute(delete(TeamShare).where(TeamShare.team_id == team.id))
    session.add_all(TeamMember(principal_name=member, team_id=team.id) for member in spec.members)
    session.add_all(
        TeamShare(
            team_id=team.id,
            pool_kind=share.kind,
            workspace_id=workspace_id,
            pool_name=share.name,
            share=share.share,
            borrow_limit=share.borrow_limit,
        )
        for share, workspace_id in zip(spec.shares, pools, strict=True)
    )
    session.flush()
    details = {
        "members": list(spec.members),
        "shares": [_share_detail(share) for share in spec.shares],
        "description": spec.description,
    }
    audit.record(
        session, caller.name, "team.create" if created else "team.update", team_target(name), details
    )
    shown = _render(session, [team])[0]
    session.commit()
    return shown, created


@use_case
def delete_team(session: Session, caller: Caller, name: str) -> None:
    """Remove a team, its members (they fall to the default team) and its shares; committed."""
    identity.require_admin(caller, "deleting teams")
    team = _require(session, name)
    # Explicit deletes: SQLite enforces ON DELETE CASCADE only with its foreign keys pragma on.
    session.execute(delete(TeamMember).where(TeamMember.team_id == team.id))
    session.execute(delete(TeamShare).where(TeamShare.team_id == team.id))
    session.delete(team)
    audit.record(session, caller.name, "team.delete", team_target(name))
    session.commit()


def _check_members(session: Session, spec: TeamSpec) -> None:
    """Every member is a user and in no other team (one team per user: their jobs are that
    team's usage)."""
    if not spec.members:
        return
    known = set(session.scalars(select(Principal.name).where(Principal.name.in_(spec.members))))
    for i, member in enumerate(spec.members):
        if member not in known:
            raise validation_error(
                f"members[{i}]",
                f"there is no user '{member}'; create it first (`cloudlet user create {member}`) or "
                "remove it from the team",
                code="UnknownPrincipal",
            )
    others = session.execute(
        select(TeamMember.principal_name, Team.name)
        .join(Team, Team.id == TeamMember.team_id)
        .where(TeamMember.principal_name.in_(spec.members))
    ).all()
    for member, other in others:
        if other != spec.name:
            raise conflict(
                "UserInAnotherTeam",
                f"user '{member}' is already in team '{other}', and a user is in one team; remove them "
                f"from '{other}' first (`cloudlet team update {other}` without them), then add them to "
                f"'{spec.name}'",
                f"members[{spec.members.index(member)}]",
            )


def _pool_row(session: Session, share: PoolShare, where: str) -> int | None:
    """The workspace id a share's pool is in (None for a location), refusing a pool that does not
    exist, naming the field."""
    if share.kind == LOCATION:
        if session.get(Location, share.name) is None:
            known = ", ".join(session.scalars(select(Location.name).order_by(Location.name)))
            raise validation_error(
                f"{where}.location", f"there is no location '{share.name}'; the locations are: {known}"
            )
        return None
    assert share.kind == COMPUTE and share.workspace is not None
    query = (
        select(Workspace.id, ResourceGroup.name)
        .join(ResourceGroup, ResourceGroup.id == Workspace.resource_group_id)
        .where(Workspace.name == share.workspace)
    )
    if share.resource_group is not None:
        query = query.where(ResourceGroup.name == share.resource_group)
    found = session.execute(query).all()
    if not found:
        raise validation_error(
            f"{where}.workspace", f"there is no workspace '{share.workspace}'; name an existing workspace"
        )
    if len(found) > 1:
        groups = ", ".join(sorted(str(rg) for _, rg in found))
        raise validation_error(
            f"{where}.resource_group",
            f"workspace '{share.workspace}' is in several resource groups ({groups}); add resource_group",
        )
    workspace_id = int(found[0][0])
    exists = session.scalar(
        select(Compute.id).where(Compute.workspace_id == workspace_id, Compute.name == share.name)
    )
    if exists is None:
        raise validation_error(
            f"{where}.compute",
            f"workspace '{share.workspace}' has no compute '{share.name}'; create it first or name another",
        )
    return workspace_id


def _share_detail(share: PoolShare) -> dict[str, Any]:
    pool = (
        {"location": share.name}
        if share.kind == LOCATION
        else {"workspace": share.workspace, "compute": share.name}
    )
    return pool | {"share": share.share, "borrow_limit": share.borrow_limit}


__all__ = ["delete_team", "get_team", "list_teams", "put_team"]
