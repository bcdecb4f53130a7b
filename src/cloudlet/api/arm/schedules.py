"""The ARM facade's job schedules (azure-ai-ml's ``ml_client.schedules``: ``begin_create_or_update``,
``get``, ``list``, ``begin_disable``/``begin_enable`` (a get, then a PUT with ``isEnabled``),
``begin_delete``): translate with ``api/arm/wire/arm_schedules.py`` (the action's job definition
with the jobs facade's own translation, ``api/arm/jobs.py``), call ``services/jobs/schedules``.

Writes finish in their request (200/201 with ``provisioningState: Succeeded``: the SDK's poller is
done at once); a DELETE answers 200 (204 when there was none), as the other facade resources do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Response

from cloudlet.api import arm
from cloudlet.api.arm import ArmWorkspace
from cloudlet.api.arm.jobs import code_reference, job_document_from_arm, to_arm
from cloudlet.api.arm.wire import arm_jobs, arm_schedules
from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import deleted, json_body, success
from cloudlet.api.routes_schedules import Name
from cloudlet.api.routing import UserRoute
from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError
from cloudlet.services.access import workspaces
from cloudlet.services.assets import codes
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import schedules as service

if TYPE_CHECKING:
    from cloudlet.store.schema import Workspace

router = APIRouter(tags=["arm"], route_class=UserRoute)
SCHEDULE = arm.WS + "/schedules/{name}"
ARM_DOCUMENT = json_body(
    {
        "type": "object",
        "description": "a JobSchedule as azure-ai-ml sends it (api/arm/wire/arm_schedules.py)",
        "required": ["properties"],
        "properties": {
            "properties": {
                "type": "object",
                "required": ["trigger", "action"],
                "properties": {
                    "trigger": {
                        "type": "object",
                        "required": ["triggerType"],
                        "properties": {"triggerType": {"enum": ["Cron", "Recurrence"]}},
                    },
                    "action": {
                        "type": "object",
                        "required": ["actionType", "jobDefinition"],
                        "properties": {
                            "actionType": {"enum": [arm_schedules.ACTION]},
                            "jobDefinition": {"type": "object"},
                        },
                    },
                    "isEnabled": {"type": ["boolean", "null"]},
                    "displayName": {"type": ["string", "null"]},
                    "description": {"type": ["string", "null"]},
                    "tags": {"type": ["object", "null"]},
                    "properties": {"type": ["object", "null"]},
                },
            }
        },
    }
)


def _renamed(target: str | None) -> str | None:
    """A native field as the ARM body names it."""
    if target is None:
        return None
    if target.startswith("create_job"):
        return "properties.action.jobDefinition" + target.removeprefix("create_job")
    if target.startswith("trigger"):
        return "properties." + target
    return target


def _resource(ctx: Context, ref: WorkspaceRef, workspace: Workspace, row: Any) -> dict[str, Any]:
    view = service.render(row)
    job = view.get("create_job")
    definition: dict[str, Any] = {}
    if isinstance(job, dict):
        code = job.get("code")
        code_id = (
            codes.code_id_for(ctx.session, workspace, ref.arm_id, code) if isinstance(code, str) else None
        )
        resource = to_arm({**job, "name": row.name}, ref.arm_id, code_id)
        definition = {k: v for k, v in resource["properties"].items() if v is not None}
        # The job view's defaults (its name as display name, experiment "Default") are not the
        # schedule's job's: given back, the SDK's get-then-PUT would store them into it.
        for arm_field, field in (("displayName", "display_name"), ("experimentName", "experiment_name")):
            if not job.get(field):
                definition.pop(arm_field, None)
    return arm_schedules.schedule_to_arm(view, ref.arm_id, definition)


@router.get(arm.WS + "/schedules")
def arm_list_schedules(
    ref: ArmWorkspace,
    list_view_type: Annotated[
        Literal["EnabledOnly", "DisabledOnly", "All"], Query(alias="listViewType")
    ] = "EnabledOnly",
    ctx: Context = Depends(context),
) -> Response:
    view = arm_schedules.LIST_VIEWS[list_view_type.lower()]
    rows = service.list_schedules(ctx.session, ref, ctx.caller, view)
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.READ)  # once, not per row
    return json_response(arm.page(ctx.request, rows, lambda row: _resource(ctx, ref, workspace, row)))


@router.get(SCHEDULE)
def arm_get_schedule(ref: ArmWorkspace, name: Name, ctx: Context = Depends(context)) -> Response:
    row = service.get(ctx.session, ref, ctx.caller, name)
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.READ)
    return json_response(_resource(ctx, ref, workspace, row))


@router.put(SCHEDULE, status_code=200, responses=success(201, "Created"), openapi_extra=ARM_DOCUMENT)
def arm_put_schedule(
    ref: ArmWorkspace,
    name: Name,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    # Who may write first: a caller without the role learns nothing from the body's checks.
    workspace = workspaces.resolve(ctx.session, ref, ctx.caller, Access.WRITE)
    with arm.arm_errors(_renamed):
        doc, definition = arm_schedules.schedule_from_arm(body, name)
        source = arm_schedules.source_job(definition)
        if source is not None:
            doc["create_job"] = source
        else:

            def code(code_id: str) -> str:
                return code_reference(ctx.session, workspace, code_id)

            job = job_document_from_arm({"properties": definition}, name, arm_jobs.Refs(code=code))
            job.pop("name", None)
            doc["create_job"] = job
        written = service.create_or_update(ctx.session, ref, ctx.caller, name, doc)
    return json_response(_resource(ctx, ref, workspace, written.schedule), 201 if written.created else 200)


@router.delete(SCHEDULE, **deleted(success(204, "No such schedule")))
def arm_delete_schedule(ref: ArmWorkspace, name: Name, ctx: Context = Depends(context)) -> Response:
    try:
        service.delete(ctx.session, ref, ctx.caller, name)
    except CloudletError as exc:
        if exc.status != 404:
            raise
        workspaces.resolve(ctx.session, ref, ctx.caller, Access.WRITE)  # a hidden workspace stays a 404
        return Response(status_code=204)
    return Response(status_code=200)
