"""Teams and their shares of a pool (issue 31), pure: the administrator's team document and the
rules it must meet before anything is read from the store.

A team is a group of users (principal names, as jobs record ``created_by``; one team per user) and
its shares: each gives the team a weight of one pool's cores and how many cores beyond its
entitlement it may borrow while others leave them idle (``borrow_limit``: None = any idle capacity,
0 = never). A pool is a location (``{"location": "local"}``) or one compute of a workspace
(``{"workspace": "ws1", "compute": "cpu-cluster"}``); a compute's own shares win over its
location's (``services/jobs/fair_config.py``). What needs the store (does the user, location,
workspace or compute exist; is the user in another team) is checked by ``services/access/teams.py``.

Every refusal names the field (``shares[1].share``) and the fix, so ``cloudlet team create`` can
print the server's message as it is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt

from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.domain.jobs.fair_share import DEFAULT_TEAM

TEAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# Bounds a document cannot exceed (a team lists people and pools, not thousands of either).
MAX_MEMBERS = 10_000
MAX_SHARES = 1_000
MAX_SHARE = 1e9  # a weight: only ratios matter, but a bound keeps sums finite
MAX_BORROW = 1e9  # cores

LOCATION: Literal["location"] = "location"
COMPUTE: Literal["compute"] = "compute"
PoolKind = Literal["location", "compute"]

Number = StrictInt | StrictFloat  # "50" (a string) is refused naming the field, not read as 50


class _Strict(BaseModel):
    # NaN/Infinity are checked below with a message naming the field (the API's JSON refuses them
    # too, but a YAML file's .inf reaches here through the CLI as a number).
    model_config = ConfigDict(extra="forbid", allow_inf_nan=True)


class ShareEntry(_Strict):
    """One pool's share: ``location`` alone, or ``workspace`` + ``compute`` (``resource_group``
    only where two resource groups have a workspace of that name)."""

    location: str | None = Field(default=None, min_length=1, max_length=64)
    workspace: str | None = Field(default=None, min_length=1, max_length=64)
    resource_group: str | None = Field(default=None, min_length=1, max_length=90)
    compute: str | None = Field(default=None, min_length=1, max_length=64)
    share: Number = Field(description="a weight > 0: only the ratios between teams matter")
    borrow_limit: Number | None = Field(
        default=None, description="cores beyond its entitlement it may borrow (null: any idle; 0: never)"
    )


class TeamDocument(_Strict):
    """The body of ``PUT /api/v1/teams/{team}`` and of ``cloudlet team create --file``."""

    name: str | None = Field(default=None, max_length=64, description="the path's name, when given")
    description: str | None = Field(default=None, max_length=1024)
    members: list[str] = Field(default_factory=list, max_length=MAX_MEMBERS)
    shares: list[ShareEntry] = Field(default_factory=list, max_length=MAX_SHARES)


@dataclass(frozen=True)
class PoolShare:
    """A checked share: ``workspace`` None for a location; ``name`` the location's or compute's."""

    kind: PoolKind
    name: str
    share: float
    borrow_limit: float | None
    workspace: str | None = None
    resource_group: str | None = None

    @property
    def key(self) -> tuple[str, str | None, str | None, str]:
        return (self.kind, self.resource_group, self.workspace, self.name)


@dataclass(frozen=True)
class TeamSpec:
    name: str
    description: str | None
    members: tuple[str, ...]
    shares: tuple[PoolShare, ...]


def check_team_name(name: str, target: str = "name") -> None:
    if not TEAM_NAME.fullmatch(name):
        raise validation_error(
            target,
            f"team name {name!r}: 1 to 64 letters, digits and . _ -, starting with a letter or digit",
        )
    if name.lower() == DEFAULT_TEAM:
        raise validation_error(
            target,
            f"'{DEFAULT_TEAM}' is the team of every user no team lists (docs/scheduling.md); "
            "choose another name",
        )


def check_team(name: str, doc: TeamDocument, principal_name: re.Pattern[str]) -> TeamSpec:
    """The team ``doc`` describes under ``name`` (the path's), or the first problem, naming its
    field. ``principal_name`` is the shape of a user's name (services/access/identity.py)."""
    check_team_name(name)
    if doc.name is not None and doc.name != name:
        raise validation_error(
            "name", f"the body names team {doc.name!r} but the path {name!r}; make them agree (or omit it)"
        )
    return TeamSpec(
        name=name,
        description=doc.description,
        members=_members(doc.members, principal_name),
        shares=_shares(doc.shares),
    )


def _members(members: Sequence[str], principal_name: re.Pattern[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    for i, member in enumerate(members):
        if not principal_name.fullmatch(member):
            raise validation_error(f"members[{i}]", f"{member!r} is not a user name")
        if member in seen:
            raise validation_error(f"members[{i}]", f"user '{member}' is listed twice; list each user once")
        seen.add(member)
    return tuple(members)


def _shares(entries: Sequence[ShareEntry]) -> tuple[PoolShare, ...]:
    out: list[PoolShare] = []
    seen: dict[tuple[str, str | None, str | None, str], int] = {}
    for i, entry in enumerate(entries):
        where = f"shares[{i}]"
        pool = _pool(entry, where)
        _check_number(entry.share, f"{where}.share", "a weight > 0 (only the ratios between teams matter)")
        if not entry.share > 0:
            raise validation_error(
                f"{where}.share",
                f"share must be > 0, not {entry.share!r}; to give a team nothing, remove the entry",
            )
        if entry.share > MAX_SHARE:
            raise validation_error(f"{where}.share", f"share must be at most {MAX_SHARE:g}")
        borrow = entry.borrow_limit
        if borrow is not None:
            _check_number(borrow, f"{where}.borrow_limit", "cores >= 0 (null: any idle capacity)")
            if borrow < 0 or borrow > MAX_BORROW:
                raise validation_error(
                    f"{where}.borrow_limit",
                    f"borrow_limit is cores beyond the team's entitlement: 0 (never borrows) to "
                    f"{MAX_BORROW:g}, or null for any idle capacity; not {borrow!r}",
                )
        share = PoolShare(
            kind=pool[0],
            name=pool[1],
            share=float(entry.share),
            borrow_limit=None if borrow is None else float(borrow),
            workspace=entry.workspace,
            resource_group=entry.resource_group,
        )
        if share.key in seen:
            raise validation_error(
                where, f"the same pool as shares[{seen[share.key]}]; give each pool one share per team"
            )
        seen[share.key] = i
        out.append(share)
    return tuple(out)


def _pool(entry: ShareEntry, where: str) -> tuple[PoolKind, str]:
    if entry.location is not None and entry.compute is not None:
        raise validation_error(
            where,
            "a share names a location or a compute, not both: a location's share applies to each of its "
            "computes that has no shares of its own; split it into two entries",
        )
    if entry.location is not None:
        if entry.workspace is not None or entry.resource_group is not None:
            raise validation_error(
                f"{where}.workspace", "a location's share takes no workspace (that is for a compute's)"
            )
        return LOCATION, entry.location
    if entry.compute is not None:
        if entry.workspace is None:
            raise validation_error(
                f"{where}.workspace", "a compute's share names its workspace: {workspace: ws1, compute: NAME}"
            )
        return COMPUTE, entry.compute
    raise validation_error(
        where, "a share names its pool: {location: NAME} or {workspace: WS, compute: NAME}"
    )


def _check_number(value: float, target: str, what: str) -> None:
    if not math.isfinite(value):
        raise CloudletError(
            "ValidationError", f"{target.rsplit('.', 1)[-1]} must be {what}, not {value!r}", target
        )


__all__ = [
    "COMPUTE",
    "LOCATION",
    "PoolShare",
    "ShareEntry",
    "TeamDocument",
    "TeamSpec",
    "check_team",
    "check_team_name",
]
