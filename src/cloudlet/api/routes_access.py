"""Native REST routes for identity and access: tokens, users, API keys, role assignments, a
workspace's webhook signing secret and the audit log. Thin: parse, one service call, render; the
rules and the transactions (each write commits in its use case) live in
``services/access/identity.py``, ``services/access/api_keys.py``,
``services/access/role_assignments.py``, ``services/jobs/webhook_secrets.py`` and
``services/access/audit.py``.

Request bodies are typed and closed (unknown fields are refused, booleans must be JSON booleans,
numbers are bounded), so a malformed request is a 400 naming the field before anything is read.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt
from pydantic_core import PydanticCustomError

from cloudlet.api.deps import Context, context
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access, Role
from cloudlet.domain.jobs.webhook_secrets import DEFAULT_GRACE_HOURS, MAX_GRACE_HOURS
from cloudlet.domain.validation import WHOLE_FLOAT
from cloudlet.services.access import api_keys, audit, identity, role_assignments, workspaces
from cloudlet.services.access.api_keys import KeyAction
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import webhook_secrets

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
router = APIRouter(prefix="/api/v1", tags=["access"], route_class=UserRoute)


# -- request bodies ---------------------------------------------------------------------------
def _principal_name(value: str) -> str:
    if not identity.PRINCIPAL_NAME.fullmatch(value) or value.endswith(identity.IDENTITY_SUFFIX):
        raise PydanticCustomError(
            "principal_name",
            "a user name is 1 to 128 letters, digits and . _ @ -, starting with a letter or digit "
            "(names ending in '@identity' are the computes' own)",
        )
    return value


# StrictBool: {"is_admin": "false"} is refused (400 naming the field), where bool("false") made an
# administrator.
Flag = StrictBool
PRINCIPAL_PATTERN = f"^(?!.*{identity.IDENTITY_SUFFIX}$){identity.PRINCIPAL_NAME.pattern}$"
PrincipalName = Annotated[
    str,
    Field(max_length=128, json_schema_extra={"pattern": PRINCIPAL_PATTERN}),
    AfterValidator(_principal_name),
]
LifetimeDays = Annotated[StrictInt, Field(ge=1, le=api_keys.MAX_LIFETIME_DAYS), WHOLE_FLOAT]
GraceMinutes = Annotated[StrictInt, Field(ge=0, le=api_keys.MAX_ROTATION_GRACE_MINUTES), WHOLE_FLOAT]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PrincipalCreate(_Body):
    name: PrincipalName
    is_admin: Flag = False


class PrincipalUpdate(_Body):
    enabled: Flag


class KeyCreate(_Body):
    """Neither field: the key does not expire. ``expires_on`` without a zone is UTC."""

    expires_in_days: LifetimeDays | None = None
    expires_on: datetime | None = None


class KeyRotate(KeyCreate):
    """The new key lives as long as the old one was meant to, unless an expiry is given; the old
    key stops at once, or after ``grace_minutes``."""

    grace_minutes: GraceMinutes = 0


class WebhookSecretRotate(_Body):
    """The replaced secret (the server's, on the first rotation) keeps signing beside the new one
    for ``grace_hours`` (0: it stops at once)."""

    grace_hours: Annotated[StrictInt, Field(ge=0, le=MAX_GRACE_HOURS), WHOLE_FLOAT] = DEFAULT_GRACE_HOURS


class RoleAssignmentPut(_Body):
    role: Annotated[
        str,
        Field(
            min_length=1,
            max_length=32,
            description="Owner, Contributor or Reader (any case)",
            json_schema_extra={"enum": [role.value for role in Role]},
        ),
    ]


# -- tokens and who am I ----------------------------------------------------------------------
@router.post("/auth/token")
def access_token(ctx: Context = Depends(context)) -> dict[str, Any]:
    """A short-lived token tied to the caller's key: it ends when the key is revoked or expires."""
    token, expires = identity.mint_for(ctx.session, ctx.caller, ctx.state.token_secret)
    return {"access_token": token, "token_type": "Bearer", "expires_on": expires}


@router.get("/whoami")
def whoami(ctx: Context = Depends(context)) -> dict[str, Any]:
    return {
        "principal": ctx.caller.name,
        "is_admin": ctx.caller.is_admin,
        "key_id": ctx.caller.key_id,
        "roles": [{"workspace_id": ws, "role": role.value} for ws, role in ctx.caller.roles.items()],
    }


# -- users ------------------------------------------------------------------------------------
@router.get("/principals")
def list_principals(ctx: Context = Depends(context)) -> dict[str, Any]:
    identity.require_admin(ctx.caller, "the list of users")
    return {"value": [identity.render_principal(p) for p in identity.list_principals(ctx.session)]}


@router.post("/principals", status_code=201)
def create_principal(body: PrincipalCreate, ctx: Context = Depends(context)) -> dict[str, Any]:
    principal = identity.add_principal(ctx.session, ctx.caller, body.name, body.is_admin)
    return identity.render_principal(principal)


@router.patch("/principals/{name}")
def update_principal(name: str, body: PrincipalUpdate, ctx: Context = Depends(context)) -> dict[str, Any]:
    """Disable a user (every key and token of theirs stops working) or enable them again."""
    principal = identity.change_enabled(ctx.session, ctx.caller, name, body.enabled)
    return identity.render_principal(principal)


# -- API keys ---------------------------------------------------------------------------------
@router.get("/principals/{name}/keys")
def list_keys(name: str, ctx: Context = Depends(context)) -> dict[str, Any]:
    principal = api_keys.authorize(ctx.session, ctx.caller, name, KeyAction.LIST)
    return {"value": [api_keys.render(k, principal) for k in api_keys.list_keys(ctx.session, principal)]}


@router.post("/principals/{name}/keys", status_code=201)
def create_key(
    name: str,
    body: Annotated[KeyCreate, Body(default_factory=KeyCreate)],
    ctx: Context = Depends(context),
) -> dict[str, Any]:
    """A new key; its secret is in this answer only. No body: a key that does not expire."""
    issued = api_keys.create_key(ctx.session, ctx.caller, name, body.expires_in_days, body.expires_on)
    return issued.render()


@router.delete("/principals/{name}/keys/{key_id}", status_code=204)
def revoke_key(name: str, key_id: str, ctx: Context = Depends(context)) -> Response:
    """Revoke a key (again: still 204); tokens minted from it stop working too."""
    api_keys.revoke_key(ctx.session, ctx.caller, name, key_id)
    return Response(status_code=204)


@router.post("/principals/{name}/keys/{key_id}/rotate", status_code=201)
def rotate_key(
    name: str,
    key_id: str,
    body: Annotated[KeyRotate, Body(default_factory=KeyRotate)],
    ctx: Context = Depends(context),
) -> dict[str, Any]:
    """A new key in place of this one; the new secret is in this answer only."""
    rotation = api_keys.rotate_key(
        ctx.session, ctx.caller, name, key_id, body.grace_minutes, body.expires_in_days, body.expires_on
    )
    return rotation.render()


# -- role assignments -------------------------------------------------------------------------
@router.get(WS + "/roleAssignments")
def list_role_assignments(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> dict[str, Any]:
    workspace = workspaces.resolve(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, Access.MANAGE)
    return {"value": role_assignments.list_for(ctx.session, workspace)}


@router.put(WS + "/roleAssignments/{principal}")
def assign_role(
    sub: str, rg: str, ws: str, principal: str, body: RoleAssignmentPut, ctx: Context = Depends(context)
) -> dict[str, Any]:
    return role_assignments.put(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, principal, body.role)


@router.delete(WS + "/roleAssignments/{principal}", status_code=204)
def remove_role(sub: str, rg: str, ws: str, principal: str, ctx: Context = Depends(context)) -> Response:
    role_assignments.remove(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, principal)
    return Response(status_code=204)


# -- a workspace's webhook signing secret -----------------------------------------------------
@router.get(WS + "/webhookSecret")
def show_webhook_secret(sub: str, rg: str, ws: str, ctx: Context = Depends(context)) -> dict[str, Any]:
    """Whether the workspace signs its webhooks with a secret of its own (never the secret)."""
    return webhook_secrets.show(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller)


@router.post(WS + "/webhookSecret/rotate", status_code=201)
def rotate_webhook_secret(
    sub: str,
    rg: str,
    ws: str,
    body: Annotated[WebhookSecretRotate, Body(default_factory=WebhookSecretRotate)],
    ctx: Context = Depends(context),
) -> dict[str, Any]:
    """A new signing secret for the workspace's webhooks (its first, or in place of the current
    one); the secret is in this answer only."""
    ref = WorkspaceRef(sub, rg, ws)
    return webhook_secrets.rotate(ctx.session, ref, ctx.caller, body.grace_hours).render()


# -- audit log --------------------------------------------------------------------------------
@router.get("/audit")
def list_audit(
    ctx: Context = Depends(context),
    since: Annotated[datetime | None, Query(description="From this time (ISO 8601; UTC if no zone)")] = None,
    until: Annotated[datetime | None, Query(description="Before this time")] = None,
    actor: Annotated[str | None, Query(max_length=160)] = None,
    action: Annotated[str | None, Query(max_length=64, description="An action, or a kind: compute")] = None,
    target: Annotated[str | None, Query(max_length=1024, description="A resource and all under it")] = None,
    channel: Annotated[
        str | None, Query(pattern=f"^({'|'.join(audit.CHANNELS)})$", description="The front door")
    ] = None,
    top: Annotated[int, Query(alias="$top", ge=1, le=audit.MAX_PAGE)] = audit.DEFAULT_PAGE,
    skip_token: Annotated[str | None, Query(alias="$skipToken", max_length=256)] = None,
) -> dict[str, Any]:
    """Who changed what, newest first; ``nextLink`` continues when there is more."""
    identity.require_admin(ctx.caller, "the audit log")
    query = audit.AuditQuery(
        since=since, until=until, actor=actor, action=action, target=target, channel=channel
    )
    page = audit.read(ctx.session, query, top, skip_token)
    body: dict[str, Any] = {"value": [audit.render(e) for e in page.entries]}
    if page.skip_token is not None:
        body["nextLink"] = str(ctx.request.url.include_query_params(**{"$skipToken": page.skip_token}))
    return body
