"""Creating a compute: the form (type, name, location, a size picker that shows each family's
quota left and greys out what does not fit, a cluster's min/max/idle/tier) and the CLI v2 YAML
(pasted, or a file the page reads into the text box). Both end in ``computes.create_or_update``,
the REST door's service; its validation errors are shown at their field."""

from __future__ import annotations

from typing import Any

import yaml
from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from cloudlet.api.deps import Context, context
from cloudlet.domain.access.roles import Access
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.errors import CloudletError
from cloudlet.services.compute import catalogue as catalogue_service
from cloudlet.services.compute import computes, locations, size_picker
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.studio import shell
from cloudlet.studio.session import StudioRoute, form_of, posted

router = APIRouter(route_class=StudioRoute, include_in_schema=False)  # under compute's prefix
WS = "/ws/{sub}/{rg}/{ws}/compute"
TYPES = (
    (ComputeType.COMPUTE_INSTANCE.value, "Compute instance"),
    (ComputeType.AMLCOMPUTE.value, "Compute cluster"),
)
NUMBERS = (
    "min_instances",
    "max_instances",
    "idle_time_before_scale_down",
    "idle_time_before_shutdown_minutes",
)
CLUSTER_ONLY = ("min_instances", "max_instances", "idle_time_before_scale_down", "tier")
# The other type's fields, carried hidden in the form so that switching type back keeps them.
OTHER_TYPE_FIELDS = {
    ComputeType.COMPUTE_INSTANCE.value: CLUSTER_ONLY,
    ComputeType.AMLCOMPUTE.value: ("idle_time_before_shutdown_minutes",),
}
DEFAULTS = {
    "type": ComputeType.COMPUTE_INSTANCE.value,
    "tier": Tier.DEDICATED.value,
    "min_instances": "0",
    "max_instances": "2",
    "idle_time_before_scale_down": "120",
    "idle_time_before_shutdown_minutes": "",
}
MOST_DIGITS = 6  # a node count the picker reads; a longer one is the create's to refuse
FORM_FIELDS = ("name", "type", "size", "location", "tier", "description", *NUMBERS)
EXAMPLE_YAML = """$schema: https://azuremlschemas.azureedge.net/latest/computeInstance.schema.json
name: my-instance
type: computeinstance
size: Standard_DS3_v2
idle_time_before_shutdown_minutes: 30
"""


def _kind(value: str | None) -> str:
    return value if value in dict(TYPES) else ComputeType.COMPUTE_INSTANCE.value


def _tier(value: str | None) -> Tier:
    return Tier.LOW_PRIORITY if value == Tier.LOW_PRIORITY.value else Tier.DEDICATED


def _nodes(kind: str, form: dict[str, str]) -> tuple[int, int]:
    """The nodes a size must hold: an instance one; a cluster its min_instances (what the create's
    quota check asks for) and its max_instances (what the picker counts). A number not yet valid
    counts as its default (the create itself reports it at its field)."""
    if kind != ComputeType.AMLCOMPUTE.value:
        return 1, 1
    counts = []
    for field in ("min_instances", "max_instances"):
        raw = (form.get(field) or DEFAULTS[field]).strip()
        counts.append(int(raw) if raw.isdigit() and len(raw) <= MOST_DIGITS else int(DEFAULTS[field]))
    return counts[0], max(counts)


def _sizes(
    ctx: Context, ref: WorkspaceRef, location: str, kind: str, tier: Tier, form: dict[str, str]
) -> list[size_picker.SizeChoice]:
    catalogue = catalogue_service.current(ctx.session)
    low, high = _nodes(kind, form)
    return size_picker.choices(
        ctx.session, ref.subscription_id, location, catalogue, kind, tier, min_nodes=low, max_nodes=high
    )


def _place(ws: Any, kind: str, asked: str | None, known: list[str]) -> str:
    """An instance lives in its workspace's location; a cluster may be placed in any."""
    if kind == ComputeType.COMPUTE_INSTANCE.value or asked not in known:
        return str(ws.location)
    return str(asked)


def _type_values(ctx: Context, ref: WorkspaceRef, ws: Any, form: dict[str, str]) -> dict[str, Any]:
    """What the type's fields (``compute_create_fields.html``) and the size picker are drawn from."""
    kind = _kind(form.get("type"))
    known = [row.name for row in locations.list_all(ctx.session)]
    place = _place(ws, kind, form.get("location"), known)
    tier = _tier(form.get("tier"))
    cluster = kind == ComputeType.AMLCOMPUTE.value
    return {
        "form": {**DEFAULTS, **form, "type": kind, "location": place, "tier": tier.value},
        "places": known if cluster else [ws.location],
        "sizes": _sizes(ctx, ref, place, kind, tier, form),
        "nodes_wanted": _nodes(kind, form)[1] if cluster else None,
        "kept": OTHER_TYPE_FIELDS[kind],
        "sizes_url": shell.ws_url(ref, "compute", "_sizes"),
        "fields_url": shell.ws_url(ref, "compute", "_fields"),
    }


def _form_page(
    ctx: Context,
    ref: WorkspaceRef,
    ws: Any,
    form: dict[str, str],
    errors: dict[str, str],
    status: int = 200,
    yaml_text: str = EXAMPLE_YAML,
) -> HTMLResponse:
    return shell.render(
        ctx,
        "compute_create.html",
        ref,
        ws,
        active="compute",
        status=status,
        errors=errors,
        types=TYPES,
        yaml_text=yaml_text,
        **_type_values(ctx, ref, ws, form),
    )


def _query_form(request: Request) -> dict[str, str]:
    return {k: v for k, v in request.query_params.items() if k in FORM_FIELDS}


@router.get(WS + "/_new")
def create_form(
    sub: str, rg: str, ws: str, type: str | None = None, ctx: Context = Depends(context)
) -> HTMLResponse:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    return _form_page(ctx, ref, workspace, {"type": _kind(type)}, {})


@router.get(WS + "/_sizes")
def size_choices(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """The size picker alone, for the form's type, location, tier and a cluster's node counts
    (htmx swaps it in when one of them changes)."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    values = _type_values(ctx, ref, workspace, _query_form(ctx.request))
    view = shell.WorkspaceView(workspace.id, ref, workspace.location)
    return shell.render_html(
        ctx.request,
        "compute_sizes.html",
        ctx.caller,
        view,
        sizes=values["sizes"],
        nodes_wanted=values["nodes_wanted"],
        chosen=values["form"].get("size") or "",
        errors={},
    )


@router.get(WS + "/_fields")
def type_fields(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> HTMLResponse:
    """The fields of the type chosen (htmx swaps them in place when the type changes), drawn with
    the values the form had: a value entered is kept."""
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    values = _type_values(ctx, ref, workspace, _query_form(ctx.request))
    view = shell.WorkspaceView(workspace.id, ref, workspace.location)
    return shell.render_html(ctx.request, "compute_create_fields.html", ctx.caller, view, errors={}, **values)


def body_of(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The form as the compute document the REST door takes, or the fields that are not valid."""
    kind = _kind(form.get("type"))
    body: dict[str, Any] = {"type": kind, "name": form.get("name", "").strip()}
    errors: dict[str, str] = {}
    if not body["name"]:
        errors["name"] = "a name is required"
    if form.get("size"):
        body["size"] = form["size"]
    else:
        errors["size"] = "choose a size"
    for field in ("location", "description"):
        if form.get(field, "").strip():
            body[field] = form[field].strip()
    if kind == ComputeType.AMLCOMPUTE.value:
        body["tier"] = _tier(form.get("tier")).value
    for field in NUMBERS:
        raw = form.get(field, "").strip()
        if not raw or (field in CLUSTER_ONLY) != (kind == ComputeType.AMLCOMPUTE.value):
            continue
        try:
            body[field] = int(raw)
        except ValueError:
            errors[field] = "a whole number"
    return body, errors


def _create(ctx: Context, ref: WorkspaceRef, ws: Any, body: dict[str, Any]) -> str:
    """The create, as the REST PUT makes it (but never over an existing compute); its operation's id."""
    name = str(body.get("name") or "")
    if computes.find(ctx.session, ws, name) is not None:
        raise CloudletError("ComputeExists", f"a compute named '{name}' already exists here", "name", 409)
    result = computes.create_or_update(ctx.session, ref, ws, name, body, ctx.caller, ctx.state.endpoint)
    return result.operation.id


def _field_of(exc: CloudletError, fields: tuple[str, ...]) -> str:
    target = (exc.target or "").split(".")[0]
    return target if target in fields else "form"


def _created(ref: WorkspaceRef, name: str, op_id: str) -> RedirectResponse:
    return RedirectResponse(shell.ws_url(ref, "compute", name) + f"?op={op_id}", status_code=303)


def _submit_form(ctx: Context, sub: str, rg: str, ws: str, form: dict[str, str]) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    body, errors = body_of(form)
    if not errors:
        try:
            return _created(ref, body["name"], _create(ctx, ref, workspace, body))
        except CloudletError as exc:
            if exc.status not in (400, 409):
                raise
            errors[_field_of(exc, FORM_FIELDS)] = exc.message
    return _form_page(ctx, ref, workspace, form, errors, status=400)


@router.post(WS + "/_new")
async def create_from_form(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    return await posted(request, _submit_form, ctx, sub, rg, ws)


def _submit_yaml(ctx: Context, sub: str, rg: str, ws: str, text: str) -> Response:
    workspace, ref = shell.open_workspace(ctx, sub, rg, ws, Access.WRITE)
    errors: dict[str, str] = {}
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        doc, errors["yaml"] = None, f"not valid YAML: {exc}"
    if not errors and (not isinstance(doc, dict) or not doc.get("name")):
        errors["yaml"] = "the YAML must be a mapping with a name (as examples/compute/*.yml)"
    if not errors:
        assert isinstance(doc, dict)
        try:
            return _created(ref, str(doc["name"]), _create(ctx, ref, workspace, doc))
        except CloudletError as exc:
            if exc.status not in (400, 409):
                raise
            where = f" (at {exc.target})" if exc.target else ""
            errors["yaml"] = exc.message + where
    return _form_page(ctx, ref, workspace, {"mode": "yaml"}, errors, status=400, yaml_text=text)


@router.post(WS + "/_yaml")
async def create_from_yaml(
    request: Request, sub: str, rg: str, ws: str, ctx: Context = Depends(context)
) -> Response:
    form = await form_of(request)
    response: Response = await run_in_threadpool(_submit_yaml, ctx, sub, rg, ws, form.get("yaml", ""))
    return response
