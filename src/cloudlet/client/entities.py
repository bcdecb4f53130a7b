"""Entities shaped like ``azure.ai.ml.entities``.

Computes serialise to the API's compute JSON, which uses the YAML field names of the Azure ML CLI
v2 (``size``, ``min_instances``, ``idle_time_before_scale_down`` …). Fields left ``None`` are not
sent, so the server applies its defaults. ``_from_rest`` also fills the read-only status attributes
(``provisioning_state``, ``state``, ``allocation_state``, ``current_node_count`` …).
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

from cloudlet.domain.compute.compute_types import ComputeType

# Read-only attributes every compute exposes (None until the server fills them).
STATUS_FIELDS: tuple[str, ...] = (
    "id",
    "provisioning_state",
    "provisioning_errors",
    "state",
    "allocation_state",
    "current_node_count",
    "target_node_count",
    "scaling_blocked",
    "owner",
    "warnings",
    "created_on",
    "last_modified_on",
    "created_by",
)


def _to_rest_value(value: Any) -> Any:
    if hasattr(value, "_to_rest"):
        return value._to_rest()
    if isinstance(value, dict):
        return {k: _to_rest_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_rest_value(v) for v in value]
    return value


def _prune(data: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if v is not None}


class _Settings:
    """Small value object serialised as a dict of its non-None attributes."""

    _fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        for key in self._fields:
            setattr(self, key, kwargs.pop(key, None))
        self._extra = kwargs

    def _to_rest(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self._fields}
        return _prune({**data, **self._extra})

    @classmethod
    def _from_rest(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        return cls(**data)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._to_rest() == other._to_rest()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._to_rest().items() if k != "admin_password")
        return f"{type(self).__name__}({args})"


class SshSettings(_Settings):
    """``ssh_settings``: ``admin_username``, ``admin_password``, ``ssh_key_value``,
    ``ssh_private_key_file``, ``ssh_port``."""

    _fields = ("admin_username", "admin_password", "ssh_key_value", "ssh_private_key_file", "ssh_port")


AmlComputeSshSettings = SshSettings
VirtualMachineSshSettings = SshSettings
ComputeInstanceSshSettings = SshSettings


class IdentityConfiguration(_Settings):
    """``identity``: ``type`` (``system_assigned``/``user_assigned``), ``user_assigned_identities``."""

    _fields = ("type", "user_assigned_identities")


class Compute:
    """Base compute. ``Compute._from_rest(d)`` returns the subclass matching ``d["type"]``."""

    _type: ClassVar[str] = ""
    _fields: ClassVar[tuple[str, ...]] = ("location", "description", "tags")
    _registry: ClassVar[dict[str, type[Compute]]] = {}

    id: str | None
    provisioning_state: str | None
    provisioning_errors: list[Any] | None
    state: str | None
    allocation_state: str | None
    current_node_count: int | None
    target_node_count: int | None
    scaling_blocked: dict[str, Any] | None
    owner: str | None
    warnings: list[Any] | None
    created_on: str | None
    last_modified_on: str | None
    created_by: str | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The writable YAML fields are the keyword-only parameters of the subclass's __init__.
        params = inspect.signature(cls.__init__).parameters.values()
        cls._fields = tuple(
            p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in ("name", "type")
        )
        if cls._type:
            Compute._registry[cls._type] = cls

    def __init__(
        self,
        *,
        name: str,
        type: str | None = None,
        location: str | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.type = type or self._type or None
        self.location = location
        self.description = description
        self.tags = tags
        for key in STATUS_FIELDS:
            setattr(self, key, None)
        # Unknown keyword arguments are sent as extra YAML fields (forward compatibility).
        self._extra: dict[str, Any] = kwargs
        self._raw: dict[str, Any] | None = None

    def _to_rest(self) -> dict[str, Any]:
        """The JSON body of ``PUT {ws}/computes/{name}`` (writable fields only, ``None`` omitted)."""
        body: dict[str, Any] = {"name": self.name, "type": self.type}
        for key in self._fields:
            body[key] = _to_rest_value(getattr(self, key, None))
        body.update({k: _to_rest_value(v) for k, v in self._extra.items()})
        return _prune(body)

    def _to_dict(self) -> dict[str, Any]:
        """The server's JSON for this compute when it came from the server, else ``_to_rest()``."""
        return dict(self._raw) if self._raw is not None else self._to_rest()

    @classmethod
    def _from_rest(cls, data: dict[str, Any]) -> Compute:
        kind = str(data.get("type") or "").lower()
        target = Compute._registry.get(kind, cls if cls is not Compute else _GenericCompute)
        if target is _GenericCompute:
            init_keys = {k for k in data if k not in STATUS_FIELDS}
        else:
            init_keys = {"name", "type", *target._fields}
        kwargs = {k: v for k, v in data.items() if k in init_keys}
        obj = target._construct(kwargs)
        for key, value in data.items():
            if key not in init_keys:
                setattr(obj, key, value)
        obj._raw = dict(data)
        return obj

    @classmethod
    def _construct(cls, kwargs: dict[str, Any]) -> Compute:
        if "ssh_settings" in kwargs:
            kwargs["ssh_settings"] = SshSettings._from_rest(kwargs["ssh_settings"])
        if "identity" in kwargs:
            kwargs["identity"] = IdentityConfiguration._from_rest(kwargs["identity"])
        kwargs.setdefault("name", "")
        return cls(**kwargs)

    def __repr__(self) -> str:
        shown = {"name": self.name, "type": self.type}
        for key in ("size", "location", "provisioning_state", "state", "allocation_state"):
            value = getattr(self, key, None)
            if value is not None:
                shown[key] = value
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


class _GenericCompute(Compute):
    """A compute whose ``type`` this client does not model; every field passes through."""


class AmlCompute(Compute):
    """Compute cluster (``type: amlcompute``)."""

    _type = ComputeType.AMLCOMPUTE.value

    def __init__(
        self,
        *,
        name: str,
        size: str | None = None,
        location: str | None = None,
        min_instances: int | None = None,
        max_instances: int | None = None,
        idle_time_before_scale_down: int | None = None,
        tier: str | None = None,
        identity: IdentityConfiguration | dict[str, Any] | None = None,
        ssh_public_access_enabled: bool | None = None,
        ssh_settings: SshSettings | dict[str, Any] | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("type", None)
        super().__init__(name=name, location=location, description=description, tags=tags, **kwargs)
        self.size = size
        self.min_instances = min_instances
        self.max_instances = max_instances
        self.idle_time_before_scale_down = idle_time_before_scale_down
        self.tier = tier
        self.identity = identity
        self.ssh_public_access_enabled = ssh_public_access_enabled
        self.ssh_settings = ssh_settings


class ComputeInstance(Compute):
    """Single-user workstation (``type: computeinstance``)."""

    _type = ComputeType.COMPUTE_INSTANCE.value

    def __init__(
        self,
        *,
        name: str,
        size: str | None = None,
        location: str | None = None,
        idle_time_before_shutdown_minutes: int | None = None,
        schedules: Any = None,
        setup_scripts: Any = None,
        create_on_behalf_of: Any = None,
        identity: IdentityConfiguration | dict[str, Any] | None = None,
        ssh_public_access_enabled: bool | None = None,
        ssh_settings: SshSettings | dict[str, Any] | None = None,
        enable_node_public_ip: bool | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("type", None)
        super().__init__(name=name, location=location, description=description, tags=tags, **kwargs)
        self.size = size
        self.idle_time_before_shutdown_minutes = idle_time_before_shutdown_minutes
        self.schedules = schedules
        self.setup_scripts = setup_scripts
        self.create_on_behalf_of = create_on_behalf_of
        self.identity = identity
        self.ssh_public_access_enabled = ssh_public_access_enabled
        self.ssh_settings = ssh_settings
        self.enable_node_public_ip = enable_node_public_ip


class VirtualMachineCompute(Compute):
    """Attached remote machine reached over SSH (``type: virtualmachine``)."""

    _type = ComputeType.VIRTUAL_MACHINE.value

    def __init__(
        self,
        *,
        name: str,
        resource_id: str | None = None,
        ssh_settings: SshSettings | dict[str, Any] | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("type", None)
        super().__init__(name=name, description=description, tags=tags, **kwargs)
        self.resource_id = resource_id
        self.ssh_settings = ssh_settings


class KubernetesCompute(Compute):
    """Attached Kubernetes cluster (``type: kubernetes``)."""

    _type = ComputeType.KUBERNETES.value

    def __init__(
        self,
        *,
        name: str,
        resource_id: str | None = None,
        namespace: str | None = None,
        properties: dict[str, Any] | None = None,
        identity: IdentityConfiguration | dict[str, Any] | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("type", None)
        super().__init__(name=name, description=description, tags=tags, **kwargs)
        self.resource_id = resource_id
        self.namespace = namespace
        self.properties = properties
        self.identity = identity


class Workspace:
    """A workspace: ``name``, ``location``, ``description``, ``tags`` (+ read-only ``id`` …)."""

    def __init__(
        self,
        *,
        name: str,
        location: str | None = None,
        description: str | None = None,
        tags: dict[str, str] | None = None,
        resource_group: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.name = name
        self.location = location
        self.description = description
        self.tags = tags
        self.resource_group = resource_group
        self.id: str | None = kwargs.pop("id", None)
        self.subscription_id: str | None = kwargs.pop("subscription_id", None)
        self.created_on: str | None = kwargs.pop("created_on", None)
        for key, value in kwargs.items():
            setattr(self, key, value)
        self._raw: dict[str, Any] | None = None

    def _to_rest(self) -> dict[str, Any]:
        return _prune({"location": self.location, "description": self.description, "tags": self.tags})

    def _to_dict(self) -> dict[str, Any]:
        return dict(self._raw) if self._raw is not None else {"name": self.name, **self._to_rest()}

    @classmethod
    def _from_rest(cls, data: dict[str, Any]) -> Workspace:
        obj = cls(**{k: v for k, v in data.items() if k != "name"}, name=str(data.get("name", "")))
        obj._raw = dict(data)
        return obj

    def __repr__(self) -> str:
        return f"Workspace(name={self.name!r}, resource_group={self.resource_group!r})"


class RestObject:
    """Read-only view of a JSON object: keys are attributes; ``_to_dict()`` gives the JSON back."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = dict(data)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self._data[key]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no attribute {key!r}") from None

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._data == other._data

    def _to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    @classmethod
    def _from_rest(cls, data: dict[str, Any]) -> Any:
        return cls(data)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


class VmSize(RestObject):
    """A VM size from ``list_sizes``: ``name``, ``series``, ``vcpus``, ``memory_gb``, ``gpus`` …"""


class Usage(RestObject):
    """Core usage: ``name``, ``kind``, ``current_value``, ``limit``, ``unit``, ``holders``."""


class Quota(RestObject):
    """Core quota: ``name``, ``limit``, ``unit``."""


class Lock(RestObject):
    """Management lock: ``name``, ``level`` (``CanNotDelete``/``ReadOnly``), ``notes`` …"""


class Operation(RestObject):
    """Long-running operation: ``id``, ``kind``, ``status``, ``target``, ``error`` …"""
