"""Native REST routes for job schedules (``az ml schedule``): thin wrappers over
``services/jobs/schedules``.

- ``GET {ws}/schedules?list_view_type=enabled|disabled|all`` (enabled by default, as az's);
- ``PUT|GET|DELETE {ws}/schedules/{name}`` (PUT: create or replace; 201 when created);
- ``POST {ws}/schedules/{name}/enable`` and ``…/disable``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Path, Query, Response

from cloudlet.api.deps import Context, context, json_response
from cloudlet.api.openapi import json_body, success
from cloudlet.api.routing import UserRoute
from cloudlet.domain.jobs import job_schedule as rules
from cloudlet.services.core.context import WorkspaceRef
from cloudlet.services.jobs import schedules as service

WS = "/subscriptions/{sub}/resourceGroups/{rg}/workspaces/{ws}"
SCHEDULE = WS + "/schedules/{name}"
router = APIRouter(prefix="/api/v1", tags=["schedules"], route_class=UserRoute)
Name = Annotated[
    str,
    Path(pattern=rules.NAME_PATTERN.pattern, max_length=64, description="1-64 letters, digits, '-' or '_'"),
]
_TRIGGER = {
    "type": "object",
    "description": "{type: cron, expression, start_time, end_time, time_zone} or {type: recurrence, "
    "frequency: minute|hour|day|week|month, interval, schedule: {hours, minutes, week_days, month_days}}",
    "properties": {"type": {"type": "string", "enum": ["cron", "recurrence"]}},
    "required": ["type"],
}
SCHEDULE_DOCUMENT = json_body(
    {
        "type": "object",
        "required": ["trigger", "create_job"],
        "additionalProperties": False,
        "properties": {
            "$schema": {"type": "string"},
            "name": {"type": "string"},
            "display_name": {"type": "string"},
            "description": {"type": "string"},
            "tags": {"type": "object", "additionalProperties": {"type": "string"}},
            "properties": {"type": "object", "additionalProperties": {"type": "string"}},
            "trigger": _TRIGGER,
            "create_job": {
                "description": "a job document (its code uploaded, as the CLI does) or 'azureml:<job name>'",
                "anyOf": [{"type": "object"}, {"type": "string"}],
            },
            "is_enabled": {"type": "boolean"},
        },
    }
)


@router.get(WS + "/schedules")
def list_schedules(
    sub: str,
    rg: str,
    ws: str,
    list_view_type: Annotated[
        Literal["enabled", "disabled", "all"], Query(description="enabled (the default), disabled or all")
    ] = "enabled",
    ctx: Context = Depends(context),
) -> Response:
    rows = service.list_schedules(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, list_view_type)
    return json_response({"value": [service.render(row) for row in rows]})


@router.get(SCHEDULE)
def show_schedule(sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)) -> Response:
    return json_response(
        service.render(service.get(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, name))
    )


@router.put(SCHEDULE, status_code=200, responses=success(201, "Created"), openapi_extra=SCHEDULE_DOCUMENT)
def put_schedule(
    sub: str,
    rg: str,
    ws: str,
    name: Name,
    body: dict[str, Any] = Body(include_in_schema=False),
    ctx: Context = Depends(context),
) -> Response:
    written = service.create_or_update(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, name, body)
    return json_response(service.render(written.schedule), 201 if written.created else 200)


@router.post(SCHEDULE + "/enable")
def enable_schedule(sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)) -> Response:
    row = service.set_enabled(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, name, True)
    return json_response(service.render(row))


@router.post(SCHEDULE + "/disable")
def disable_schedule(sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)) -> Response:
    row = service.set_enabled(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, name, False)
    return json_response(service.render(row))


@router.delete(SCHEDULE, status_code=204)
def delete_schedule(sub: str, rg: str, ws: str, name: Name, ctx: Context = Depends(context)) -> Response:
    service.delete(ctx.session, WorkspaceRef(sub, rg, ws), ctx.caller, name)
    return Response(status_code=204)
