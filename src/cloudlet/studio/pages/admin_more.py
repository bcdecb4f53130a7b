"""Administration, continued: locations and sizes (an administrator's), the workspace's locks (its
Owner's) and the audit log (an administrator's: filters, keyset pages, newest first)."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError

from cloudlet.api.deps import Context, context
from cloudlet.domain.compute.locks import LockLevel
from cloudlet.domain.compute.sizes import CustomSizeSpec
from cloudlet.domain.errors import CloudletError, validation_error
from cloudlet.services.access import audit, identity
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import locations, lock_scope
from cloudlet.services.compute import locks as lock_store
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.studio import shell
from cloudlet.studio.pages.admin import WS, _back, render_tab, shown_at_form
from cloudlet.studio.session import PREFIX, StudioRoute, posted

router = APIRouter(prefix=PREFIX, route_class=StudioRoute, include_in_schema=False)
AUDIT_PAGE = 50


# -- locations and sizes ------------------------------------------------------------------------
def _places_page(
    ctx: Context,
    ref: WorkspaceRef,
    ws: Any,
    error: str = "",
    status: int = 200,
    form: dict[str, str] | None = None,
) -> HTMLResponse:
    identity.require_admin(ctx.caller, "the list of locations and sizes")
    places = [locations.render(row) for row in locations.list_all(ctx.session)]
    catalogue = catalogue_service.current(ctx.session)
    sizes = [
        {**size.to_dict(), "category": catalogue.series_of(size).category} for size in catalogue.list_sizes()
    ]
    values = {"places": places, "sizes": sizes, "form": form or {}}
    return render_tab(ctx, ref, ws, "places", status, error=error, **values)


@router.get(WS + "/places")
def places_tab(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """Every location with its provider and capacity, and the size catalogue with its prices."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return _places_page(ctx, ref, workspace)


SIZE_FIELDS = ("name", "vcpus", "memory_gb", "gpus", "family", "price_dedicated", "price_low_priority")


def _add_size(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    given = {k: form[k].strip() for k in SIZE_FIELDS if form.get(k, "").strip()}
    try:
        try:
            spec = CustomSizeSpec.model_validate(given)  # pydantic converts the form's text
        except ValidationError as exc:
            problem = exc.errors()[0]
            field = str(problem["loc"][0]) if problem["loc"] else "size"
            raise validation_error(field, f"{field}: {problem['msg']}") from None
        catalogue_service.add_size(ctx.session, ctx.caller, spec)
    except CloudletError as exc:
        shown_at_form(exc)
        return _places_page(ctx, ref, workspace, exc.message, exc.status, form)
    return _back(ref, "places")


@router.post(WS + "/places/sizes")
async def add_size(request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    """An administrator's own size (the site's hardware), as ``POST /api/v1/sizes`` adds one."""
    return await posted(request, _add_size, ctx, sub, rg, ws)


# -- locks --------------------------------------------------------------------------------------
def _locks_page(
    ctx: Context, ref: WorkspaceRef, ws: Any, error: str = "", status: int = 200, **form: str
) -> HTMLResponse:
    scope = lock_scope.scope_for(ctx.session, ctx.caller, ref, None, write=False)
    found = lock_store.all_in_workspace(ctx.session, ref)
    rows = [lock_store.render(lk) | {"here": lk.scope == scope} for lk in found]
    rows.sort(key=lambda r: (len(r["scope"]), r["scope"], r["name"]))
    levels = [level.value for level in LockLevel]
    return render_tab(ctx, ref, ws, "locks", status, locks=rows, levels=levels, error=error, form=form)


@router.get(WS + "/locks")
def locks_tab(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """The locks that bind the workspace: above it (inherited), on it, and on its computes."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    return _locks_page(ctx, ref, workspace)


def _lock_change(ctx: Context, sub: str, rg: str, ws: str, remove: bool, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    name = form.get("name", "").strip()
    try:
        scope = lock_scope.scope_for(ctx.session, ctx.caller, ref, None, write=True)
        if remove:
            lock_store.remove(ctx.session, scope, name, ctx.caller.name)
        else:
            try:
                update = lock_store.LockUpdate(level=form.get("level", ""), notes=form.get("notes") or None)
            except ValidationError as exc:
                field = str(exc.errors()[0]["loc"][0])
                raise validation_error(field, f"{field}: {exc.errors()[0]['msg']}") from None
            lock_store.put(ctx.session, scope, name, update, ctx.caller.name)
    except CloudletError as exc:
        shown_at_form(exc)
        return _locks_page(
            ctx, ref, workspace, exc.message, exc.status, name=name, notes=form.get("notes", "")
        )
    return _back(ref, "locks")


@router.post(WS + "/locks")
async def put_lock(request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> Response:
    """A lock on the workspace (its Owner's), or a new level or notes for one there."""
    return await posted(request, _lock_change, ctx, sub, rg, ws, False)


@router.post(WS + "/locks/remove")
async def remove_lock(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    return await posted(request, _lock_change, ctx, sub, rg, ws, True)


# -- the audit log ------------------------------------------------------------------------------
def _when(text: str | None, field: str) -> datetime | None:
    """A ``datetime-local`` field's value (the page says it is UTC), or nothing."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise validation_error(field, f"{field}: '{text}' is not a date and time") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@router.get(WS + "/audit")
def audit_tab(
    sub: str,
    rg: str,
    ws: str,
    actor: str = "",
    action: str = "",
    target: str = "",
    channel: str = "",
    since: str = "",
    until: str = "",
    after: str | None = None,
    ctx: Context = Depends(context),
) -> HTMLResponse:
    """Who changed what, newest first, 50 a page; the filters are the URL's query (bookmarkable)."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws)
    identity.require_admin(ctx.caller, "the audit log")
    filters = {
        "actor": actor.strip(),
        "action": action.strip(),
        "target": target.strip(),
        "channel": channel,
        "since": since,
        "until": until,
    }
    error, entries, next_token = "", [], None
    try:
        query = audit.AuditQuery(
            since=_when(since, "since"),
            until=_when(until, "until"),
            actor=filters["actor"] or None,
            action=filters["action"] or None,
            target=filters["target"] or None,
            channel=channel or None,
        )
        page = audit.read(ctx.session, query, AUDIT_PAGE, after)
        # The details as readable JSON text (autoescaped in the page; ``tojson`` would show \u003c).
        entries = [
            {
                **audit.render(e),
                "details_text": json.dumps(e.details or {}, ensure_ascii=False, sort_keys=True),
            }
            for e in page.entries
        ]
        next_token = page.skip_token
    except CloudletError as exc:
        if exc.status != 400:
            raise
        error = exc.message
    kept = {k: v for k, v in filters.items() if v}
    next_url = f"?{urllib.parse.urlencode({**kept, 'after': next_token})}" if next_token else None
    values = {
        "entries": entries,
        "next_url": next_url,
        "channels": audit.CHANNELS,
        "paged": after is not None,
    }
    return render_tab(
        ctx, ref, workspace, "audit", 400 if error else 200, filters=filters, error=error, **values
    )
