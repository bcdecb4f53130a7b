"""Administration → Teams (issue 31): the teams, their members and their shares of pools; an
administrator creates or edits one from a form (members picked from the users, one row per share:
a location or one of this workspace's clusters, its weight and borrow limit) or from the YAML
``cloudlet team create --file`` takes, and deletes one after the confirm dialog.

Every write is ``services.access.teams``' use case (the REST door's), which checks the caller is an
administrator and audits the change; the studio's route class binds the audit channel. Anyone
signed in reads the list (as ``GET /api/v1/teams``); only an administrator sees the buttons.
"""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from cloudlet.api.deps import Context, context
from cloudlet.domain.access.teams import TeamDocument, check_team_name
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.services.access import identity, teams
from cloudlet.services.compute import computes, locations
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import job_documents
from cloudlet.studio import shell
from cloudlet.studio.pages.admin import NAV, WS, render_tab, shown_at_form, tabs_for
from cloudlet.studio.session import PREFIX, StudioRoute, form_lists_of

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
TAB = "teams"
EMPTY_ROWS = 2  # blank share rows under a team's own (a team with more saves and edits again)
MOST_ROWS = 50  # share rows a posted form is read for
EXAMPLE_YAML = """name: vision
description: the vision team
members: []
shares:
- location: local
  share: 50
  borrow_limit: 8
"""


def _back(ref: WorkspaceRef) -> RedirectResponse:
    return RedirectResponse(shell.ws_url(ref, "admin", TAB), status_code=303)


@router.get(WS + "/teams")
def teams_tab(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """Every team with its members and shares."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return render_tab(ctx, ref, workspace, TAB, teams=teams.list_teams(ctx.session))


# -- the form -----------------------------------------------------------------------------------
def _pool_key(share: dict[str, Any]) -> str:
    if share.get("location"):
        return f"location:{share['location']}"
    return f"compute:{share.get('resource_group') or ''}/{share.get('workspace')}/{share.get('compute')}"


def _pools(ctx: Context, ref: WorkspaceRef, ws: Any, rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The pools a share row may name: every location, this workspace's clusters, and any pool the
    team already has a share of (another workspace's cluster)."""
    options = [(f"location:{p.name}", f"Location {p.name}") for p in locations.list_all(ctx.session)]
    options += [
        (f"compute:{ref.resource_group}/{ref.workspace}/{c.name}", f"Cluster {c.name} ({ref.workspace})")
        for c in computes.list_all(ctx.session, ws)
        if c.type == ComputeType.AMLCOMPUTE
    ]
    known = {key for key, _ in options}
    for row in rows:
        key = row["pool"]
        if key and key not in known:
            kind, _, rest = key.partition(":")
            parts = ["", "", *rest.split("/")]
            workspace, name = parts[-2], parts[-1]
            options.append(
                (key, f"Location {rest}" if kind == "location" else f"Cluster {name} ({workspace})")
            )
            known.add(key)
    return options


def _number_text(value: Any) -> str:
    return "" if value is None else f"{float(value):g}"


def _form_page(
    ctx: Context,
    ref: WorkspaceRef,
    ws: Any,
    form: dict[str, Any],
    *,
    editing: bool,
    error: str = "",
    yaml_text: str | None = None,
    status: int = 200,
) -> HTMLResponse:
    identity.require_admin(ctx.caller, "changing teams")
    rows = list(form.get("rows") or [])
    rows += [{"pool": "", "share": "", "borrow": ""} for _ in range(EMPTY_ROWS)]
    users = [p.name for p in identity.list_principals(ctx.session)]
    values = {
        "form": form,
        "rows": rows,
        "pools": _pools(ctx, ref, ws, rows),
        "users": users,
        "editing": editing,
        "yaml_text": EXAMPLE_YAML if yaml_text is None else yaml_text,
    }
    return shell.render(
        ctx,
        "admin_team_edit.html",
        ref,
        ws,
        active=NAV.key,
        status=status,
        tab=TAB,
        tabs=tabs_for(ctx.caller, ws.id),
        error=error,
        **values,
    )


def _form_of_team(team: dict[str, Any]) -> dict[str, Any]:
    rows = [
        {
            "pool": _pool_key(s),
            "share": _number_text(s["share"]),
            "borrow": _number_text(s["borrow_limit"]),
        }
        for s in team["shares"]
    ]
    return {
        "name": team["name"],
        "description": team["description"] or "",
        "members": team["members"],
        "rows": rows,
    }


def _yaml_of(team: dict[str, Any]) -> str:
    """The team as ``cloudlet team create --file`` takes it (the REST door's document)."""
    doc = {key: team[key] for key in ("name", "description", "members", "shares")}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


@router.get(WS + "/teams/_new")  # "_": no team name starts so
def new_team(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return _form_page(ctx, ref, workspace, {"members": [], "rows": []}, editing=False)


@router.get(WS + "/teams/{team}")
def edit_team(sub: str, rg: str, ws: str, team: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    identity.require_admin(ctx.caller, "changing teams")
    shown = teams.get_team(ctx.session, team)
    return _form_page(ctx, ref, workspace, _form_of_team(shown), editing=True, yaml_text=_yaml_of(shown))


# -- writes -------------------------------------------------------------------------------------
def _shown(form: dict[str, list[str]]) -> dict[str, Any]:
    """The posted form as the page draws it again (its rows as typed, blank ones left out)."""

    def one(key: str) -> str:
        return (form.get(key) or [""])[0]

    rows = []
    for i in range(MOST_ROWS):
        row = {
            "pool": one(f"pool_{i}").strip(),
            "share": one(f"share_{i}").strip(),
            "borrow": one(f"borrow_{i}").strip(),
        }
        if row["pool"] or row["share"] or row["borrow"]:
            rows.append(row)
    members = [m for m in form.get("members", []) if m]
    return {"name": one("name").strip(), "description": one("description"), "members": members, "rows": rows}


def _document(shown: dict[str, Any]) -> TeamDocument:
    """The team document the form describes; a row's problem names its field."""
    shares = [_share_entry(i, r["pool"], r["share"], r["borrow"]) for i, r in enumerate(shown["rows"])]
    description = str(shown["description"]).strip() or None
    return TeamDocument.model_validate(
        {"description": description, "members": shown["members"], "shares": shares}
    )


def _share_entry(i: int, pool: str, share: str, borrow: str) -> dict[str, Any]:
    kind, _, rest = pool.partition(":")
    entry: dict[str, Any]
    if kind == "location" and rest:
        entry = {"location": rest}
    elif kind == "compute" and rest.count("/") == 2:
        rg, ws, compute = rest.split("/")
        entry = {"workspace": ws, "resource_group": rg or None, "compute": compute}
    else:
        raise validation_error(f"shares[{i}].pool", f"share row {i + 1}: choose a location or a cluster")
    for key, text, what in (("share", share, "a weight > 0"), ("borrow_limit", borrow, "cores, or empty")):
        if not text and key == "borrow_limit":
            entry[key] = None
            continue
        try:
            entry[key] = float(text)
        except ValueError:
            raise validation_error(
                f"shares[{i}].{key}", f"share row {i + 1}: {key.replace('_', ' ')} is {what}, not {text!r}"
            ) from None
    return entry


def _save_form(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, list[str]]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    editing = (form.get("editing") or [""])[0] == "1"
    shown = _shown(form)
    try:
        check_team_name(shown["name"])
        try:
            doc = _document(shown)
        except ValidationError as exc:
            raise _field_error(exc) from None
        teams.put_team(ctx.session, ctx.caller, shown["name"], doc)
    except CloudletError as exc:
        shown_at_form(exc)
        error = (
            f"{exc.target}: {exc.message}" if exc.target and exc.target not in exc.message else exc.message
        )
        return _form_page(
            ctx,
            ref,
            workspace,
            shown,
            editing=editing,
            error=error,
            yaml_text=EXAMPLE_YAML,
            status=exc.status,
        )
    return _back(ref)


def _field_error(exc: ValidationError) -> CloudletError:
    problem = exc.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "yaml"
    return validation_error(where, f"{where}: {problem['msg']}")


@router.post(WS + "/teams")
async def save_team(
    sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """Create or replace a team from the form (administrators; the service decides)."""
    form = await form_lists_of(request)
    return await run_in_threadpool(_save_form, ctx, sub, rg, ws, form)


def _save_yaml(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, list[str]]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    text = (form.get("yaml") or [""])[0]
    try:
        raw = job_documents.parse_yaml(text)
        name = str(raw.get("name") or "")
        if not name:
            raise validation_error("name", "the YAML needs a name: (the team's)")
        check_team_name(name)
        try:
            doc = TeamDocument.model_validate(raw)
        except ValidationError as exc:
            raise _field_error(exc) from None
        teams.put_team(ctx.session, ctx.caller, name, doc)
    except CloudletError as exc:
        shown_at_form(exc)
        error = (
            f"{exc.target}: {exc.message}" if exc.target and exc.target not in exc.message else exc.message
        )
        empty: dict[str, Any] = {"members": [], "rows": []}
        return _form_page(
            ctx, ref, workspace, empty, editing=False, error=error, yaml_text=text, status=exc.status
        )
    return _back(ref)


@router.post(WS + "/teams/_yaml")
async def save_team_yaml(
    sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """Create or replace a team from YAML (``cloudlet team create --file``'s document)."""
    form = await form_lists_of(request)
    return await run_in_threadpool(_save_yaml, ctx, sub, rg, ws, form)


def _delete(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, list[str]]) -> Response:
    _, ref = shell.open_workspace(ctx, sub, rg, ws)
    teams.delete_team(ctx.session, ctx.caller, (form.get("name") or [""])[0])
    return _back(ref)


@router.post(WS + "/teams/_delete")
async def delete_team(
    sub: str, rg: str, ws: str, request: Request, ctx: Context = Depends(context)
) -> Response:
    """Delete a team (after the confirm dialog): its users fall to each pool's default team."""
    form = await form_lists_of(request)
    return await run_in_threadpool(_delete, ctx, sub, rg, ws, form)
