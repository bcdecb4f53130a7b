"""Administration (issue 28 item 5): users, their API keys and the workspace's role assignments.
The locations and sizes, locks and audit log tabs are ``admin_more.py``'s.

Every write is a service's use case (``identity``, ``api_keys``, ``role_assignments``), which checks
the caller's right and audits the change; the studio's route class binds the audit channel
(``studio``), so no handler passes it. Who sees which tab follows the same rules: users, locations,
sizes and the audit log are an administrator's; a workspace's roles and locks its Owner's; a user
sees their own keys. A key's secret is shown on the answer to the POST that made it, never again.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access, Role
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import api_keys, identity, role_assignments, workspaces
from cloudlet.services.access.api_keys import KeyAction
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.studio import shell
from cloudlet.studio.session import PREFIX, StudioRoute, posted

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
NAV = shell.NavItem("admin", "Admin", "admin", "admin", shown="role.assign")
WS = "/ws/{sub}/{rg}/{ws}/admin"
# (key, label, the action that shows it; None: anyone, for their own keys)
TABS: tuple[tuple[str, str, str | None], ...] = (
    ("users", "Users", "user.manage"),
    ("keys", "API keys", None),
    ("roles", "Role assignments", "role.assign"),
    ("teams", "Teams", None),  # anyone reads them (admin_teams.py); an administrator writes
    ("places", "Locations and sizes", "user.manage"),
    ("locks", "Locks", "lock.write"),
    ("audit", "Audit log", "user.manage"),
)
FORM_ERRORS = (400, 409)  # shown at the form; 403 and 404 are the studio's error page


def shown_at_form(exc: CloudletError, also: tuple[int, ...] = ()) -> None:
    """Raise EXC again unless the form shows it (FORM_ERRORS, and ALSO). The failed use case has
    rolled its own work back (``services/core/use_case``), so the page is drawn from a clean session."""
    if exc.status not in (*FORM_ERRORS, *also):
        raise exc


def tabs_for(caller: Caller, workspace_id: int) -> list[tuple[str, str]]:
    return [(k, label) for k, label, act in TABS if act is None or shell.can(caller, act, workspace_id)]


def render_tab(
    ctx: Context, ref: WorkspaceRef, ws: Any, tab: str, status: int = 200, **values: Any
) -> HTMLResponse:
    return shell.render(
        ctx,
        f"admin_{tab}.html",
        ref,
        ws,
        active=NAV.key,
        status=status,
        tab=tab,
        tabs=tabs_for(ctx.caller, ws.id),
        **values,
    )


def _back(ref: WorkspaceRef, tab: str, query: str = "") -> RedirectResponse:
    return RedirectResponse(shell.ws_url(ref, "admin", tab) + query, status_code=303)


@router.get(WS)
def admin_home(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    """The first tab the caller may open."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return _back(ref, tabs_for(ctx.caller, workspace.id)[0][0])


# -- users --------------------------------------------------------------------------------------
def _users_page(
    ctx: Context, ref: WorkspaceRef, ws: Any, error: str = "", name: str = "", status: int = 200
) -> HTMLResponse:
    identity.require_admin(ctx.caller, "the list of users")
    users = [identity.render_principal(p) for p in identity.list_principals(ctx.session)]
    return render_tab(ctx, ref, ws, "users", status, users=users, error=error, name=name)


@router.get(WS + "/users")
def users_tab(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return _users_page(ctx, ref, workspace)


def _create_user(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    name = form.get("name", "").strip()
    try:
        identity.add_principal(ctx.session, ctx.caller, name, form.get("is_admin") == "on")
    except CloudletError as exc:
        shown_at_form(exc)
        return _users_page(ctx, ref, workspace, exc.message, name, exc.status)
    return _back(ref, "users")


@router.post(WS + "/users")
async def create_user(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    return await posted(request, _create_user, ctx, sub, rg, ws)


def _set_enabled(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    try:
        identity.change_enabled(ctx.session, ctx.caller, form.get("name", ""), form.get("enabled") == "true")
    except CloudletError as exc:
        shown_at_form(exc)
        return _users_page(ctx, ref, workspace, exc.message, status=exc.status)
    return _back(ref, "users")


@router.post(WS + "/users/enabled")
async def set_enabled(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    """Disable a user (their keys, tokens and studio sessions stop) or enable them again."""
    return await posted(request, _set_enabled, ctx, sub, rg, ws)


# -- API keys -----------------------------------------------------------------------------------
def _keys_page(
    ctx: Context,
    ref: WorkspaceRef,
    ws: Any,
    user: str,
    issued: dict[str, Any] | None = None,
    error: str = "",
    status: int = 200,
) -> HTMLResponse:
    principal = api_keys.authorize(ctx.session, ctx.caller, user, KeyAction.LIST)
    keys = [api_keys.render(k, principal) for k in api_keys.list_keys(ctx.session, principal)]
    users = [p.name for p in identity.list_principals(ctx.session)] if ctx.caller.is_admin else [user]
    values = {"user": principal.name, "keys": keys, "users": users, "issued": issued, "error": error}
    return render_tab(ctx, ref, ws, "keys", status, **values)


@router.get(WS + "/keys")
def keys_tab(
    sub: str, rg: str, ws: str, user: str | None = None, ctx: Context = Depends(context)
) -> HTMLResponse:
    """A user's keys (an administrator picks the user; anyone else sees their own)."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return _keys_page(ctx, ref, workspace, user or ctx.caller.name)


def _key_action(ctx: Context, sub: str, rg: str, ws: str, action: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    user, key_id = form.get("user", ""), form.get("key_id", "")
    issued: dict[str, Any] | None = None
    try:
        if action == "create":
            days = form.get("expires_in_days", "").strip()
            issued = api_keys.create_key(ctx.session, ctx.caller, user, int(days) if days else None).render()
        elif action == "rotate":
            issued = api_keys.rotate_key(ctx.session, ctx.caller, user, key_id).render()
        else:
            api_keys.revoke_key(ctx.session, ctx.caller, user, key_id)
    except ValueError:
        return _keys_page(
            ctx, ref, workspace, user, error="the lifetime is a whole number of days", status=400
        )
    except CloudletError as exc:
        shown_at_form(exc)
        return _keys_page(ctx, ref, workspace, user, error=exc.message, status=exc.status)
    if issued is None:
        return _back(
            ref, "keys", f"?{urllib.parse.urlencode({'user': user})}" if user != ctx.caller.name else ""
        )
    # The secret is in this answer only (``no-store``): a reload of the list never shows it.
    return _keys_page(ctx, ref, workspace, user, issued=issued)


@router.post(WS + "/keys/{action}")
async def key_action(
    request: Request, sub: str, rg: str, ws: str, action: str, ctx: Context = Depends(context)
) -> Response:
    """Create, rotate or revoke a key (``action``): the services decide who may."""
    if action not in ("create", "rotate", "revoke"):
        raise CloudletError("NotFound", f"no key action '{action}'", status=404)
    return await posted(request, _key_action, ctx, sub, rg, ws, action)


# -- role assignments ---------------------------------------------------------------------------
def _roles_page(
    ctx: Context, ref: WorkspaceRef, error: str = "", principal: str = "", status: int = 200
) -> HTMLResponse:
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.MANAGE)
    rows = role_assignments.list_for(ctx.session, workspace)
    users = [p.name for p in identity.list_principals(ctx.session)] if ctx.caller.is_admin else []
    values = {"assignments": rows, "roles": [r.value for r in Role], "users": users}
    return render_tab(ctx, ref, workspace, "roles", status, error=error, principal=principal, **values)


@router.get(WS + "/roles")
def roles_tab(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    return _roles_page(ctx, WorkspaceRef(sub, rg, ws))


def _role_change(ctx: Context, ref: WorkspaceRef, remove: bool, form: dict[str, str]) -> Response:
    principal = form.get("principal", "").strip()
    # The workspace first: past this, a 404 is the user's or the assignment's (a typo at the form).
    workspaces.resolve(ctx.session, ref, ctx.caller, Access.MANAGE)
    try:
        if remove:
            role_assignments.remove(ctx.session, ref, ctx.caller, principal)
        else:
            role_assignments.put(ctx.session, ref, ctx.caller, principal, form.get("role", ""))
    except CloudletError as exc:
        shown_at_form(exc, also=(404,))
        return _roles_page(ctx, ref, exc.message, principal, exc.status)
    return _back(ref, "roles")


@router.post(WS + "/roles")
async def assign_role(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    return await posted(request, _role_change, ctx, ref, False)


@router.post(WS + "/roles/remove")
async def remove_role(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    ref = WorkspaceRef(sub, rg, ws)
    return await posted(request, _role_change, ctx, ref, True)
