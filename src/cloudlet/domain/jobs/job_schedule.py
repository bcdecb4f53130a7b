"""Job schedules (``az ml schedule``, the SDK's ``JobSchedule``), pure: the model, its validation,
and when it fires.

A schedule document is Azure's schedule YAML::

    name: nightly-train
    display_name: Nightly training
    description: retrain every night
    tags: {team: vision}
    trigger: {type: cron, expression: "0 2 * * *", time_zone: "Pacific Standard Time"}
    create_job: {type: command, command: python train.py, ...}   # a full job document
    is_enabled: true

``create_job`` is stored as a full job document: the CLI resolves ``./job.yml`` (code, environment,
components) before it sends the schedule, and ``azureml:<job name>`` is replaced by the service
with a copy of that job's definition. The trigger rules are the compute instances' ones
(``domain/triggers.py``).

Firing: the loop keeps, per schedule, the last fire time it acted on (``last_fired``, or the
schedule's creation time before the first fire). ``due_fire(trigger, last_fired, now)`` is the
LATEST occurrence in ``(last_fired, now]``: after downtime that spans several occurrences the
schedule fires once, for the latest, and then moves on (Azure does not backfill either).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cloudlet.domain.errors import document_for, validation_error
from cloudlet.domain.triggers import Trigger, next_occurrence, parse_trigger, previous_occurrence

# Short enough that a fired job's name, "<schedule>-<yyyymmddHHMM>", stays a valid job name.
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# The job property naming the schedule that created it (what Azure ML sets on a scheduled job).
SCHEDULE_PROPERTY = "azureml.scheduleName"
AZUREML_PREFIX = "azureml:"
_FIELDS = {
    "$schema",
    "name",
    "display_name",
    "description",
    "tags",
    "properties",
    "trigger",
    "create_job",
    "is_enabled",
}


@dataclass(frozen=True)
class ScheduleSpec:
    """One validated schedule. ``create_job`` is a job document, or ``azureml:<job name>`` until
    the service replaces it with that job's definition."""

    name: str
    trigger: dict[str, Any]
    create_job: dict[str, Any] | str
    display_name: str | None = None
    description: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    properties: dict[str, str] = field(default_factory=dict)
    is_enabled: bool = True

    def document(self) -> dict[str, Any]:
        """The stored/echoed form (YAML field names; None fields left out)."""
        doc: dict[str, Any] = {
            "name": self.name,
            "display_name": self.display_name,
            "description": self.description,
            "tags": dict(self.tags),
            "properties": dict(self.properties),
            "trigger": dict(self.trigger),
            "create_job": self.create_job,
            "is_enabled": self.is_enabled,
        }
        return {key: value for key, value in doc.items() if value is not None}


def parse_schedule(body: Any, name: str | None = None) -> ScheduleSpec:
    """Validate a schedule document; a ``CloudletError`` names the field and how to fix it."""
    doc = document_for(body, name, "schedule")
    unknown = sorted(set(doc) - _FIELDS)
    if unknown:
        raise validation_error(
            unknown[0],
            f"unknown field '{unknown[0]}'; a schedule has {', '.join(sorted(_FIELDS - {'$schema'}))}",
        )
    schedule_name = doc.get("name")
    if not isinstance(schedule_name, str) or not NAME_PATTERN.fullmatch(schedule_name):
        raise validation_error(
            "name",
            f"schedule name {schedule_name!r} must be 1-64 letters, digits, '-' or '_', starting with a "
            "letter or digit",
        )
    trigger = _trigger_document(doc.get("trigger"))
    return ScheduleSpec(
        name=schedule_name,
        trigger=trigger,
        create_job=_create_job(doc.get("create_job")),
        display_name=_text(doc.get("display_name"), "display_name"),
        description=_text(doc.get("description"), "description"),
        tags=_strings(doc.get("tags"), "tags"),
        properties=_strings(doc.get("properties"), "properties"),
        is_enabled=_flag(doc.get("is_enabled", True), "is_enabled"),
    )


def trigger_of(trigger: Mapping[str, Any]) -> Trigger:
    """A stored trigger document → the trigger the rules walk."""
    return parse_trigger(trigger, "trigger")


def next_fire(trigger: Trigger, after: datetime) -> datetime | None:
    """The first fire time strictly after ``after`` (aware UTC), or None once it has ended."""
    return next_occurrence(trigger, after)


def due_fire(trigger: Trigger, last_fired: datetime, now: datetime) -> datetime | None:
    """The fire time to act on now: the latest occurrence in ``(last_fired, now]``, or None.
    Several missed occurrences (downtime) give one fire, for the latest."""
    at = previous_occurrence(trigger, now)
    if at is None or at <= _aware(last_fired):
        return None
    return at


def fired_job_name(schedule: str, at: datetime) -> str:
    """The name of the job a fire creates: one name per fire time, so a fire is never doubled."""
    return f"{schedule}-{_aware(at).astimezone(UTC):%Y%m%d%H%M}"


def job_reference(create_job: dict[str, Any] | str) -> str | None:
    """The job name of ``create_job: azureml:<name>``, or None for a job document."""
    if isinstance(create_job, str):
        return create_job[len(AZUREML_PREFIX) :]
    return None


def _trigger_document(trigger: Any) -> dict[str, Any]:
    parse_trigger(trigger, "trigger")  # raises, naming trigger.<field>
    assert isinstance(trigger, Mapping)
    return {str(key): value for key, value in trigger.items() if value is not None}


def _create_job(value: Any) -> dict[str, Any] | str:
    if isinstance(value, str) and value.startswith(AZUREML_PREFIX) and len(value) > len(AZUREML_PREFIX):
        return value
    if isinstance(value, str):
        raise validation_error(
            "create_job",
            f"create_job {value!r} must be a job document or 'azureml:<existing job name>'; a local "
            "file such as './job.yml' is read by the CLI (cloudlet schedule create --file), not the server",
        )
    if not isinstance(value, Mapping) or not value.get("type"):
        raise validation_error(
            "create_job",
            "create_job is required: a job document with its 'type' (e.g. command) or 'azureml:<job>'",
        )
    return dict(value)


def _text(value: Any, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise validation_error(where, f"{where} must be text, got {value!r}")


def _strings(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(item, str) for item in value.values()):
        raise validation_error(
            where, f"{where} must be a mapping of names to text values, e.g. {{team: vision}}"
        )
    return {str(key): item for key, item in value.items()}


def _flag(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise validation_error(where, f"{where} must be true or false, got {value!r}")


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value
