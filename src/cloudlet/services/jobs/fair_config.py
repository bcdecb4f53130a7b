"""The fair-share configuration of one compute's pool, read from the store for the scheduler
(issue 31): teams' shares (``team_shares``), users' teams (``team_members``) and the half-life.

**Which computes.** Only a cluster's pool is shared (``shared_pool``): a compute instance or an
attached VM is one node with one owner, its jobs run side by side by vCPUs, and the scheduler
applies no fair share to it. So ``for_compute`` is None for one, and every reader of the shares —
the scheduler's round (``fair_queue.config_for``), a waiting job's reason (``queue_snapshots``),
the compute's fair-share view — follows this one rule.

**Which shares.** A compute's own shares (``pool_kind`` "compute", its workspace and name) where it
has any; else its location's, which then apply to this compute as to each compute of the location.
None: no team has a share of this pool, and the compute's queue is priority then FIFO.

**Users and teams.** A user is in the team ``team_members`` names when that team has a share of
this pool; every other user (in no team, or in a team with no share here) is in
``fair_share.DEFAULT_TEAM``.

**The default team's weight.** It is listed, with a share equal to the mean of the listed teams'
shares and no borrow limit, only while some queued or running job on this compute is one of its
users'. So a pool split 50/50 between two teams gives each exactly half while only their users
use it, and a user nobody placed in a team neither starves (they get an average team's weight)
nor takes an entitlement from the teams while they run nothing.

**Half-life.** ``CLOUDLET_FAIR_SHARE_HALF_LIFE_S`` (seconds, >= 0; 0 keeps no history: usage is the
cores held now), read by the server's environment like its other settings; default
``fair_share.SLURM_HALF_LIFE_S`` (7 days, Slurm's ``PriorityDecayHalfLife``).

Nothing is cached: each call reads the rows of this pass (a few small indexed reads), so an
administrator's change applies from the next scheduling pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.access.teams import COMPUTE, LOCATION
from cloudlet.domain.compute import compute_types
from cloudlet.domain.jobs import fair_share
from cloudlet.domain.jobs.fair_share import FairShareConfig
from cloudlet.domain.jobs.job_status import ACTIVE
from cloudlet.services.core import settings
from cloudlet.store.schema import Compute, Job, Team, TeamMember, TeamShare

HALF_LIFE_ENV = "CLOUDLET_FAIR_SHARE_HALF_LIFE_S"
_ACTIVE = tuple(status.value for status in ACTIVE)


def half_life_s() -> float:
    """The usage half-life in seconds (``CLOUDLET_FAIR_SHARE_HALF_LIFE_S``; default Slurm's 7
    days). A value that is not a number >= 0 is logged and the default used: a typo in a setting
    must not stop the scheduler."""
    return settings.env_number(HALF_LIFE_ENV, fair_share.SLURM_HALF_LIFE_S)


def shared_pool(compute: Compute) -> bool:
    """Whether team shares may apply to COMPUTE: a cluster's pool, not a single node's."""
    return compute.type not in compute_types.SINGLE_NODE


def for_compute(
    session: Session, compute: Compute, *, users: Iterable[str] | None = None
) -> FairShareConfig | None:
    """The pool's teams, shares and users for ``compute``; None where no team has a share of it.
    USERS: the users of the compute's queued and running jobs, where the caller has read them
    already (the scheduling pass has); without them one query probes the queue for a user of the
    default team (a scan of the compute's active jobs when none is: ~45 ms at 100,000 on SQLite).
    None for a single-node compute (``shared_pool``), whatever shares its location has."""
    if not shared_pool(compute):
        return None
    rows = _shares(session, COMPUTE, compute.workspace_id, compute.name)
    if not rows:
        rows = _shares(session, LOCATION, None, compute.location)
    if not rows:
        return None
    teams = [fair_share.TeamShare(name, share, borrow) for name, share, borrow in rows]
    members = session.execute(
        select(TeamMember.principal_name, Team.name)
        .join(Team, Team.id == TeamMember.team_id)
        .where(Team.name.in_([team.name for team in teams]))
    )
    user_teams = {str(user): str(team) for user, team in members}
    busy = (
        any(user not in user_teams for user in users)
        if users is not None
        else _default_team_busy(session, compute, user_teams)
    )
    if busy:
        mean = sum(team.share for team in teams) / len(teams)
        teams.append(fair_share.TeamShare(fair_share.DEFAULT_TEAM, mean, None))
    return FairShareConfig(tuple(teams), user_teams, half_life_s())


def _shares(
    session: Session, kind: str, workspace_id: int | None, pool: str
) -> Sequence[tuple[str, float, float | None]]:
    query = (
        select(Team.name, TeamShare.share, TeamShare.borrow_limit)
        .join(Team, Team.id == TeamShare.team_id)
        .where(TeamShare.pool_kind == kind, TeamShare.pool_name == pool)
        .order_by(Team.name)
    )
    query = query.where(
        TeamShare.workspace_id.is_(None) if workspace_id is None else TeamShare.workspace_id == workspace_id
    )
    return [(str(name), float(share), borrow) for name, share, borrow in session.execute(query)]


def _default_team_busy(session: Session, compute: Compute, members: dict[str, str]) -> bool:
    """Whether a queued or running job on ``compute`` is a user's in no team with a share here
    (one indexed probe: it stops at the first such job)."""
    query = select(Job.id).where(
        Job.workspace_id == compute.workspace_id,
        Job.compute_name == compute.name,
        Job.status.in_(_ACTIVE),
    )
    if members:
        query = query.where(Job.created_by.not_in(list(members)))
    return session.scalar(query.limit(1)) is not None


__all__ = ["HALF_LIFE_ENV", "for_compute", "half_life_s", "shared_pool"]
