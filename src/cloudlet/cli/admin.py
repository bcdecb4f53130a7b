"""``cloudlet quota|lock|workspace|auth|user|role|audit …``."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated

import typer

from cloudlet.cli.compute import state
from cloudlet.cli.output import OutputFormat, err_console
from cloudlet.client._config import ConfigurationError
from cloudlet.client._rest import API_PREFIX, quote_segment, rg_path
from cloudlet.client.access import AuditOperations
from cloudlet.client.operations import _Scope
from cloudlet.domain.jobs.webhook_secrets import DEFAULT_GRACE_HOURS, MAX_GRACE_HOURS

quota_app = typer.Typer(help="View and set core quotas per location and VM family.", no_args_is_help=True)
lock_app = typer.Typer(
    help="Management locks on a resource group, workspace or compute.", no_args_is_help=True
)
workspace_app = typer.Typer(help="Workspaces.", no_args_is_help=True)
webhook_secret_app = typer.Typer(
    help="The workspace's secret that signs its job-notification webhooks (Owner).", no_args_is_help=True
)
workspace_app.add_typer(webhook_secret_app, name="webhook-secret")
auth_app = typer.Typer(help="Tokens and identity.", no_args_is_help=True)
user_app = typer.Typer(
    help="Users (principals) and their API keys (admin; users may list, revoke and rotate their own).",
    no_args_is_help=True,
)
role_app = typer.Typer(help="Role assignments on a workspace.", no_args_is_help=True)
audit_app = typer.Typer(help="The audit log: who changed what (admin).", no_args_is_help=True)

LocationOpt = Annotated[str | None, typer.Option("-l", "--location", help="Location (default from config).")]


def parse_tags(tags: list[str] | None) -> dict[str, str] | None:
    """``["k=v", …]`` → ``{"k": "v"}``; ``None`` when no tag was given."""
    if not tags:
        return None
    out: dict[str, str] = {}
    for tag in tags:
        key, sep, value = tag.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"--tag expects KEY=VALUE, got {tag!r}")
        out[key] = value
    return out


# --- quota ------------------------------------------------------------------------------------


@quota_app.command("show")
def quota_show(ctx: typer.Context, location: LocationOpt = None) -> None:
    """Core quotas (limits) in a location."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{st.location_path(location)}/quotas"), "quota")


@quota_app.command("set")
def quota_set(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name", help="VM family (e.g. standardNCFamily) or total.")],
    limit: Annotated[int, typer.Option("--limit", help="Core limit.")],
    location: LocationOpt = None,
) -> None:
    """Set a core quota (admin)."""
    st = state(ctx)
    path = f"{st.location_path(location)}/quotas/{quote_segment(name)}"
    st.emit(st.rest.put(path, {"limit": limit}), "quota")


# --- lock -------------------------------------------------------------------------------------


class LockScope(StrEnum):
    resource_group = "resource-group"
    workspace = "workspace"


class LockLevel(StrEnum):
    CanNotDelete = "CanNotDelete"
    ReadOnly = "ReadOnly"


ScopeOpt = Annotated[LockScope, typer.Option("--scope", help="Scope when --compute is not given.")]
ComputeOpt = Annotated[str | None, typer.Option("--compute", help="Lock a single compute.")]


def _lock_scope(ctx: typer.Context, scope: LockScope, compute: str | None) -> str:
    st = state(ctx)
    if compute:
        return st.compute_path(compute)
    if scope is LockScope.resource_group:
        cfg = st.config
        return rg_path(cfg.require_subscription(), cfg.require_resource_group())
    return st.ws_path()


@lock_app.command("create")
def lock_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name", help="Lock name.")],
    level: Annotated[LockLevel, typer.Option("--level", "--lock-type")] = LockLevel.CanNotDelete,
    notes: Annotated[str | None, typer.Option("--notes")] = None,
    scope: ScopeOpt = LockScope.workspace,
    compute: ComputeOpt = None,
) -> None:
    """Create or update a lock (a resource-group lock blocks cluster scaling: prefer item locks)."""
    st = state(ctx)
    body: dict[str, str] = {"level": level.value}
    if notes is not None:
        body["notes"] = notes
    path = f"{_lock_scope(ctx, scope, compute)}/locks/{quote_segment(name)}"
    st.emit(st.rest.put(path, body), "lock")


@lock_app.command("list")
def lock_list(ctx: typer.Context, scope: ScopeOpt = LockScope.workspace, compute: ComputeOpt = None) -> None:
    """Locks at a scope, including those inherited from above."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{_lock_scope(ctx, scope, compute)}/locks"), "lock")


@lock_app.command("delete")
def lock_delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Option("-n", "--name", help="Lock name.")],
    scope: ScopeOpt = LockScope.workspace,
    compute: ComputeOpt = None,
) -> None:
    """Delete a lock."""
    st = state(ctx)
    st.rest.delete(f"{_lock_scope(ctx, scope, compute)}/locks/{quote_segment(name)}")
    err_console.print(f"lock '{name}' deleted", highlight=False, markup=False)


# --- workspace --------------------------------------------------------------------------------


@workspace_app.command("create")
def workspace_create(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option("-n", "--name", help="Workspace name (default -w).")] = None,
    location: LocationOpt = None,
    description: Annotated[str | None, typer.Option("--description")] = None,
    tag: Annotated[list[str] | None, typer.Option("--tag", help="KEY=VALUE, repeatable.")] = None,
    allow_ssh: Annotated[
        bool | None,
        typer.Option(
            "--allow-ssh-public-access/--forbid-ssh-public-access",
            help="Policy: may compute instances in this workspace enable public SSH access?",
        ),
    ] = None,
    default_instance_type: Annotated[
        str | None,
        typer.Option(
            "--default-instance-type",
            help="Size that jobs without `compute` run serverless on (default Standard_DS3_v2; '' resets).",
        ),
    ] = None,
    storage_quota_gib: Annotated[
        int | None,
        typer.Option(
            "--storage-quota-gib",
            min=0,
            help="GiB the workspace's data may take (default: the server's, 100 GiB; 0 resets).",
        ),
    ] = None,
) -> None:
    """Create or update a workspace (admin); the resource group is created if missing."""
    st = state(ctx)
    body: dict[str, object] = {"location": location or st.config.location or "local"}
    if description is not None:
        body["description"] = description
    if allow_ssh is not None:
        body["allow_ssh_public_access"] = allow_ssh
    if default_instance_type is not None:
        body["default_instance_type"] = default_instance_type or None
    if storage_quota_gib is not None:
        body["storage_quota_gib"] = storage_quota_gib or None
    tags = parse_tags(tag)
    if tags is not None:
        body["tags"] = tags
    st.emit(st.rest.put(st.ws_path(name), body), "workspace")


@workspace_app.command("show")
def workspace_show(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Option("-n", "--name", help="Workspace name (default -w).")] = None,
) -> None:
    """Show a workspace."""
    st = state(ctx)
    st.emit(st.rest.get(st.ws_path(name)), "workspace")


@workspace_app.command("list")
def workspace_list(ctx: typer.Context) -> None:
    """Workspaces the caller can read."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{API_PREFIX}/workspaces"), "workspace")


WorkspaceNameOpt = Annotated[str | None, typer.Option("-n", "--name", help="Workspace name (default -w).")]


@webhook_secret_app.command("rotate")
def webhook_secret_rotate(
    ctx: typer.Context,
    name: WorkspaceNameOpt = None,
    grace_hours: Annotated[
        int,
        typer.Option(
            "--grace-hours",
            min=0,
            max=MAX_GRACE_HOURS,
            help="Hours the replaced secret (the server's, the first time) signs beside the new one.",
        ),
    ] = DEFAULT_GRACE_HOURS,
) -> None:
    """A new webhook signing secret (the first, or in place of the current one); shown only once
    (table output: the bare secret)."""
    st = state(ctx)
    body = st.rest.post(f"{st.ws_path(name)}/webhookSecret/rotate", {"grace_hours": grace_hours})
    if st.output is not OutputFormat.table:
        st.emit(body)
        return
    typer.echo(body.get("secret", ""))
    until = body.get("previous_valid_until")
    lines = [f"the replaced secret signs beside it until {until}" if until else "the replaced one stopped"]
    lines.append("store this secret now (with your webhook receivers): it is not shown again")
    err_console.print("\n".join(lines), highlight=False, markup=False)


@webhook_secret_app.command("show")
def webhook_secret_show(ctx: typer.Context, name: WorkspaceNameOpt = None) -> None:
    """Whether the workspace has its own webhook secret, when it was rotated (never the secret)."""
    st = state(ctx)
    st.emit(st.rest.get(f"{st.ws_path(name)}/webhookSecret"))


# --- auth -------------------------------------------------------------------------------------


@auth_app.command("token")
def auth_token(ctx: typer.Context) -> None:
    """Print a short-lived bearer token (table output: the bare token, for `$(cloudlet auth token)`)."""
    st = state(ctx)
    body = st.rest.post(f"{API_PREFIX}/auth/token")
    if st.output is OutputFormat.table:
        typer.echo(body.get("access_token", ""))
    else:
        st.emit(body)


@auth_app.command("whoami")
def auth_whoami(ctx: typer.Context) -> None:
    """The principal behind the configured key, and its roles."""
    st = state(ctx)
    st.emit(st.rest.get(f"{API_PREFIX}/whoami"))


# --- user / key / role -----------------------------------------------------------------------

UserArg = Annotated[str, typer.Argument(help="Principal (user) name.")]
KeyIdOpt = Annotated[str, typer.Option("--id", help="Key id (from `cloudlet user key-list`).")]
ExpiresInDaysOpt = Annotated[
    int | None, typer.Option("--expires-in-days", min=1, help="The key stops working after N days.")
]


def _user_path(name: str) -> str:
    return f"{API_PREFIX}/principals/{quote_segment(name)}"


def _print_new_key(ctx: typer.Context, body: dict[str, object], note: str = "") -> None:
    """A new key's secret once: bare on stdout for tables (for `$(…)`), whole for json/yaml."""
    st = state(ctx)
    if st.output is not OutputFormat.table:
        st.emit(body)
        return
    typer.echo(body.get("api_key", ""))
    expires = body.get("expires_on")
    lines = [f"key {body.get('id')} ({'expires ' + str(expires) if expires else 'does not expire'})"]
    if note:
        lines.append(note)
    lines.append("store this key now: it is not shown again")
    err_console.print("\n".join(lines), highlight=False, markup=False)


@user_app.command("create")
def user_create(
    ctx: typer.Context,
    name: UserArg,
    admin: Annotated[bool, typer.Option("--admin", help="Make the user an administrator.")] = False,
) -> None:
    """Create a user (admin)."""
    st = state(ctx)
    st.emit(st.rest.post(f"{API_PREFIX}/principals", {"name": name, "is_admin": admin}), "principal")


@user_app.command("list")
def user_list(ctx: typer.Context) -> None:
    """Users, whether they are administrators and enabled (admin)."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{API_PREFIX}/principals"), "principal")


@user_app.command("disable")
def user_disable(ctx: typer.Context, name: UserArg) -> None:
    """Disable a user: none of their keys or tokens work any more (admin)."""
    st = state(ctx)
    st.emit(st.rest.patch(_user_path(name), {"enabled": False}), "principal")


@user_app.command("enable")
def user_enable(ctx: typer.Context, name: UserArg) -> None:
    """Enable a disabled user again (admin)."""
    st = state(ctx)
    st.emit(st.rest.patch(_user_path(name), {"enabled": True}), "principal")


@user_app.command("key-create")
def user_key_create(ctx: typer.Context, name: UserArg, expires_in_days: ExpiresInDaysOpt = None) -> None:
    """Create an API key for a user (admin); it is shown only once (table output: the bare key)."""
    st = state(ctx)
    body = {"expires_in_days": expires_in_days} if expires_in_days is not None else None
    _print_new_key(ctx, st.rest.post(f"{_user_path(name)}/keys", body))


@user_app.command("key-list")
def user_key_list(ctx: typer.Context, name: UserArg) -> None:
    """A user's API keys: id, prefix, state, created, expires, last used (never the secret)."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{_user_path(name)}/keys"), "apikey")


@user_app.command("key-revoke")
def user_key_revoke(ctx: typer.Context, name: UserArg, key_id: KeyIdOpt) -> None:
    """Revoke an API key; access tokens minted from it stop working too."""
    st = state(ctx)
    st.rest.delete(f"{_user_path(name)}/keys/{quote_segment(key_id)}")
    err_console.print(f"key {key_id} of '{name}' revoked", highlight=False, markup=False)


@user_app.command("key-rotate")
def user_key_rotate(
    ctx: typer.Context,
    name: UserArg,
    key_id: KeyIdOpt,
    grace_minutes: Annotated[
        int, typer.Option("--grace-minutes", min=0, max=60, help="Keep the old key working this long.")
    ] = 0,
    expires_in_days: ExpiresInDaysOpt = None,
) -> None:
    """Replace an API key with a new one (shown once); the old one stops now or after the grace."""
    st = state(ctx)
    body: dict[str, object] = {"grace_minutes": grace_minutes}
    if expires_in_days is not None:
        body["expires_in_days"] = expires_in_days
    rotated = st.rest.post(f"{_user_path(name)}/keys/{quote_segment(key_id)}/rotate", body)
    ends = rotated.get("replaced_key_ends_on")
    _print_new_key(ctx, rotated, f"replaces key {key_id}, which stops working at {ends}")


@role_app.command("assign")
def role_assign(
    ctx: typer.Context,
    user: Annotated[str, typer.Option("--user", help="Principal name.")],
    role: Annotated[str, typer.Option("--role", help="Owner, Contributor or Reader.")],
) -> None:
    """Give a user a role on the workspace (-w)."""
    st = state(ctx)
    st.emit(st.rest.put(f"{st.ws_path()}/roleAssignments/{quote_segment(user)}", {"role": role}), "role")


@role_app.command("remove")
def role_remove(
    ctx: typer.Context, user: Annotated[str, typer.Option("--user", help="Principal name.")]
) -> None:
    """Take a user's role on the workspace (-w) away: without one they no longer see it."""
    st = state(ctx)
    st.rest.delete(f"{st.ws_path()}/roleAssignments/{quote_segment(user)}")
    err_console.print(f"role of '{user}' removed", highlight=False, markup=False)


@role_app.command("list")
def role_list(ctx: typer.Context) -> None:
    """Role assignments on the workspace (-w) (Owner or admin)."""
    st = state(ctx)
    st.emit(st.rest.list_values(f"{st.ws_path()}/roleAssignments"), "role")


# --- audit ------------------------------------------------------------------------------------

_RELATIVE = re.compile(r"(\d+)\s*([smhdw])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str, now: datetime | None = None) -> str:
    """``2h``, ``30m``, ``7d`` (ago) or an ISO 8601 time → an ISO 8601 UTC time for the API."""
    now = now or datetime.now(UTC)
    match = _RELATIVE.fullmatch(text.strip().lower())
    if match:
        return (now - timedelta(seconds=int(match[1]) * _UNIT_S[match[2]])).isoformat()
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigurationError(
            f"expected a time such as 2h, 30m, 7d or 2026-12-01T09:00:00Z, got {text!r}"
        ) from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat()


@audit_app.command("list")
def audit_list(
    ctx: typer.Context,
    actor: Annotated[str | None, typer.Option("--actor", help="Who: a user, or system:<component>.")] = None,
    action: Annotated[
        str | None, typer.Option("--action", help="e.g. apiKey.revoke, or a kind: compute, lock …")
    ] = None,
    target: Annotated[str | None, typer.Option("--target", help="A resource id and all under it.")] = None,
    channel: Annotated[
        str | None, typer.Option("--channel", help="The front door: rest, arm, mlflow, cli or studio.")
    ] = None,
    since: Annotated[str | None, typer.Option("--since", help="2h, 30m, 7d or an ISO time.")] = None,
    until: Annotated[str | None, typer.Option("--until", help="2h, 30m, 7d or an ISO time.")] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="At most this many entries.")] = 50,
) -> None:
    """Who changed what, newest first (admin)."""
    st = state(ctx)
    audit = AuditOperations(st.rest, _Scope(st.config))
    entries = audit.list(
        actor=actor,
        action=action,
        target=target,
        channel=channel,
        since=parse_since(since) if since else None,
        until=parse_since(until) if until else None,
        top=top,
        page_size=min(top, 1000),
    )
    st.emit(list(entries), "audit")


def register(app: typer.Typer) -> None:
    app.add_typer(quota_app, name="quota")
    app.add_typer(lock_app, name="lock")
    app.add_typer(workspace_app, name="workspace")
    app.add_typer(auth_app, name="auth")
    app.add_typer(user_app, name="user")
    app.add_typer(role_app, name="role")
    app.add_typer(audit_app, name="audit")
