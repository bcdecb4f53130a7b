"""Compute definitions in the Azure ML CLI v2 YAML shapes, validated into plain models.

``parse_compute(doc)`` takes the YAML document (as a dict) and returns a typed spec or raises a
``CloudletError`` whose ``target`` is the field path and whose message says how to fix it.
Field names are Azure's, so a file written for ``az ml compute create`` is accepted as-is.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from cloudlet.domain.bounds import MAX_CLUSTER_NODES, MAX_IDLE_SECONDS, MAX_TAGS, MAX_TEXT
from cloudlet.domain.compute import compute_types
from cloudlet.domain.compute.compute_types import ComputeType
from cloudlet.domain.compute.instance_schedule import parse_schedules
from cloudlet.domain.compute.quota import Tier
from cloudlet.domain.compute.sizes import DEFAULT_SIZE
from cloudlet.domain.errors import CloudletError, document_for, validation_error
from cloudlet.domain.validation import FieldProblem, translate

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9-]{1,31}$")
INSTANCE_IDLE_MIN_MINUTES = 15
INSTANCE_IDLE_MAX_MINUTES = 3 * 24 * 60
DEFAULT_MAX_INSTANCES = 4
DEFAULT_IDLE_SCALE_DOWN_S = 120
COMPUTE_TYPES = compute_types.ALL
# A tier as Azure spells it (LowPriority, low-priority, …), folded, to the ``Tier`` value stored.
_TIER_SPELLINGS = {t.value.replace("_", ""): t.value for t in Tier}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, populate_by_name=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """true is not 1 (pydantic's lax ints took it; the document's integer does not)."""
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            kinds = typing.get_args(annotation) or (annotation,)
            if bool not in kinds and (int in kinds or float in kinds):
                raise ValueError("a number, not true or false")
        return value


class SshSettings(_Strict):
    admin_username: str | None = None
    admin_password: str | None = None
    ssh_key_value: str | None = None
    ssh_private_key_file: str | None = None
    ssh_port: int | None = Field(default=None, ge=1, le=65535)


class UserAssignedIdentity(_Strict):
    resource_id: str | None = None
    client_id: str | None = None
    principal_id: str | None = None


class Identity(_Strict):
    type: Literal["system_assigned", "user_assigned", "system_assigned,user_assigned", "none"]
    user_assigned_identities: list[UserAssignedIdentity] | None = None


class NetworkSettings(_Strict):
    vnet_name: str | None = None
    subnet: str | None = None


class ScheduleTrigger(_Strict):
    type: Literal["cron", "recurrence"]
    expression: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    time_zone: str = "UTC"
    frequency: Literal["minute", "hour", "day", "week", "month"] | None = None
    interval: int | None = Field(default=None, ge=1, le=10_000)
    schedule: dict[str, list[Any]] | None = None

    @model_validator(mode="after")
    def _check(self) -> ScheduleTrigger:
        if self.type == "cron":
            if not self.expression:
                raise ValueError("a cron trigger needs 'expression', e.g. '0 18 * * *'")
            from croniter import croniter

            if not croniter.is_valid(self.expression):
                raise ValueError(
                    f"'{self.expression}' is not a valid cron expression "
                    "(five fields: minute hour day month weekday, e.g. '0 18 * * 1-5')"
                )
        elif self.frequency is None or self.interval is None:
            raise ValueError("a recurrence trigger needs 'frequency' and 'interval'")
        return self


class ComputeStartStop(_Strict):
    action: Literal["start", "stop"]
    state: Literal["enabled", "disabled"] = "enabled"
    trigger: ScheduleTrigger


class Schedules(_Strict):
    compute_start_stop: list[ComputeStartStop] = Field(default_factory=list)


class ScriptReference(_Strict):
    path: str | None = None
    command: str | None = None
    timeout_minutes: int = Field(default=30, ge=1, le=120)

    @model_validator(mode="after")
    def _one_of(self) -> ScriptReference:
        if bool(self.path) == bool(self.command):
            raise ValueError("give exactly one of 'path' or 'command'")
        return self


class SetupScripts(_Strict):
    creation_script: ScriptReference | None = None
    startup_script: ScriptReference | None = None


class OnBehalfOf(_Strict):
    user_object_id: str
    user_tenant_id: str | None = None


class _ComputeBase(_Strict):
    schema_: str | None = Field(default=None, alias="$schema")
    name: str
    location: str | None = None
    description: str | None = Field(default=None, max_length=MAX_TEXT)
    tags: dict[str, str] = Field(default_factory=dict, max_length=MAX_TAGS)
    identity: Identity | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_PATTERN.fullmatch(value):
            raise ValueError(
                "name must be 2–32 characters, start with a letter, and contain only letters, digits and '-'"
            )
        return value


class AmlComputeSpec(_ComputeBase):
    type: Literal["amlcompute"]
    size: str = DEFAULT_SIZE
    min_instances: int = Field(default=0, ge=0, le=MAX_CLUSTER_NODES)
    max_instances: int = Field(default=DEFAULT_MAX_INSTANCES, ge=1, le=MAX_CLUSTER_NODES)
    idle_time_before_scale_down: int = Field(default=DEFAULT_IDLE_SCALE_DOWN_S, ge=0, le=MAX_IDLE_SECONDS)
    tier: Literal["dedicated", "low_priority"] = "dedicated"
    ssh_public_access_enabled: StrictBool = False
    ssh_settings: SshSettings | None = None
    network_settings: NetworkSettings | None = None
    enable_node_public_ip: StrictBool = True

    @field_validator("tier", mode="before")
    @classmethod
    def _tier(cls, value: Any) -> Any:
        if isinstance(value, str):
            folded = value.replace("_", "").replace("-", "").lower()
            return _TIER_SPELLINGS.get(folded, value)
        return value

    @model_validator(mode="after")
    def _bounds(self) -> AmlComputeSpec:
        if self.max_instances < self.min_instances:
            raise FieldProblem(
                "max_instances",
                f"max_instances ({self.max_instances}) is less than min_instances "
                f"({self.min_instances}); set max_instances ≥ min_instances",
            )
        return self


class ComputeInstanceSpec(_ComputeBase):
    type: Literal["computeinstance"]
    size: str = DEFAULT_SIZE
    idle_time_before_shutdown_minutes: int | None = None
    idle_time_before_shutdown: str | None = None
    schedules: Schedules | None = None
    setup_scripts: SetupScripts | None = None
    create_on_behalf_of: OnBehalfOf | None = None
    ssh_public_access_enabled: StrictBool = False
    ssh_settings: SshSettings | None = None
    network_settings: NetworkSettings | None = None
    enable_node_public_ip: StrictBool = True
    enable_sso: StrictBool = True
    enable_root_access: StrictBool = True
    enable_os_patching: StrictBool = False
    release_quota_on_stop: StrictBool = False
    custom_applications: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _idle(self) -> ComputeInstanceSpec:
        minutes = self.idle_time_before_shutdown_minutes
        field = "idle_time_before_shutdown_minutes"
        if minutes is None and self.idle_time_before_shutdown is not None:
            field = "idle_time_before_shutdown"
            minutes = iso_minutes(self.idle_time_before_shutdown, field)
            self.idle_time_before_shutdown_minutes = minutes
        if minutes is not None and not INSTANCE_IDLE_MIN_MINUTES <= minutes <= INSTANCE_IDLE_MAX_MINUTES:
            raise FieldProblem(
                field,
                f"idle shutdown must be between {INSTANCE_IDLE_MIN_MINUTES} minutes and 3 days "
                f"({INSTANCE_IDLE_MAX_MINUTES} minutes); got {minutes} minutes",
            )
        if self.ssh_public_access_enabled and not (self.ssh_settings and self.ssh_settings.ssh_key_value):
            raise FieldProblem(
                "ssh_settings.ssh_key_value",
                "ssh_public_access_enabled needs ssh_settings.ssh_key_value (an OpenSSH public key)",
            )
        return self

    @model_validator(mode="after")
    def _schedules(self) -> ComputeInstanceSpec:
        # The trigger models check shapes; time zones, start/end times and recurrence patterns are
        # checked by the module that evaluates them, so both agree on what is valid.
        if self.schedules is None:
            return self
        try:
            parse_schedules(self.schedules.model_dump(mode="json")["compute_start_stop"])
        except CloudletError as exc:
            raise FieldProblem(exc.target or "schedules", exc.message) from None
        return self


class VirtualMachineSpec(_ComputeBase):
    type: Literal["virtualmachine"]
    resource_id: str | None = None
    address: str | None = None
    ssh_settings: SshSettings | None = None
    # cloudlet's own: the VM sees the server's data folder at the same path (else jobs' data
    # moves over the server's HTTPS API; docs/providers.md).
    shared_filesystem: StrictBool = False

    @model_validator(mode="after")
    def _target(self) -> VirtualMachineSpec:
        if not (self.resource_id or self.address):
            raise FieldProblem(
                "resource_id", "an attached machine needs 'resource_id' (or 'address': host name or IP)"
            )
        return self


class KubernetesSpec(_ComputeBase):
    type: Literal["kubernetes"]
    resource_id: str | None = None
    namespace: str = "default"


ComputeSpec = AmlComputeSpec | ComputeInstanceSpec | VirtualMachineSpec | KubernetesSpec
_SPEC_BY_TYPE: dict[str, type[_ComputeBase]] = {
    ComputeType.AMLCOMPUTE: AmlComputeSpec,
    ComputeType.COMPUTE_INSTANCE: ComputeInstanceSpec,
    ComputeType.VIRTUAL_MACHINE: VirtualMachineSpec,
    ComputeType.KUBERNETES: KubernetesSpec,
}


@dataclass(frozen=True)
class ClusterScaling:
    """What a cluster's reconciler, quota and view read of its stored spec, typed, with the
    defaults of ``AmlComputeSpec`` (one place: a stored document written before a field existed
    reads as the model would have filled it)."""

    min_instances: int
    max_instances: int
    idle_time_before_scale_down_s: float
    tier: str  # "dedicated" | "low_priority" (``domain.compute.quota.Tier`` values)


_AML_FIELDS = AmlComputeSpec.model_fields


def cluster_scaling(doc: Mapping[str, Any]) -> ClusterScaling:
    def read(name: str) -> Any:
        value = doc.get(name)
        return _AML_FIELDS[name].default if value is None else value

    return ClusterScaling(
        min_instances=int(read("min_instances")),
        max_instances=int(read("max_instances")),
        idle_time_before_scale_down_s=float(read("idle_time_before_scale_down")),
        tier=str(read("tier")),
    )


def iso_minutes(value: str, field: str) -> int:
    """'PT30M' / 'PT1H30M' / 'P1D' → whole minutes."""
    match = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?)?", value)
    if not match or value in ("P", "PT"):
        raise FieldProblem(field, f"'{value}' is not an ISO 8601 duration such as 'PT30M'")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return days * 1440 + hours * 60 + minutes + seconds // 60


def seconds_to_iso(seconds: int) -> str:
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    out = "PT" + (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    return out + (f"{secs}S" if secs or out == "PT" else "")


def parse_compute(doc: Any, name: str | None = None) -> ComputeSpec:
    """Validate a compute document; ``name`` (from the URL) wins over a missing name in the body."""
    doc = document_for(doc, name, "compute")
    kind = doc.get("type")
    if not isinstance(kind, str) or kind.lower() not in _SPEC_BY_TYPE:
        raise validation_error(
            "type",
            f"unknown compute type {kind!r}; use one of: {', '.join(COMPUTE_TYPES)}",
            code="InvalidComputeType",
        )
    doc["type"] = kind.lower()
    model = _SPEC_BY_TYPE[doc["type"]]
    try:
        return model.model_validate(doc)  # type: ignore[return-value]
    except ValidationError as exc:
        raise translate(exc, model, f"type {doc['type']}") from None
    except FieldProblem as exc:  # pragma: no cover - pydantic wraps these, kept for safety
        raise validation_error(exc.field, exc.message) from None


def spec_to_doc(spec: ComputeSpec) -> dict[str, Any]:
    """The stored/echoed form: YAML field names, defaults filled in, secrets and $schema dropped."""
    doc = spec.model_dump(mode="json", exclude={"schema_"}, exclude_none=True)
    ssh = doc.get("ssh_settings")
    if isinstance(ssh, dict):
        ssh.pop("admin_password", None)
    return doc


def doc_to_spec(doc: dict[str, Any]) -> ComputeSpec:
    return _SPEC_BY_TYPE[doc["type"]].model_validate(doc)  # type: ignore[return-value]
