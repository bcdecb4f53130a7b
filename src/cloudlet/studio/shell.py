"""The studio's shell: templates, the page frame (navigation, workspace picker, user), the
role-gating helper and the error page.

Pages call ``open_workspace`` (the services' own read check: a workspace the caller may not read
is a 404) and ``render``. Templates autoescape everything; ``can(action)`` hides what the caller's
role may not do (the services refuse it anyway).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from cloudlet import __version__
from cloudlet.api.deps import Context
from cloudlet.domain import studio_paths
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import workspaces
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.jobs import job_documents

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace

PREFIX = studio_paths.PREFIX  # every studio URL starts here (the session cookie's Path)
STATIC = Path(__file__).parent / "static"
ADMIN = "admin"  # an action only administrators take

# What a role may do, by the services' rules (``domain/access/roles.py``: Reader reads, Contributor
# writes, Owner manages; administrators are above every workspace). Pages add their actions here.
ACTIONS: dict[str, Access | str] = {
    "read": Access.READ,
    "job.create": Access.WRITE,
    "job.cancel": Access.WRITE,
    "compute.create": Access.WRITE,
    "compute.act": Access.WRITE,  # start, stop, restart, delete, resize
    "batch.write": Access.WRITE,  # batch endpoints and deployments: create, invoke
    "endpoint.write": Access.WRITE,  # online endpoints: create, keys, test, traffic, delete
    "asset.write": Access.WRITE,  # data, models, environments, components: register, archive, restore
    "role.assign": Access.MANAGE,
    "lock.write": Access.MANAGE,  # a workspace's locks: its Owner (a resource group's: an administrator)
    "quota.raise": ADMIN,
    "user.manage": ADMIN,  # users, their keys, locations and sizes, the audit log
}


def can(caller: Caller, action: str, workspace_id: int | None = None) -> bool:
    """Whether CALLER may take ACTION (a key of ``ACTIONS``) in the workspace: what decides if a
    page shows the button. An unknown action is a programming error, not a silent 'no'."""
    needed = ACTIONS[action]
    if needed == ADMIN:
        return caller.is_admin
    assert isinstance(needed, Access)
    return workspace_id is not None and caller.can(workspace_id, needed)


@dataclass(frozen=True)
class NavItem:
    key: str
    label: str
    suffix: str  # under the workspace's URL ("" is its Home)
    icon: str  # a name in static/icons.svg
    shown: str = "read"  # the action (``ACTIONS``) a caller needs to see it in the navigation


@dataclass(frozen=True)
class WorkspaceView:
    """A workspace as the shell shows and links it."""

    id: int
    ref: WorkspaceRef
    location: str

    @property
    def url(self) -> str:
        return ws_url(self.ref)

    @property
    def label(self) -> str:
        return (
            self.ref.workspace
            if self.ref.resource_group == "default"
            else (f"{self.ref.workspace} ({self.ref.resource_group})")
        )


def ws_url(ref: WorkspaceRef, *parts: str) -> str:
    """A workspace's studio URL: ``/studio/ws/{subscription}/{resource group}/{workspace}/…``."""
    return studio_paths.workspace_path(ref.subscription_id, ref.resource_group, ref.workspace, *parts)


# The job submit form's path under …/jobs/: "_" starts no job name (JOB_NAME_PATTERN), so no job's
# page is hidden by it (a job may be named "new").
JOB_FORM = "_new"


def code_upload_url(ref: WorkspaceRef) -> str:
    """Where a form uploads a local ``code:`` folder (a .zip or .tar.gz) as a code snapshot: the job
    form's upload, which the endpoint forms share."""
    return ws_url(ref, "jobs", JOB_FORM, "code")


NAV: list[NavItem] = []  # filled by ``app.py`` from the page modules, in their order


def open_workspace(
    ctx: Context, sub: str, rg: str, ws: str, needed: Access = Access.READ
) -> tuple[Workspace, WorkspaceRef]:
    ref = WorkspaceRef(sub, rg, ws)
    return workspaces.resolve(ctx.session, ref, ctx.caller, needed), ref


def visible_workspaces(ctx: Context) -> list[WorkspaceView]:
    rows = workspaces.list_visible(ctx.session, ctx.caller)
    views = [WorkspaceView(ws.id, ref, ws.location) for ws, ref in rows]
    return sorted(views, key=lambda v: (v.ref.workspace != "default", v.label.lower()))


def csrf_token(request: Request) -> str:
    """The request's session's CSRF token ("" before sign-in): forms carry it, htmx sends it."""
    found = getattr(request.state, "studio", None)
    return str(found.csrf_token) if found is not None else ""


@cache
def _static_version(name: str) -> str:
    path = STATIC / name
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:10] if path.is_file() else __version__
    return digest


def static_url(name: str) -> str:
    """A static file's URL with its content hash: cached for long, refreshed when it changes."""
    return f"{PREFIX}/static/{name}?v={_static_version(name)}"


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("cloudlet.studio", "templates"),
        autoescape=select_autoescape(["html"], default_for_string=True, default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals.update(
        static_url=static_url,
        ws_url=ws_url,
        code_upload_url=code_upload_url,
        prefix=PREFIX,
        version=__version__,
    )
    return env


def render_html(
    request: Request,
    template: str,
    caller: Caller | None,
    workspace: WorkspaceView | None = None,
    workspaces_list: list[WorkspaceView] | None = None,
    active: str = "",
    status: int = 200,
    **values: Any,
) -> HTMLResponse:
    """TEMPLATE in the shell; what every page's template can use: ``caller``, ``csrf_token``,
    ``workspace`` (the current one), ``workspaces`` (the picker's), ``nav``, ``active`` and
    ``can(action)`` for the current workspace."""
    page = render_text(request, template, caller, workspace, workspaces_list, active, **values)
    return HTMLResponse(page, status_code=status, headers={"Cache-Control": "no-store"})


def render_text(
    request: Request,
    template: str,
    caller: Caller | None,
    workspace: WorkspaceView | None = None,
    workspaces_list: list[WorkspaceView] | None = None,
    active: str = "",
    **values: Any,
) -> str:
    """``render_html``'s markup alone: a fragment a live stream sends."""
    ws_id = workspace.id if workspace is not None else None
    return (
        environment()
        .get_template(template)
        .render(
            request=request,
            caller=caller,
            csrf_token=csrf_token(request),
            workspace=workspace,
            workspaces=workspaces_list or [],
            nav=NAV if workspace is not None else [],
            active=active,
            can=lambda action: caller is not None and can(caller, action, ws_id),
            **values,
        )
    )


def render(
    ctx: Context,
    template: str,
    ref: WorkspaceRef | None = None,
    ws_row: Workspace | None = None,
    active: str = "",
    status: int = 200,
    **values: Any,
) -> HTMLResponse:
    """A signed-in page: TEMPLATE in the shell for workspace REF (its row as ``open_workspace``
    gave it), with the workspace picker filled."""
    choices = visible_workspaces(ctx)
    current = None
    if ref is not None and ws_row is not None:
        current = WorkspaceView(ws_row.id, ref, ws_row.location)
    return render_html(ctx.request, template, ctx.caller, current, choices, active, status, **values)


def editor_error(text: str, error: CloudletError | None) -> dict[str, Any]:
    """What an editor form's page needs of a refusal (``render``'s values): the answer's status,
    the error (shown at its field) and the line of TEXT that holds the field, marked."""
    return {
        "status": error.status if error is not None else 200,
        "error": error,
        "error_line": job_documents.line_of(text, error.target) if error is not None else None,
    }


TITLES = {
    400: "Not valid",
    403: "Not allowed",
    404: "Not found",
    409: "Conflict",
    500: "Something went wrong",
}


def error_page(request: Request, exc: CloudletError) -> HTMLResponse:
    """A studio error in the shell: its status, and the service's own words (escaped); never a
    stack trace."""
    caller: Caller | None = getattr(request.state, "caller", None)
    status = exc.status if exc.status >= 400 else 400
    title = TITLES.get(status, "Error")
    return render_html(
        request, "error.html", caller, status=status, title=title, message=exc.message, code=status
    )
