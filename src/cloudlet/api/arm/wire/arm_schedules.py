"""Job schedules between azure-ai-ml's ARM wire shape and cloudlet's own (the schedule YAML
shape, ``domain/jobs/job_schedule.py``). Pure: no I/O.

The SDK's ``JobSchedule`` arrives as ``{"properties": {"displayName", "description", "tags",
"properties", "isEnabled", "trigger": {"triggerType": "Cron"|"Recurrence", "expression" |
"frequency", "interval", "schedule": {"hours", "minutes", "weekDays", "monthDays"}, "startTime",
"endTime", "timeZone"}, "action": {"actionType": "CreateJob", "jobDefinition": {…a job's
properties…}}}}``. The job definition is translated by the jobs facade (``api/arm/jobs.py``); a
definition with only ``sourceJobId`` (``create_job="azureml:<job>"``) names an existing job.
The trigger's fields are also those of compute instances' start/stop schedules (``arm_compute``).
"""

from __future__ import annotations

from typing import Any

from cloudlet.domain.errors import CloudletError

ACTION = "CreateJob"
SCHEDULE_TYPE = "Microsoft.MachineLearningServices/workspaces/schedules"
# The SDK's ScheduleListViewType, to the service's views.
LIST_VIEWS = {"enabledonly": "enabled", "disabledonly": "disabled", "all": "all"}
_PATTERN_FROM_ARM = {
    "hours": "hours",
    "minutes": "minutes",
    "weekDays": "week_days",
    "monthDays": "month_days",
}
_PATTERN_TO_ARM = {native: arm for arm, native in _PATTERN_FROM_ARM.items()}


def _invalid(target: str, message: str) -> CloudletError:
    return CloudletError("InvalidRequestContent", message, target, 400)


def _object(value: Any, target: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _invalid(target, f"'{target}' must be an object")
    return value


def trigger_from_arm(kind: str, source: dict[str, Any], target: str) -> dict[str, Any]:
    """A cron (KIND "cron": ``expression``) or recurrence (``frequency``, ``interval``,
    ``schedule``) trigger's ARM fields, with ``startTime``/``endTime``/``timeZone``, in the
    native shape (validated later by ``domain/triggers.py``)."""
    trigger: dict[str, Any] = {"type": kind}
    if kind == "cron":
        trigger["expression"] = source.get("expression")
    else:
        trigger["interval"] = source.get("interval")
        if source.get("frequency"):
            trigger["frequency"] = str(source["frequency"]).lower()
        pattern = _object(source.get("schedule"), f"{target}.schedule")
        kept = {_PATTERN_FROM_ARM.get(k, k): v for k, v in pattern.items() if v is not None}
        if kept:
            trigger["schedule"] = kept
    for arm, native in (("startTime", "start_time"), ("endTime", "end_time"), ("timeZone", "time_zone")):
        if source.get(arm) is not None:
            trigger[native] = source[arm]
    return trigger


def trigger_to_arm(trigger: dict[str, Any]) -> dict[str, Any]:
    """A native trigger as the SDK's ``CronTrigger``/``RecurrenceTrigger`` read it."""
    out: dict[str, Any] = {
        "startTime": trigger.get("start_time"),
        "endTime": trigger.get("end_time"),
        "timeZone": trigger.get("time_zone") or "UTC",
    }
    if trigger.get("type") == "cron":
        return {"triggerType": "Cron", "expression": trigger.get("expression"), **out}
    pattern = trigger.get("schedule") or {}
    recurrence: dict[str, Any] = {
        "triggerType": "Recurrence",
        "frequency": str(trigger.get("frequency") or "").capitalize(),
        "interval": trigger.get("interval"),
        **out,
    }
    if pattern:
        recurrence["schedule"] = {
            "hours": pattern.get("hours") or [],
            "minutes": pattern.get("minutes") or [],
            **{_PATTERN_TO_ARM[k]: v for k, v in pattern.items() if k in ("week_days", "month_days")},
        }
    return recurrence


def schedule_from_arm(body: Any, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the schedule document without ``create_job``, the action's ``jobDefinition``)."""
    props = _object(body.get("properties") if isinstance(body, dict) else None, "properties")
    action = _object(props.get("action"), "properties.action")
    if action.get("actionType") != ACTION:
        raise _invalid(
            "properties.action.actionType",
            f"action type {action.get('actionType')!r} is not served; job schedules take 'CreateJob' "
            "(monitoring and data import schedules live in Azure)",
        )
    definition = _object(action.get("jobDefinition"), "properties.action.jobDefinition")
    if not definition:
        raise _invalid("properties.action.jobDefinition", "a job definition (create_job) is required")
    trigger = _object(props.get("trigger"), "properties.trigger")
    kind = str(trigger.get("triggerType") or "").lower()
    if kind not in ("cron", "recurrence"):
        raise _invalid(
            "properties.trigger.triggerType", f"trigger type must be Cron or Recurrence, got {kind or None!r}"
        )
    doc: dict[str, Any] = {
        "name": name,
        "trigger": trigger_from_arm(kind, trigger, "properties.trigger"),
        "is_enabled": props.get("isEnabled", True) if props.get("isEnabled") is not None else True,
    }
    for arm, native in (
        ("displayName", "display_name"),
        ("description", "description"),
        ("tags", "tags"),
        ("properties", "properties"),
    ):
        if props.get(arm) is not None:
            doc[native] = props[arm]
    return doc, definition


def source_job(definition: dict[str, Any]) -> str | None:
    """``create_job: azureml:<job>`` when the definition names an existing job (``sourceJobId``:
    its ARM id or ``azureml:<name>``) and nothing else."""
    source = definition.get("sourceJobId")
    if not source:
        return None
    return "azureml:" + str(source).rstrip("/").rsplit("/", 1)[-1].removeprefix("azureml:")


def schedule_to_arm(
    view: dict[str, Any], workspace_id: str, job_definition: dict[str, Any]
) -> dict[str, Any]:
    """The ARM resource for a native schedule view (``services/jobs/schedules.render``)."""
    created = view.get("creation_context") or {}
    return {
        "id": f"{workspace_id}/schedules/{view['name']}",
        "name": view["name"],
        "type": SCHEDULE_TYPE,
        "properties": {
            "displayName": view.get("display_name"),
            "description": view.get("description"),
            "tags": dict(view.get("tags") or {}),
            "properties": dict(view.get("properties") or {}),
            "isEnabled": view.get("is_enabled", True),
            "provisioningState": view.get("provisioning_state", "Succeeded"),
            "trigger": trigger_to_arm(view.get("trigger") or {}),
            "action": {"actionType": ACTION, "jobDefinition": job_definition},
        },
        "systemData": {
            "createdAt": created.get("created_at"),
            "createdBy": created.get("created_by"),
            "createdByType": "User",
            "lastModifiedAt": created.get("last_modified_at"),
        },
    }
