"""``cloudlet team create|update|show|list|delete``: teams and their shares of pools (issue 31).

A team document is ``{name, description, members: [user, …], shares: [{location, share,
borrow_limit} | {workspace, compute, share, borrow_limit}]}`` (``PUT /api/v1/teams/{name}``); the
flags build the same document, over a ``--file`` one where both are given. ``create`` refuses a
team that exists; ``update`` starts from the team as it is and replaces only what the flags name
(the members when any ``--member`` is given, the shares when any share flag is).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cloudlet.cli.compute import load_yaml_file, state
from cloudlet.cli.output import COLUMNS
from cloudlet.client._config import ConfigurationError
from cloudlet.client._rest import API_PREFIX, ResourceNotFoundError, quote_segment

app = typer.Typer(
    help="Teams: groups of users and their shares of a location's or a compute's cores (admin writes).",
    no_args_is_help=True,
)


def _pool(share: dict[str, Any]) -> str:
    if share.get("location") is not None:
        pool = str(share["location"])
    else:
        pool = f"{share.get('workspace')}/{share.get('compute')}"
    borrow = share.get("borrow_limit")
    return f"{pool}={share.get('share'):g}" + ("" if borrow is None else f":{borrow:g}")


COLUMNS.setdefault(
    "team",
    [
        ("NAME", lambda d: d.get("name")),
        ("MEMBERS", lambda d: ", ".join(d.get("members") or [])),
        ("SHARES", lambda d: ", ".join(_pool(s) for s in d.get("shares") or [])),
        ("DESCRIPTION", lambda d: d.get("description")),
    ],
)

NameOpt = Annotated[str | None, typer.Option("-n", "--name", help="Team name (default: the file's).")]
FileOpt = Annotated[str | None, typer.Option("-f", "--file", help="A team YAML file (- for stdin).")]
DescriptionOpt = Annotated[str | None, typer.Option("--description", help="What the team is.")]
MemberOpt = Annotated[
    list[str] | None, typer.Option("--member", help="A user in the team (repeatable; one team per user).")
]
LocationShareOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--location-share",
        help="LOCATION=SHARE[:BORROW]: a weight of the location's cores, and cores it may borrow beyond "
        "its entitlement (omitted: any idle; 0: never). Repeatable.",
    ),
]
ComputeShareOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--compute-share",
        help="COMPUTE=SHARE[:BORROW]: the same for one compute of the workspace (-w); a compute's own "
        "shares win over its location's. Repeatable.",
    ),
]
WorkspaceOpt = Annotated[
    str | None, typer.Option("-w", "--workspace", "--workspace-name", help="The computes' workspace.")
]


def _team_path(name: str) -> str:
    return f"{API_PREFIX}/teams/{quote_segment(name)}"


def parse_share(value: str, flag: str) -> tuple[str, float, float | None]:
    """``NAME=SHARE[:BORROW]`` → (name, share, borrow limit or None)."""
    pool, sep, rest = value.partition("=")
    share, _, borrow = rest.partition(":")
    try:
        if not sep or not pool:
            raise ValueError
        return pool, float(share), float(borrow) if borrow.strip() else None
    except ValueError:
        raise ConfigurationError(
            f"{flag} expects NAME=SHARE[:BORROW] (e.g. local=50 or local=50:8), got {value!r}"
        ) from None


def _number(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def build_team(
    base: dict[str, Any],
    *,
    description: str | None,
    members: list[str] | None,
    location_shares: list[str] | None,
    compute_shares: list[str] | None,
    workspace: str,
) -> dict[str, Any]:
    """BASE (a file's document, or the team as it is) with what the flags give in place."""
    doc = {k: v for k, v in base.items() if k in ("name", "description", "members", "shares")}
    if description is not None:
        doc["description"] = description
    if members:
        doc["members"] = list(members)
    if location_shares or compute_shares:
        shares: list[dict[str, Any]] = []
        for value in location_shares or []:
            pool, share, borrow = parse_share(value, "--location-share")
            shares.append({"location": pool, "share": _number(share), "borrow_limit": borrow})
        for value in compute_shares or []:
            pool, share, borrow = parse_share(value, "--compute-share")
            shares.append(
                {"workspace": workspace, "compute": pool, "share": _number(share), "borrow_limit": borrow}
            )
        doc["shares"] = shares
    return doc


def _name(name: str | None, doc: dict[str, Any]) -> str:
    found = name or doc.get("name")
    if not found:
        raise ConfigurationError("name the team: -n NAME (or name: in the file)")
    return str(found)


def _put(
    ctx: typer.Context,
    name: str | None,
    file: str | None,
    description: str | None,
    members: list[str] | None,
    location_shares: list[str] | None,
    compute_shares: list[str] | None,
    workspace: str | None,
    *,
    creating: bool,
) -> None:
    st = state(ctx)
    file_doc = load_yaml_file(file, "team") if file else {}
    team = _name(name, file_doc)
    path = _team_path(team)
    try:
        current: dict[str, Any] | None = st.rest.get(path)
    except ResourceNotFoundError:
        current = None
    if creating and current is not None:
        raise ConfigurationError(f"team '{team}' exists; change it with `cloudlet team update -n {team}`")
    if not creating and current is None:
        raise ConfigurationError(
            f"there is no team '{team}'; create it with `cloudlet team create -n {team}`"
        )
    base = file_doc if file or current is None else current
    needs_workspace = bool(compute_shares)
    doc = build_team(
        base,
        description=description,
        members=members,
        location_shares=location_shares,
        compute_shares=compute_shares,
        workspace=(workspace or st.config.require_workspace()) if needs_workspace else "",
    )
    doc["name"] = team
    st.emit(st.rest.put(path, doc), "team")


@app.command("create")
def create(
    ctx: typer.Context,
    name: NameOpt = None,
    file: FileOpt = None,
    description: DescriptionOpt = None,
    member: MemberOpt = None,
    location_share: LocationShareOpt = None,
    compute_share: ComputeShareOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Create a team (admin): its members and its shares of locations or computes."""
    _put(ctx, name, file, description, member, location_share, compute_share, workspace, creating=True)


@app.command("update")
def update(
    ctx: typer.Context,
    name: NameOpt = None,
    file: FileOpt = None,
    description: DescriptionOpt = None,
    member: MemberOpt = None,
    location_share: LocationShareOpt = None,
    compute_share: ComputeShareOpt = None,
    workspace: WorkspaceOpt = None,
) -> None:
    """Change a team (admin): --file replaces it; flags replace what they name (all its members, or
    all its shares) and keep the rest."""
    _put(ctx, name, file, description, member, location_share, compute_share, workspace, creating=False)


@app.command("show")
def show(ctx: typer.Context, name: Annotated[str, typer.Option("-n", "--name", help="Team name.")]) -> None:
    """One team: its members and shares."""
    st = state(ctx)
    st.emit(st.rest.get(_team_path(name)), "team")


@app.command("list")
def list_(ctx: typer.Context) -> None:
    """Every team, its members and shares."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{API_PREFIX}/teams"), "team")


@app.command("delete")
def delete(ctx: typer.Context, name: Annotated[str, typer.Option("-n", "--name", help="Team name.")]) -> None:
    """Delete a team (admin); its users fall to the default team of each pool."""
    st = state(ctx)
    st.rest.delete(_team_path(name))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="team")
