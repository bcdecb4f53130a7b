"""A job's ``queue_settings`` in Azure ML's shape (pure): ``{job_tier, priority}``.

Azure ML's SDK (``azure.ai.ml.entities.QueueSettings``) takes ``priority`` low/medium/high and sends
it as 1/2/3 (``JobPriorityValues``); ``job_tier`` is spot/basic/standard/premium/null on the entity and
Spot/Basic/Standard/Premium/Null on the wire (``JobTierNames``). Both spellings are accepted here,
case folded, and the wire's camelCase ``jobTier`` key too. Defaults are Azure's: priority medium;
tier standard (``null`` and an unset tier both mean "the default tier").

Cloudlet's use: a higher priority is placed first; a spot job runs only on capacity nobody else
wants — placed after every other job of its compute, and preempted first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class JobTier(StrEnum):
    SPOT = "spot"
    BASIC = "basic"
    STANDARD = "standard"
    PREMIUM = "premium"


PRIORITY_VALUES: dict[str, int] = {"low": 1, "medium": 2, "high": 3}
PRIORITY_NAMES: dict[int, str] = {value: name for name, value in PRIORITY_VALUES.items()}
DEFAULT_PRIORITY = "medium"
DEFAULT_TIER = JobTier.STANDARD
_TIER_NAMES = (*tuple(tier.value for tier in JobTier), "null")


class QueueSettingsError(ValueError):
    """A bad ``queue_settings`` value; the message names the field and the allowed values."""


@dataclass(frozen=True)
class QueueSettings:
    job_tier: JobTier = DEFAULT_TIER
    priority: int = PRIORITY_VALUES[DEFAULT_PRIORITY]  # 1 low, 2 medium, 3 high

    @property
    def spot(self) -> bool:
        return self.job_tier is JobTier.SPOT

    @property
    def priority_name(self) -> str:
        return PRIORITY_NAMES[self.priority]

    def to_dict(self) -> dict[str, str]:
        """The SDK entity's shape (what ``job show`` prints and the YAML takes back)."""
        return {"job_tier": self.job_tier.value, "priority": self.priority_name}


def parse_queue_settings(value: Mapping[str, Any] | None, where: str = "queue_settings") -> QueueSettings:
    """``queue_settings`` from YAML, the SDK or the REST wire; ``None`` or ``{}`` gives the defaults.
    Raises ``QueueSettingsError`` naming ``where.field`` and the allowed values."""
    if value is None:
        return QueueSettings()
    if not isinstance(value, Mapping):
        raise QueueSettingsError(f"{where}: give a mapping with job_tier and/or priority, not {value!r}")
    fields = dict(value)
    if "jobTier" in fields and "job_tier" not in fields:
        fields["job_tier"] = fields.pop("jobTier")
    unknown = sorted(set(fields) - {"job_tier", "priority"})
    if unknown:
        raise QueueSettingsError(f"{where}.{unknown[0]}: unknown field; allowed: job_tier, priority")
    return QueueSettings(
        job_tier=parse_job_tier(fields.get("job_tier"), f"{where}.job_tier"),
        priority=parse_priority(fields.get("priority"), f"{where}.priority"),
    )


def shown(value: object) -> dict[str, str]:
    """A stored ``queue_settings`` as ``job show`` and the SDK entity show it: ``priority`` always
    (medium when unset), ``job_tier`` when one was set (unset or ``null``: Azure's default tier).
    A value this parser refuses (none is stored: submission parses it) is shown as it is."""
    fields = value if isinstance(value, Mapping) else {}
    if not fields:  # most jobs set none: a job list shows this for each row
        return {"priority": PRIORITY_NAMES[PRIORITY_VALUES[DEFAULT_PRIORITY]]}
    try:
        parsed = parse_queue_settings(fields)
    except QueueSettingsError:
        return {str(k): str(v) for k, v in fields.items()}
    out = {"priority": parsed.priority_name}
    tier = fields.get("job_tier", fields.get("jobTier"))
    if isinstance(tier, str) and tier.strip().lower() not in ("", "null"):
        out["job_tier"] = parsed.job_tier.value
    return out


def parse_job_tier(value: object, where: str = "queue_settings.job_tier") -> JobTier:
    if value is None:
        return DEFAULT_TIER
    name = value.strip().lower() if isinstance(value, str) else None
    if name == "null" or name == "":
        return DEFAULT_TIER
    if name not in _TIER_NAMES:
        raise QueueSettingsError(f"{where}: {value!r} is not a job tier; allowed: {', '.join(_TIER_NAMES)}")
    return JobTier(name)


def parse_priority(value: object, where: str = "queue_settings.priority") -> int:
    """low/medium/high (any case) or the wire's 1/2/3 → 1/2/3; unset → medium."""
    if value is None:
        return PRIORITY_VALUES[DEFAULT_PRIORITY]
    if isinstance(value, bool):
        pass  # True is an int in Python, not a priority
    elif isinstance(value, int) and value in PRIORITY_NAMES:
        return value
    elif isinstance(value, str):
        name = value.strip().lower()
        if name in PRIORITY_VALUES:
            return PRIORITY_VALUES[name]
        if name.isdigit() and int(name) in PRIORITY_NAMES:
            return int(name)
    raise QueueSettingsError(f"{where}: {value!r} is not a priority; allowed: low, medium, high (or 1, 2, 3)")


__all__ = [
    "DEFAULT_PRIORITY",
    "DEFAULT_TIER",
    "PRIORITY_VALUES",
    "JobTier",
    "QueueSettings",
    "QueueSettingsError",
    "parse_job_tier",
    "parse_priority",
    "parse_queue_settings",
    "shown",
]
