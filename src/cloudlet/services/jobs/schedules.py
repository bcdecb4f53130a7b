"""Job schedules (``az ml schedule``): create or update, read, list, enable, disable, delete, and
fire one (for the schedule loop, ``control/job_schedules.py``).

Roles as for jobs: a Reader reads; a Contributor writes. ``create_job`` is stored as a full job
document, validated as a submission would be when the schedule is written (so a bad job is a 400
now, not a failed fire at 2 a.m.); ``azureml:<job name>`` is replaced by a copy of that job's
definition. A fire makes its job through the jobs service (``jobs.submit``) and records the fire
time in the same transaction, so a fire is made once however the server stops. The rules
(validation, fire times) are ``domain/jobs/job_schedule.py``.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from cloudlet.domain.access.roles import Access
from cloudlet.domain.errors import CloudletError, not_found, validation_error
from cloudlet.domain.jobs import job_schedule as rules
from cloudlet.services.access import audit, workspaces
from cloudlet.services.core.clock import WALL_CLOCK, Clock
from cloudlet.services.core.context import Caller, WorkspaceRef
from cloudlet.services.core.storage import DataRoot
from cloudlet.services.core.use_case import use_case
from cloudlet.services.jobs import jobs as job_service
from cloudlet.store.schema import Compute, Job, JobSchedule, Workspace

ListView = Literal["enabled", "disabled", "all"]
LIST_VIEWS: tuple[ListView, ...] = ("enabled", "disabled", "all")
# What a job copied by ``create_job: azureml:<job>`` does not take from it (its own, per run).
# The job types whose documents carry ``properties`` (a sweep's has none: its job is named for
# the schedule, and ``last_job_name`` on the schedule names it).
TAGGED_TYPES = ("command", "pipeline")
_NOT_COPIED = ("name", "display_name", "status", "creation_context")


def _at(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")


def target(ref: WorkspaceRef, name: str) -> str:
    return f"{ref.arm_id}/schedules/{name}"


@dataclass(frozen=True)
class Written:
    schedule: JobSchedule
    created: bool


def _job_document(session: Session, ws: Workspace, spec: rules.ScheduleSpec, now: float) -> dict[str, Any]:
    """The schedule's job document, validated as a submission: ``azureml:<job>`` → that job's."""
    reference = rules.job_reference(spec.create_job)
    if reference is not None:
        job = job_service.find_in(session, ws.id, reference)
        if job is None:
            raise validation_error(
                "create_job", f"no job named '{reference}' in this workspace to copy; name an existing job"
            )
        doc = {key: value for key, value in copy.deepcopy(job.spec).items() if key not in _NOT_COPIED}
    else:
        assert isinstance(spec.create_job, dict)
        doc = copy.deepcopy(spec.create_job)
        doc.pop("name", None)  # each fire names its own job
    try:
        job_service.prepare(doc, rules.fired_job_name(spec.name, datetime.fromtimestamp(now, UTC)))
    except CloudletError as exc:  # named where the schedule holds it
        where = f"create_job.{exc.target}" if exc.target and exc.target != "$" else "create_job"
        raise dataclasses.replace(exc, target=where) from None
    return doc


def _trigger_changed(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether the trigger fires differently (``time_zone: UTC`` written out, as the ARM facade
    gives it back, is no change)."""
    return rules.trigger_of(before) != rules.trigger_of(after)


def _next_fire(row: JobSchedule) -> float | None:
    if not row.is_enabled:
        return None
    at = rules.next_fire(
        rules.trigger_of(row.spec["trigger"]), datetime.fromtimestamp(row.fired_through, UTC)
    )
    return at.timestamp() if at is not None else None


@use_case
def create_or_update(
    session: Session, ref: WorkspaceRef, caller: Caller, name: str, body: Any, clock: Clock = WALL_CLOCK
) -> Written:
    """Write the schedule named NAME (create or replace), committed. A new or changed trigger, or a
    schedule enabled again, counts its fires from now: the past is not replayed."""
    # Who may write first: a caller without the role learns nothing from the body's checks.
    ws = workspaces.resolve(session, ref, caller, Access.WRITE)
    spec = rules.parse_schedule(body, name)
    now = clock.now()
    document = spec.document()
    document["create_job"] = _job_document(session, ws, spec, now)
    document.pop("is_enabled")
    row = _find(session, ws.id, name)
    created = row is None
    if row is None:
        row = JobSchedule(workspace_id=ws.id, name=name, created_by=caller.name, created_at=now)
        session.add(row)
        row.fired_through = now
    elif _trigger_changed(row.spec["trigger"], document["trigger"]) or (
        spec.is_enabled and not row.is_enabled
    ):
        row.fired_through = now
    row.spec = document
    row.is_enabled = spec.is_enabled
    row.updated_at = now
    row.next_fire_at = _next_fire(row)
    audit.record(session, caller.name, "schedule.write", target(ref, name))
    session.commit()
    return Written(row, created)


def get(session: Session, ref: WorkspaceRef, caller: Caller, name: str) -> JobSchedule:
    ws = workspaces.resolve(session, ref, caller, Access.READ)
    return _existing(session, ws, name)


def list_schedules(
    session: Session, ref: WorkspaceRef, caller: Caller, view: str = "enabled"
) -> list[JobSchedule]:
    """The workspace's schedules by name: ``enabled`` ones (as ``az ml schedule list`` does by
    default), ``disabled`` ones, or ``all``."""
    if view not in LIST_VIEWS:
        raise validation_error("list_view_type", f"list view {view!r} must be one of {', '.join(LIST_VIEWS)}")
    ws = workspaces.resolve(session, ref, caller, Access.READ)
    query = select(JobSchedule).where(JobSchedule.workspace_id == ws.id).order_by(JobSchedule.name)
    if view != "all":
        query = query.where(JobSchedule.is_enabled.is_(view == "enabled"))
    return list(session.scalars(query))


@use_case
def set_enabled(
    session: Session, ref: WorkspaceRef, caller: Caller, name: str, enabled: bool, clock: Clock = WALL_CLOCK
) -> JobSchedule:
    """Enable or disable, committed. Enabled again, it fires from now on (what it missed while
    disabled is not replayed)."""
    ws = workspaces.resolve(session, ref, caller, Access.WRITE)
    row = _existing(session, ws, name)
    now = clock.now()
    if enabled and not row.is_enabled:
        row.fired_through = now
    row.is_enabled = enabled
    row.updated_at = now
    row.next_fire_at = _next_fire(row)
    audit.record(
        session, caller.name, "schedule.enable" if enabled else "schedule.disable", target(ref, name)
    )
    session.commit()
    return row


@use_case
def delete(session: Session, ref: WorkspaceRef, caller: Caller, name: str) -> None:
    """Delete the schedule, committed; the jobs it made stay."""
    ws = workspaces.resolve(session, ref, caller, Access.WRITE)
    session.delete(_existing(session, ws, name))
    audit.record(session, caller.name, "schedule.delete", target(ref, name))
    session.commit()


def render(row: JobSchedule) -> dict[str, Any]:
    """The native view: the document, with its state and what the loop did last."""
    return {
        **row.spec,
        "name": row.name,
        "is_enabled": row.is_enabled,
        "provisioning_state": "Succeeded",
        "creation_context": {
            "created_at": _at(row.created_at),
            "created_by": row.created_by,
            "last_modified_at": _at(row.updated_at),
        },
        "next_fire_time": _at(row.next_fire_at),
        "last_fire_time": _at(row.last_fired_at),
        "last_job_name": row.last_job_name,
        "last_error": row.last_error,
        "last_error_time": _at(row.last_error_at),
    }


def _find(session: Session, workspace_id: int, name: str) -> JobSchedule | None:
    query = select(JobSchedule).where(JobSchedule.workspace_id == workspace_id, JobSchedule.name == name)
    return session.scalar(query)


def _existing(session: Session, ws: Workspace, name: str) -> JobSchedule:
    row = _find(session, ws.id, name)
    if row is None:
        raise not_found("Schedule", name)
    return row


# --- firing (the schedule loop) ------------------------------------------------------------------


def due_ids(session: Session, now: float) -> list[int]:
    """The enabled schedules whose next fire time has come."""
    query = (
        select(JobSchedule.id)
        .where(JobSchedule.is_enabled.is_(True), JobSchedule.next_fire_at <= now)
        .order_by(JobSchedule.next_fire_at, JobSchedule.id)
    )
    return list(session.scalars(query))


def soonest(session: Session) -> float | None:
    """The earliest next fire time of an enabled schedule (the loop sleeps until then)."""
    query = (
        select(JobSchedule.next_fire_at)
        .where(JobSchedule.is_enabled.is_(True))
        .order_by(JobSchedule.next_fire_at.is_(None), JobSchedule.next_fire_at)
    )
    return session.scalars(query.limit(1)).first()


@dataclass(frozen=True)
class Fired:
    job: Job | None
    compute: Compute | None


def fire(session: Session, schedule_id: int, now: float, data: DataRoot) -> Fired:
    """Make the job of a due schedule's fire, in SESSION's transaction, and record the fire time
    in it too. Nothing is due (another pass fired it, or it was disabled): nothing happens. A
    refused job (its compute gone, quota…) raises: the caller undoes this and records why."""
    row = session.get(JobSchedule, schedule_id)
    if row is None or not row.is_enabled:
        return Fired(None, None)
    trigger = rules.trigger_of(row.spec["trigger"])
    at = rules.due_fire(
        trigger, datetime.fromtimestamp(row.fired_through, UTC), datetime.fromtimestamp(now, UTC)
    )
    if at is None:
        row.next_fire_at = _next_fire(row)
        return Fired(None, None)
    ws = session.get(Workspace, row.workspace_id)
    assert ws is not None
    name = rules.fired_job_name(row.name, at)
    doc = copy.deepcopy(row.spec["create_job"])
    if str(doc.get("type", "command")).lower() in TAGGED_TYPES:
        doc["properties"] = {**(doc.get("properties") or {}), rules.SCHEDULE_PROPERTY: row.name}
    job = None
    compute = None
    if job_service.find_in(session, ws.id, name) is None:  # made already: only the record is left
        prepared = job_service.prepare(doc, name)
        caller = Caller(principal_id=0, name=row.created_by, is_admin=False)
        job, compute = job_service.submit(session, ws, name, prepared, caller, data)
    row.fired_through = at.timestamp()
    row.last_fired_at = at.timestamp()
    row.last_job_name = name
    row.last_error = None
    row.last_error_at = None
    row.next_fire_at = _next_fire(row)
    return Fired(job, compute)


def record_failure(session: Session, schedule_id: int, now: float, reason: str) -> None:
    """A fire that could not make its job: said on the schedule, and that fire time passed over
    (the next one is tried; Azure does not retry a missed fire either)."""
    row = session.get(JobSchedule, schedule_id)
    if row is None:
        return
    row.last_error = reason
    row.last_error_at = now
    at = rules.due_fire(
        rules.trigger_of(row.spec["trigger"]),
        datetime.fromtimestamp(row.fired_through, UTC),
        datetime.fromtimestamp(now, UTC),
    )
    if at is not None:
        row.fired_through = at.timestamp()
    row.next_fire_at = _next_fire(row)
